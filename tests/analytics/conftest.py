"""Fixtures of the Spark audit tests: ONE SparkSession for the whole run, one real log.

Session start costs 8-11 s and the first Python-source query ~10 s more on this
machine, so the session is session-scoped (and pytest-xdist must not be used here).
Java is checked up front: without a JDK 17+ every test fails with that message
rather than being skipped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.analytics.history import Known, build_log
from tests.analytics.standalone import check_java


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    check_java()
    # Executors (Python workers) must use this interpreter: it is the one with pyarrow
    # and this package installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import analytics

    session = (SparkSession.builder.master("local[2]").appName("metakraft-tests")
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
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    analytics.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Known]:
    """The real log of the scripted history (tests/analytics/history.py)."""
    root = tmp_path_factory.mktemp("audit-log")
    known = build_log(root)
    return root, known
