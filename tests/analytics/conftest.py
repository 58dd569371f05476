"""Fixtures of the Spark audit tests: ONE SparkSession for the whole run, and two real
logs: the scripted history's (`log_dir`, exact answers known) and a real cluster's
(`dev_run`: `metakraft dev --scenario`, real processes).

Session start costs 8-11 s and the first Python-source query ~10 s more on this
machine, so the session is session-scoped: under pytest-xdist, one per worker that
runs such tests. Java is checked up front: without a JDK 17+ every test fails with
that message rather than being skipped.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.analytics.history import Known, build_log
from tests.analytics.standalone import check_java
from tests.support.dev_cluster import run_scenario


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    check_java()
    # Executors (Python workers) must use this interpreter: it is the one with pyarrow
    # and this package installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    import analytics
    from analytics.report import SMALL_LOG_JAVA_OPTIONS

    builder = (SparkSession.builder.master("local[2]").appName("metakraft-tests")
               .config("spark.ui.enabled", "false")
               # The test logs are tiny: one shuffle partition, no adaptive re-planning
               # and no whole-stage code generation (compiling generated code costs more
               # than running these plans interpreted) keep each query sub-second.
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.sql.codegen.wholeStage", "false")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "1g")
               # Tiny logs: what a small audit's driver runs (C1 code, serial GC).
               .config("spark.driver.extraJavaOptions", SMALL_LOG_JAVA_OPTIONS))
    try:
        session = builder.getOrCreate()
    except PySparkRuntimeError as exc:
        # Seen once under pytest-xdist: the JVM launched by a worker that had run
        # gRPC tests exited at once, silently (gRPC logged an epoll EBADF in the same
        # instant). A second launch is tried, and said.
        if "JAVA_GATEWAY_EXITED" not in str(exc):
            raise
        warnings.warn(f"the Spark JVM exited at start ({exc}); starting it again",
                      stacklevel=1)
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    analytics.register(session)
    yield session
    session.stop()


@attrs.frozen
class DevRun:
    """A finished `metakraft dev --scenario` run: its data directory and what its tour
    printed (which broker it killed, where it moved tour-a-0)."""

    data_dir: Path
    victim: int
    original: tuple[int, ...]
    target: tuple[int, ...]

    def controller_logs(self) -> list[Path]:
        """Each controller's data directory (holding metadata/), by node id."""
        return sorted(p / "data" for p in self.data_dir.glob("controller-*"))


@pytest.fixture(scope="session")
def dev_run(tmp_path_factory: pytest.TempPathFactory) -> DevRun:
    """The log of a real cluster: `metakraft dev --scenario` (3 controller and 3 broker
    processes on loopback; a broker killed and restarted, a reassignment), run to
    its end. The tour picks its victim at run time, so the facts come from its output."""
    data_dir = tmp_path_factory.mktemp("dev-cluster") / "dev"
    code, out = run_scenario(data_dir)
    assert code == 0 and "scenario passed" in out, out
    killed = re.search(r"kill -9 broker (\d+) \(leader of tour-a-0", out)
    moved = re.search(r"reassign tour-a-0 from replicas ([\d,]+) to ([\d,]+)", out)
    assert killed is not None and moved is not None, out
    return DevRun(data_dir, int(killed.group(1)),
                  tuple(int(b) for b in moved.group(1).split(",")),
                  tuple(int(b) for b in moved.group(2).split(",")))


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Known]:
    """The real log of the scripted history (tests/analytics/history.py)."""
    root = tmp_path_factory.mktemp("audit-log")
    known = build_log(root)
    return root, known
