"""`TimelineInteger` and `TimelineLong`: snapshottable integer counters.

A `TimelineObject[int]` with ``increment()`` and ``decrement()``. Kafka has both a
32-bit and a 64-bit class; Python ints are unbounded, so the two behave the same and
``TimelineLong`` exists for the familiar name.

Not thread-safe; the past is read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from timeline.object import TimelineObject

if TYPE_CHECKING:
    from timeline.registry import SnapshotRegistry


class TimelineInteger(TimelineObject[int]):
    """An int with history."""

    __slots__ = ()

    def __init__(self, registry: SnapshotRegistry, initial: int = 0) -> None:
        if not isinstance(initial, int) or isinstance(initial, bool):
            raise TypeError(f"initial must be an int, got {type(initial).__name__}")
        super().__init__(registry, initial)

    def increment(self) -> None:
        """Add one to the latest value."""
        self.set(self._value + 1)

    def decrement(self) -> None:
        """Subtract one from the latest value."""
        self.set(self._value - 1)


class TimelineLong(TimelineInteger):
    """The same as `TimelineInteger` (Python ints do not overflow)."""

    __slots__ = ()
