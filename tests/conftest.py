"""Shared by every suite: captured log lines read as the daemons write them; no
collector-pause callback left behind; the simulations' coverage judged once per
session, over every worker."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from controller.log import formatter
from tests.simulation import coverage


@pytest.fixture(autouse=True)
def _logfmt_caplog(caplog: pytest.LogCaptureFixture) -> None:
    # Structured events reach `logging` unrendered; render them as a daemon's log
    # file does (logfmt), so tests match `event=name key=value` in `caplog.text`.
    caplog.handler.setFormatter(formatter("kv"))


# Simulation counts that pytest-xdist workers handed back as they finished.
_WORKER_COUNTS_KEY = "simulation_coverage"
_from_workers: dict[str, Counter[str]] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    # xdist's hook, in the controlling process: a worker finished.
    output = getattr(node, "workeroutput", {})
    if _WORKER_COUNTS_KEY in output:
        coverage.merge(_from_workers, json.loads(output[_WORKER_COUNTS_KEY]))


def _judge_simulation_coverage(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: hand the counts over
        session.config.workeroutput[_WORKER_COUNTS_KEY] = json.dumps(  # type: ignore[attr-defined]
            {suite: dict(c) for suite, c in coverage.COUNTS.items()})
        return
    counts: dict[str, Counter[str]] = {}
    coverage.merge(counts, {suite: dict(c) for suite, c in coverage.COUNTS.items()})
    coverage.merge(counts, {suite: dict(c) for suite, c in _from_workers.items()})
    lines, problems = coverage.judge(counts)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and (lines or problems):
        reporter.write_sep("-", "simulation coverage")
        for line in lines:
            reporter.write_line(line)
        for line in problems:
            reporter.write_line(f"FAILED {line}", red=True)
        if problems:
            reporter.write_line("the run fails: a simulation left paths unexercised "
                                "(tests/simulation/coverage.py)", red=True)
    if problems and session.exitstatus == pytest.ExitCode.OK:
        # A seed that passes proves little if what it exists for never happened.
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _judge_simulation_coverage(session)
    # Tests that build a metrics registry in this process leave the collector-pause
    # callback installed; the interpreter's last collections of a whole test run's
    # garbage would otherwise print gc_pause warnings after the summary.
    import gc

    from controller import metrics_common as metrics

    if metrics._on_gc in gc.callbacks:
        gc.callbacks.remove(metrics._on_gc)
