"""The test kit's one way to wait: poll a condition, bounded.

`wait_until(cond, timeout_s, what)` calls `cond` until it returns something truthy
and returns that. An exception from `cond` counts as "not yet" (a process may be
restarting, a port not bound yet); at the deadline the AssertionError names what
was awaited and the last value or exception seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(cond: Callable[[], T | None], timeout_s: float, what: str,
               interval_s: float = 0.02) -> T:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = cond()
        except Exception as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what} "
                                 f"(last: {last!r})")
        time.sleep(interval_s)
