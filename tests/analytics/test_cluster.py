"""`metakraft audit` against a real Spark standalone cluster (master and worker
processes on loopback): the readers and the audit run in the worker's executors."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.invariants import INVARIANTS
from controller.records import PartitionChangeRecord
from tests.analytics.history import Known
from tests.analytics.plant import copy_log, plant, record_count
from tests.analytics.standalone import StandaloneCluster, check_java

pytestmark = [pytest.mark.spark, pytest.mark.slow]


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


def test_audit_runs_on_a_standalone_cluster(cluster: StandaloneCluster,
                                            log_dir: tuple[Path, Known],
                                            tmp_path: Path) -> None:
    """The documented cluster route, run: the package installed in the Python the
    executors use (`PYSPARK_PYTHON`), the log at the same path for driver and workers,
    the cluster's settings tuned with `--conf`. A planted violation must come back
    from the executors' checks: exit 1, that check and no other."""
    copy = copy_log(log_dir[0], tmp_path / "log")
    plant(copy, [PartitionChangeRecord(topic_id=log_dir[1].topic_ids["orders"],
                                       partition_id=0, leader=0)])
    records = record_count(copy)
    out = tmp_path / "report"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "metakraft"), "audit", "--log-dir", str(copy),
         "--out", str(out), "--master", cluster.master_url, "--driver-memory", "1g",
         "--conf", "spark.executor.memory=1g", "--conf", "spark.sql.shuffle.partitions=4"],
        capture_output=True, text=True, timeout=900, env=env, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"starting Spark ({cluster.master_url})" in done.stderr
    verdicts = [line.split() for line in done.stdout.splitlines()]
    assert verdicts == [["VIOLATED", name, "(1", "rows)"] if name == "leader_in_isr_subset_replicas"
                        else ["ok", name] for name in INVARIANTS]
    report = (out / "report.md").read_text()
    assert f"- records: {records};" in report
    assert "leader_in_isr_subset_replicas: **1 violating rows**" in report
    assert report.count("violating rows") == 1
    # The work ran in the worker's executors: one application, with executor logs.
    [app] = cluster.applications()
    assert list(app.glob("*/stderr")), f"no executor logs under {app}"
