"""`CopyThrottle`: the tier copier's upload bandwidth limit (pure: clock in, delay out).

A token bucket of one second's worth of bytes: an upload of n bytes takes n tokens,
the bucket refills at `bytes_per_second`, and an upload that finds too few waits
until it has them. An object larger than the bucket is let through whole and paid
for after (the bucket goes negative), so the average holds and nothing is split.
"""

from __future__ import annotations

from collections.abc import Callable


class CopyThrottle:
    def __init__(self, bytes_per_second: int, clock_s: Callable[[], float]) -> None:
        assert bytes_per_second > 0, bytes_per_second
        self.bytes_per_second = bytes_per_second
        self._clock_s = clock_s
        self._tokens = float(bytes_per_second)
        self._at_s = clock_s()

    def _refill(self) -> None:
        now = self._clock_s()
        self._tokens = min(float(self.bytes_per_second),
                           self._tokens + (now - self._at_s) * self.bytes_per_second)
        self._at_s = now

    def delay_s(self) -> float:
        """How long to wait before the next upload may start (0: now)."""
        self._refill()
        return 0.0 if self._tokens >= 0 else -self._tokens / self.bytes_per_second

    def took(self, nbytes: int) -> None:
        """An upload of `nbytes` started."""
        assert nbytes >= 0
        self._refill()
        self._tokens -= nbytes
