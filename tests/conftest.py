"""Shared by every suite: captured log lines read as the daemons write them; no
collector-pause callback left behind."""

from __future__ import annotations

import pytest

from controller.log import formatter


@pytest.fixture(autouse=True)
def _logfmt_caplog(caplog: pytest.LogCaptureFixture) -> None:
    # Structured events reach `logging` unrendered; render them as a daemon's log
    # file does (logfmt), so tests match `event=name key=value` in `caplog.text`.
    caplog.handler.setFormatter(formatter("kv"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Tests that build a metrics registry in this process leave the collector-pause
    # callback installed; the interpreter's last collections of a whole test run's
    # garbage would otherwise print gc_pause warnings after the summary.
    import gc

    from controller import metrics_common as metrics

    if metrics._on_gc in gc.callbacks:
        gc.callbacks.remove(metrics._on_gc)
