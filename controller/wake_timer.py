"""`WakeTimer`: one event-loop timer that fires at the soonest time asked of it.

The Raft driver and the controller tick when a timer of theirs is due, not on a
fixed period (an idle process then wakes a few times a second). Each asks after
every turn "wake me within d": the timer moves only when that is sooner than the
one set, so asking is cheap; a timer that fires early (the deadline moved later
meanwhile) costs one tick that finds nothing due, after which the owner asks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class WakeTimer:
    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None

    def wake_within(self, delay_s: float) -> None:
        """Call back at most `delay_s` from now (sooner if already set sooner)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay_s)
        handle = self._handle
        if handle is not None:
            if handle.when() <= when:
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
