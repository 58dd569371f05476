"""`TimelineSortedMap`: a snapshottable map with ordered iteration, on SortedDict.

Same read API as `TimelineHashMap` (reads take an optional epoch), plus ordered reads
that are ordered at every epoch: iteration and ``keys/items/values`` in key order,
``irange(minimum, maximum, inclusive, reverse, epoch)``, ``first_key(epoch)`` and
``last_key(epoch)``. The latest state is a ``sortedcontainers.SortedDict``; history is
kept as copy-on-write deltas in the snapshots (see ``timeline.base_map``). An ordered
read at an epoch merges the latest keys (minus the changed ones) with the sorted changed
keys: O(size of the range + c log c) for c keys changed since the epoch.

Not thread-safe; the past is read-only.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeVar

from sortedcontainers import SortedDict

from timeline.base_map import BaseTimelineMap
from timeline.delta import ABSENT

if TYPE_CHECKING:
    from timeline.registry import SnapshotRegistry

K = TypeVar("K")
V = TypeVar("V")


def _in_range(key: object, minimum: object, maximum: object, inclusive: tuple[bool, bool]) -> bool:
    lo_inclusive, hi_inclusive = inclusive
    below = minimum is not None and (key < minimum if lo_inclusive else key <= minimum)  # type: ignore[operator]
    above = maximum is not None and (key > maximum if hi_inclusive else key >= maximum)  # type: ignore[operator]
    return not (below or above)


class TimelineSortedMap(BaseTimelineMap[K, V]):
    """A sorted map with history; keys must be mutually comparable.

    `keys`, `items` and `values` (inherited) iterate in key order at every epoch:
    the latest state is a SortedDict and `_state_at` fills its dict in key order.
    """

    __slots__ = ()

    def __init__(self, registry: SnapshotRegistry) -> None:
        super().__init__(registry, SortedDict())

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __reversed__(self) -> Iterator[K]:
        return reversed(self._data)

    # -- ordered reads ------------------------------------------------------------------

    def irange(
        self,
        minimum: K | None = None,
        maximum: K | None = None,
        inclusive: tuple[bool, bool] = (True, True),
        reverse: bool = False,
        epoch: int | None = None,
    ) -> Iterator[K]:
        """Keys in ``[minimum, maximum]`` (None = unbounded) in order, at ``epoch`` if given.

        Latest: SortedDict's lazy iterator (do not write while iterating). At an epoch:
        an iterator over a stable copy.
        """
        if epoch is None:
            data: SortedDict = self._data
            return iter(data.irange(minimum, maximum, inclusive, reverse))
        return iter(list(self._merged_keys(epoch, minimum, maximum, inclusive, reverse)))

    def first_key(self, epoch: int | None = None) -> K | None:
        """The smallest key (at ``epoch`` if given), or None when empty."""
        return next(self._merged_keys(epoch, None, None, (True, True), False), None)

    def last_key(self, epoch: int | None = None) -> K | None:
        """The largest key (at ``epoch`` if given), or None when empty."""
        return next(self._merged_keys(epoch, None, None, (True, True), True), None)

    def _merged_keys(
        self,
        epoch: int | None,
        minimum: K | None,
        maximum: K | None,
        inclusive: tuple[bool, bool],
        reverse: bool,
    ) -> Iterator[K]:
        """Lazy ordered keys at ``epoch``; the overlay is taken now (errors raise now).

        Lazy over the latest SortedDict: consume it before the next write.
        """
        data: SortedDict = self._data
        if epoch is None:
            return iter(data.irange(minimum, maximum, inclusive, reverse))
        changed = self._overlay(epoch)
        latest = data.irange(minimum, maximum, inclusive, reverse)
        if not changed:
            return iter(latest)
        unchanged = (key for key in latest if key not in changed)
        old = sorted(
            (
                key
                for key, saved in changed.items()
                if saved is not ABSENT and _in_range(key, minimum, maximum, inclusive)
            ),
            reverse=reverse,
        )
        return heapq.merge(unchanged, old, reverse=reverse)

    def _state_at(self, epoch: int) -> dict[K, V]:
        """A fresh dict of the state at ``epoch``, in key order."""
        changed = self._overlay(epoch)
        data = self._data
        state: dict[K, V] = {}
        for key in self._merged_keys(epoch, None, None, (True, True), False):
            saved = changed.get(key, ABSENT)
            state[key] = data[key] if saved is ABSENT else saved  # type: ignore[assignment]
        return state
