"""`Backoff`: the one exponential backoff with jitter (the admin client's retries,
the broker's registration and heartbeats, the tier copier's failed rounds).

Pure: the randomness comes in as `jitter`, a function returning a float in [0, 1)
(`random.random` in a daemon, a seeded generator's in the simulation), so the
broker's lifecycle machine stays free of I/O and randomness.

Each delay is drawn from [step / 2, step) ("equal jitter"): never less than half
the step, so retries keep backing off, and never the same across clients that
failed together, so they do not retry in lockstep. The step starts at `first` and
doubles per failure up to `maximum`; `reset` after a success.
"""

from __future__ import annotations

from collections.abc import Callable


class Backoff:
    __slots__ = ("_jitter", "_step", "first", "maximum")

    def __init__(self, first: float, maximum: float, jitter: Callable[[], float]) -> None:
        if not 0 < first <= maximum:
            raise ValueError(f"backoff needs 0 < first <= maximum, got {first}, {maximum}")
        self.first = first
        self.maximum = maximum
        self._jitter = jitter
        self._step = first

    def next_delay(self) -> float:
        """The wait before the next attempt (in the unit of `first`), and the step
        doubled for the one after."""
        fraction = self._jitter()
        assert 0.0 <= fraction < 1.0, fraction
        delay = self._step / 2 * (1.0 + fraction)
        self._step = min(self._step * 2, self.maximum)
        assert self.first / 2 <= delay < self.maximum, (delay, self.first, self.maximum)
        return delay

    def reset(self) -> None:
        """After a success: the next failure waits about `first` again."""
        self._step = self.first
