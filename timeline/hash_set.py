"""`TimelineHashSet`: a snapshottable set (Kafka's TimelineHashSet, in Python).

A ``collections.abc.MutableSet`` at the latest state (``add``, ``discard``, ``in``,
iteration, ``len``); reads also take an epoch: ``contains(x, epoch=None)``,
``elements(epoch=None)``, ``size(epoch=None)``. The latest state is a real set; the
first change to an element after the newest snapshot saves whether it was a member
into that snapshot's delta (see ``timeline.delta``). Set algebra (``|``, ``&``, ...)
returns plain sets.

Not thread-safe; the past is read-only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSet
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from timeline.delta import MapDelta, overlay
from timeline.revertable import Revertable

if TYPE_CHECKING:
    from timeline.registry import SnapshotRegistry

T = TypeVar("T")
S = TypeVar("S")


class TimelineHashSet(Revertable, MutableSet[T]):
    """A set with history. Its delta maps element -> "was a member at that epoch"."""

    __slots__ = ("_cur", "_data")

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._data: set[T] = set()
        self._cur: MapDelta | Literal[False] | None = None
        super().__init__(registry)

    @classmethod
    def _from_iterable(cls, it: Iterable[S]) -> set[S]:
        return set(it)

    def _sync(self) -> MapDelta | Literal[False]:
        cur = self._cur = self._registry._write_cache(self._cid)
        return cur

    def _forget_cache(self) -> None:
        self._cur = None

    # -- latest state: MutableSet ---------------------------------------------------

    def __contains__(self, element: object) -> bool:
        return element in self._data

    def __iter__(self) -> Iterator[T]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"TimelineHashSet({self._data!r})"

    def add(self, element: T) -> None:
        """Add ``element`` to the latest state (no-op if present)."""
        data = self._data
        if element in data:
            return
        cur = self._cur
        if cur is None:
            cur = self._sync()
        if cur is not False and element not in cur:
            cur[element] = False
        data.add(element)

    def add_absent(self, elements: Iterable[T]) -> None:
        """Add ``elements``, none of which is in the set yet (distinct), in one call:
        replaying a topic's new partitions adds a run of new keys to each broker's
        index, and a method call per key, or a membership test per key, cost more
        than the adds themselves. The precondition is checked by the size after:
        a present or repeated element raises, and leaves the set unusable (a bug in
        the caller, as any failed assertion)."""
        data = self._data
        new = list(elements)
        if not new:
            return
        cur = self._cur
        if cur is None:
            cur = self._sync()
        if cur is not False:
            # An element removed since the last snapshot is absent, yet recorded as
            # present before it: keep that record.
            if cur.keys().isdisjoint(new):
                cur.update(dict.fromkeys(new, False))
            else:
                for element in new:
                    if element not in cur:
                        cur[element] = False
        size = len(data)
        data.update(new)
        if len(data) != size + len(new):
            raise AssertionError(f"add_absent: {size + len(new) - len(data)} of the "
                                 "elements were present or repeated")

    def discard(self, element: T) -> None:
        """Remove ``element`` from the latest state (no-op if absent)."""
        data = self._data
        if element not in data:
            return
        cur = self._cur
        if cur is None:
            cur = self._sync()
        if cur is not False and element not in cur:
            cur[element] = True
        data.discard(element)

    # -- reads, latest or at an epoch ------------------------------------------------

    def contains(self, element: T, epoch: int | None = None) -> bool:
        """Whether ``element`` is a member (at ``epoch`` if given)."""
        if epoch is None:
            return element in self._data
        for snapshot in self._snapshots_from(epoch):
            delta = snapshot.deltas.get(self._cid)
            if delta is not None and element in delta:
                return bool(delta[element])
        return element in self._data

    def elements(self, epoch: int | None = None) -> frozenset[T]:
        """A frozen copy of the members (at ``epoch`` if given). O(size + changes)."""
        if epoch is None:
            return frozenset(self._data)
        state = set(self._data)
        for element, was_member in overlay(self._deltas_newest_first(epoch)).items():
            if was_member:
                state.add(element)
            else:
                state.discard(element)
        return frozenset(state)

    def size(self, epoch: int | None = None) -> int:
        """The number of members (at ``epoch`` if given). O(changes since epoch)."""
        data = self._data
        if epoch is None:
            return len(data)
        size = len(data)
        for element, was_member in overlay(self._deltas_newest_first(epoch)).items():
            size += bool(was_member) - (element in data)
        assert size >= 0
        return size

    # -- registry hooks -----------------------------------------------------------------

    def _revert(self, delta: Any) -> None:
        data = self._data
        for element, was_member in delta.items():
            if was_member:
                data.add(element)
            else:
                data.discard(element)

    def _reset(self) -> None:
        self._data.clear()
