"""`WakeTimer`: one event-loop timer, set to the time its owner next needs.

The Raft driver and the controller tick when a timer of theirs is due, not on a
fixed period (an idle process then wakes a few times a second). Each sets the timer
after every turn to its next deadline, sooner or later than the one set (a fetch
answered before its timeout must not wake the node at that timeout), except that a
time within `SLACK_S` after the one set leaves it alone: no re-arm on every turn of
a busy node, at the cost of a tick that may find nothing due.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# A timer due this little before the time asked stays (firing a little early costs
# one tick that finds nothing due, which is cheaper than re-arming every turn).
SLACK_S = 0.005


class WakeTimer:
    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None

    def wake_in(self, delay_s: float) -> None:
        """Call back `delay_s` from now, in place of the time set before: a deadline
        that moved later (a fetch answered before its timeout) costs no wake. Left
        alone when within `SLACK_S` of the time set (no re-arm per turn under load)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay_s)
        handle = self._handle
        if handle is not None:
            if handle.when() <= when <= handle.when() + SLACK_S:
                return
            handle.cancel()
        self._handle = loop.call_at(when, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self._callback()
