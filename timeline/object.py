"""`TimelineObject`: one snapshottable value (Kafka's TimelineObject, in Python).

``get(epoch=None)`` reads the latest value or the value at a live snapshot's epoch;
``set(value)`` writes the latest value. The first write after the newest snapshot
saves the old value into it (copy-on-write, see ``timeline.delta``); ``reset`` returns
to the initial value. Values should be immutable (the snapshot keeps a reference, not a
copy).

Not thread-safe; the past is read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from timeline.revertable import Revertable

if TYPE_CHECKING:
    from timeline.registry import SnapshotRegistry

T = TypeVar("T")


class TimelineObject(Revertable, Generic[T]):
    """A single value with history."""

    __slots__ = ("_initial", "_value")

    def __init__(self, registry: SnapshotRegistry, initial: T) -> None:
        self._initial: T = initial
        self._value: T = initial
        super().__init__(registry)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._value!r})"

    def get(self, epoch: int | None = None) -> T:
        """The latest value, or the value at ``epoch`` (a live snapshot)."""
        if epoch is None:
            return self._value
        cid = self._cid
        for snapshot in self._snapshots_from(epoch):
            deltas = snapshot.deltas
            if cid in deltas:
                return deltas[cid]  # type: ignore[no-any-return]
        return self._value

    def set(self, value: T) -> None:
        """Replace the latest value (saving the old one for the newest snapshot once)."""
        snapshot = self._registry._latest
        if snapshot is not None:
            deltas = snapshot.deltas
            if self._cid not in deltas:
                deltas[self._cid] = self._value
        self._value = value

    def _revert(self, delta: Any) -> None:
        self._value = delta

    def _reset(self) -> None:
        self._value = self._initial
