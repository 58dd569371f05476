"""Shared by every suite: captured log lines read as the daemons write them."""

from __future__ import annotations

import pytest

from controller.log import formatter


@pytest.fixture(autouse=True)
def _logfmt_caplog(caplog: pytest.LogCaptureFixture) -> None:
    # Structured events reach `logging` unrendered; render them as a daemon's log
    # file does (logfmt), so tests match `event=name key=value` in `caplog.text`.
    caplog.handler.setFormatter(formatter("kv"))
