"""`Snapshot`: one epoch's saved history, per collection (copy-on-write).

Creating a snapshot copies nothing: it starts with no deltas. The first write to a
collection after it adds that collection's delta here (see ``timeline.delta``). The
registry keeps snapshots in ascending epoch order; only the newest one receives new
saved values, older ones are read-only history.

Not thread-safe; the past is read-only.
"""

from __future__ import annotations

from typing import Any


class Snapshot:
    """The state at ``epoch``, stored as the deltas needed to rebuild it from newer state.

    ``deltas`` maps a collection id (given by the registry) to that collection's delta;
    each collection owns the shape of its own delta, hence ``Any``.
    """

    __slots__ = ("deltas", "epoch")

    def __init__(self, epoch: int) -> None:
        assert isinstance(epoch, int) and not isinstance(epoch, bool), epoch
        self.epoch: int = epoch
        self.deltas: dict[int, Any] = {}

    def __repr__(self) -> str:
        return f"Snapshot(epoch={self.epoch}, collections_changed={len(self.deltas)})"
