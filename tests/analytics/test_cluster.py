"""`metakraft audit` against a real Spark standalone cluster (master and worker
processes on loopback): the readers and the audit run in the worker's executors."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.invariants import INVARIANTS
from analytics.report import SMALL_LOG_JAVA_OPTIONS
from controller.records import PartitionChangeRecord
from tests.analytics.history import Known
from tests.analytics.plant import copy_log, plant, record_count
from tests.analytics.standalone import StandaloneCluster, check_java

# Each runs `metakraft audit` on a standalone Spark cluster (master, worker and the
# audit: three JVMs); beside other workers on 2 cores one took 287 s.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    check_java()
    running = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), worker_cores=2,
                                worker_memory="2g")
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _planted_log(log_dir: tuple[Path, Known], at: Path) -> Path:
    """A copy of the test log with one violation of leader_in_isr_subset_replicas."""
    copy = copy_log(log_dir[0], at)
    plant(copy, [PartitionChangeRecord(topic_id=log_dir[1].topic_ids["orders"],
                                       partition_id=0, leader=0)])
    return copy


def _audit(cluster: StandaloneCluster, log: Path, out: Path, executor_python: Path,
           *extra: str) -> subprocess.CompletedProcess[str]:
    """`metakraft audit` as its own process against the cluster, the cluster's settings
    tuned with `--conf`, the executors running `executor_python`."""
    env = {**os.environ, "PYSPARK_PYTHON": str(executor_python)}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return subprocess.run(
        [str(Path(sys.executable).parent / "metakraft"), "audit", "--log-dir", str(log),
         "--out", str(out), "--master", cluster.master_url, "--driver-memory", "1g",
         "--conf", "spark.executor.memory=1g", "--conf", "spark.sql.shuffle.partitions=4",
         # The executors run a tiny log's tasks: C1's code is fast enough (as the
         # driver's, `SMALL_LOG_JAVA_OPTIONS`).
         "--conf", f"spark.executor.extraJavaOptions={SMALL_LOG_JAVA_OPTIONS}",
         *extra],
        capture_output=True, text=True, timeout=900, env=env, check=False)


def _assert_planted_violation_found(done: subprocess.CompletedProcess[str], log: Path,
                                    out: Path) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    verdicts = [line.split() for line in done.stdout.splitlines()]
    assert verdicts == [["VIOLATED", name, "(1", "rows)"] if name == "leader_in_isr_subset_replicas"
                        else ["ok", name] for name in INVARIANTS]
    report = (out / "report.md").read_text()
    assert f"({record_count(log)} records)" in report
    assert "leader_in_isr_subset_replicas: **1 violating rows**" in report
    assert report.count("violating rows") == 1


def test_audit_runs_on_a_standalone_cluster(cluster: StandaloneCluster,
                                            log_dir: tuple[Path, Known],
                                            tmp_path: Path) -> None:
    """The documented cluster route, run: the package installed in the Python the
    executors use (`PYSPARK_PYTHON`), the log at the same path for driver and workers.
    A planted violation must come back from the executors' checks: exit 1, that
    check and no other."""
    log = _planted_log(log_dir, tmp_path / "log")
    done = _audit(cluster, log, tmp_path / "report", Path(sys.executable))
    _assert_planted_violation_found(done, log, tmp_path / "report")
    assert f"starting Spark ({cluster.master_url})" in done.stderr
    # The work ran in the worker's executors: one application, with executor logs.
    [app] = cluster.applications()
    assert list(app.glob("*/stderr")), f"no executor logs under {app}"


def _python_without_metakraft(folder: Path) -> Path:
    """An interpreter for the executors with this venv's packages but not this one:
    site-packages on PYTHONPATH and no `site` processing (`-S`), so the editable
    install's path hook is never loaded."""
    site_packages = sysconfig.get_paths()["purelib"]
    script = folder / "python-without-metakraft"
    script.write_text("#!/bin/sh\n"
                      f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site_packages}" '
                      f'exec {sys.executable} -S "$@"\n')
    script.chmod(0o755)
    probe = "import pyarrow, numpy, google.protobuf, crc32c, attrs, pyspark; import {}"
    for name, importable in (("pyspark", True), ("analytics", False), ("controller", False)):
        found = subprocess.run([str(script), "-c", probe.format(name)], cwd=folder,
                               capture_output=True, text=True, check=False)
        assert (found.returncode == 0) == importable, (name, found.stderr)
    return script


def test_ship_code_runs_the_audit_where_the_package_is_not_installed(
        cluster: StandaloneCluster, log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    """The --py-files route: executors whose Python has the dependencies but not
    metakraft. Without --ship-code the audit cannot run and says why (exit 2); with
    it, the planted violation comes back from the executors as in the installed route."""
    python = _python_without_metakraft(tmp_path)
    log = _planted_log(log_dir, tmp_path / "log")
    refused = _audit(cluster, log, tmp_path / "refused", python)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert ("error: the audit could not run: the executors' Python cannot import metakraft "
            "(No module named 'analytics')") in refused.stderr, refused.stderr[-3000:]
    assert not (tmp_path / "refused" / "report.md").exists()
    shipped = _audit(cluster, log, tmp_path / "report", python, "--ship-code")
    _assert_planted_violation_found(shipped, log, tmp_path / "report")
    assert "code for the executors: " in shipped.stderr
