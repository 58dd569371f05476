"""`SnapshotRegistry`: the epochs of the live snapshots and the collections that use them.

Epochs are log offsets and only grow. `create_snapshot(e)` is O(1): it copies nothing
(collections save old values lazily, on their first write after it, see
``timeline.delta``). `revert_to_snapshot(e)` makes the latest state of every
collection exactly the state at ``e`` in O(changes since e) and drops the newer
snapshots; `delete_snapshots_up_to(e)` frees the history older than ``e``; `reset()`
empties everything.

Collections are held weakly: the registry never keeps one alive, and when one is freed
its deltas are removed from every snapshot.

Write caches: a map or set caches its delta in the newest snapshot (or "no snapshot:
save nothing") so that a write costs one dict lookup to decide whether to save. The
registry remembers which collections hold such a cache (``_cached``, collection ids)
and clears those caches whenever the newest snapshot changes (create, revert, delete,
reset). A collection caches at most once between two such changes, so this costs
O(collections written since the last change): amortized O(1) per write, never O(size).

Not thread-safe: one thread (the controller's event loop) owns a registry and all its
collections. The past is read-only: reads take an ``epoch``, writes always go to the
latest state.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from timeline.delta import MapDelta
from timeline.snapshot import Snapshot

if TYPE_CHECKING:
    from timeline.revertable import Revertable


class SnapshotNotFoundError(KeyError):
    """A read or revert named an epoch that has no live snapshot."""

    def __init__(self, epoch: int, live: list[int]) -> None:
        where = f"{len(live)} live, from {live[0]} to {live[-1]}" if live else "no live snapshots"
        self.epoch = epoch
        self.message = f"no live snapshot at epoch {epoch} ({where})"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return self.message


def _check_epoch(epoch: int) -> None:
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise TypeError(f"epoch must be an int, got {type(epoch).__name__}: {epoch!r}")


class SnapshotRegistry:
    """The live snapshots (ascending epochs) and the weakly held collections."""

    __slots__ = (
        "__weakref__",
        "_cached",
        "_collections",
        "_epochs",
        "_latest",
        "_next_cid",
        "_snapshots",
    )

    def __init__(self) -> None:
        # Parallel lists, ascending epochs; _latest is _snapshots[-1] or None.
        self._epochs: list[int] = []
        self._snapshots: list[Snapshot] = []
        self._latest: Snapshot | None = None
        self._collections: dict[int, weakref.ref[Revertable]] = {}
        self._next_cid: int = 0
        # Ids of the collections holding a write cache on the newest snapshot (see above).
        self._cached: set[int] = set()

    def __repr__(self) -> str:
        return (
            f"SnapshotRegistry(epochs={len(self._epochs)}, latest={self.latest_epoch()}, "
            f"collections={len(self._collections)})"
        )

    # -- queries -----------------------------------------------------------------------

    def epochs(self) -> list[int]:
        """The live snapshot epochs, ascending (a copy)."""
        return list(self._epochs)

    def latest_epoch(self) -> int | None:
        """The newest live snapshot's epoch, or None when there are none."""
        return self._epochs[-1] if self._epochs else None

    def has_snapshot(self, epoch: int) -> bool:
        """Whether ``epoch`` is a live snapshot (readable, revertable)."""
        i = bisect_left(self._epochs, epoch)
        return i < len(self._epochs) and self._epochs[i] == epoch

    # -- snapshots ---------------------------------------------------------------------

    def create_snapshot(self, epoch: int) -> None:
        """Record the current state as the state at ``epoch``. O(1): nothing is copied.

        Idempotent when ``epoch`` equals the newest snapshot's epoch (that snapshot, as
        first taken, stays); ValueError when it is lower (epochs only grow).
        """
        _check_epoch(epoch)
        latest = self._latest
        if latest is not None:
            if epoch == latest.epoch:
                return
            if epoch < latest.epoch:
                raise ValueError(
                    f"cannot create a snapshot at epoch {epoch}: it is lower than the "
                    f"latest snapshot's epoch {latest.epoch} (epochs only grow)"
                )
        snapshot = Snapshot(epoch)
        self._epochs.append(epoch)
        self._snapshots.append(snapshot)
        self._latest = snapshot
        self._invalidate_caches()
        assert len(self._epochs) == len(self._snapshots)
        assert len(self._epochs) < 2 or self._epochs[-2] < self._epochs[-1], "epochs only grow"
        assert not self._cached, "no write cache may survive a new snapshot"

    def revert_to_snapshot(self, epoch: int) -> None:
        """Make the latest state exactly the state at ``epoch``; drop newer snapshots.

        The snapshot at ``epoch`` stays (with no changes after it). Cost: O(changes made
        since ``epoch``). Raises SnapshotNotFoundError (a KeyError) if it is not live.
        """
        _check_epoch(epoch)
        index = self._index_of(epoch)
        affected = self._snapshots[index:]
        del self._epochs[index + 1 :]
        del self._snapshots[index + 1 :]
        target = self._snapshots[index]
        self._latest = target
        # Newest first, so the oldest snapshot's saved value (the value at `epoch`) is
        # the one written last. list(): a weakref callback may edit `deltas` meanwhile.
        for snapshot in reversed(affected):
            for cid, delta in list(snapshot.deltas.items()):
                collection = self._resolve(cid)
                if collection is not None:
                    collection._revert(delta)
        target.deltas = {}
        self._invalidate_caches()
        assert self._latest is self._snapshots[-1] and self._latest.epoch == epoch

    def delete_snapshots_up_to(self, epoch: int) -> None:
        """Drop every snapshot with an epoch lower than ``epoch`` (one at ``epoch`` stays).

        Frees their history: reads at those epochs fail afterwards. ``epoch`` need not be
        live; if it is above every snapshot, all are dropped.
        """
        _check_epoch(epoch)
        index = bisect_left(self._epochs, epoch)
        if index == 0:
            return
        del self._epochs[:index]
        del self._snapshots[:index]
        self._latest = self._snapshots[-1] if self._snapshots else None
        if self._latest is None:  # the newest snapshot went too
            self._invalidate_caches()
        assert len(self._epochs) == len(self._snapshots)
        assert not self._epochs or self._epochs[0] >= epoch

    def reset(self) -> None:
        """Drop every snapshot and return every registered collection to empty/initial."""
        self._epochs.clear()
        self._snapshots.clear()
        self._latest = None
        self._invalidate_caches()
        for ref in list(self._collections.values()):
            collection = ref()
            if collection is not None:
                collection._reset()

    # -- used by the collections ----------------------------------------------------

    def _register(self, collection: Revertable) -> int:
        cid = self._next_cid
        self._next_cid += 1
        assert cid not in self._collections
        self._collections[cid] = weakref.ref(collection, _forgetter(weakref.ref(self), cid))
        return cid

    def _write_cache(self, cid: int) -> MapDelta | Literal[False]:
        """For collection ``cid``'s write path: its delta in the newest snapshot (created
        empty if needed), or False when there is no snapshot (nothing to save). The
        collection may cache the answer until the registry clears it."""
        assert cid in self._collections, cid
        self._cached.add(cid)
        snapshot = self._latest
        if snapshot is None:
            return False
        delta: MapDelta | None = snapshot.deltas.get(cid)
        if delta is None:
            delta = snapshot.deltas[cid] = {}
        return delta

    def _invalidate_caches(self) -> None:
        cached = self._cached
        self._cached = set()
        for cid in cached:
            collection = self._resolve(cid)
            if collection is not None:
                collection._forget_cache()

    def _forget(self, cid: int) -> None:
        """A collection was freed: drop its registration and its history."""
        self._collections.pop(cid, None)
        self._cached.discard(cid)
        for snapshot in self._snapshots:
            snapshot.deltas.pop(cid, None)

    def _resolve(self, cid: int) -> Revertable | None:
        ref = self._collections.get(cid)
        return None if ref is None else ref()

    def _index_of(self, epoch: int) -> int:
        epochs = self._epochs
        i = bisect_left(epochs, epoch)
        if i == len(epochs) or epochs[i] != epoch:
            raise SnapshotNotFoundError(epoch, epochs)
        return i

    def _snapshots_from(self, epoch: int) -> list[Snapshot]:
        """Live snapshots with epoch >= ``epoch`` (ascending); ``epoch`` must be live."""
        return self._snapshots[self._index_of(epoch) :]

    def _collection_count(self) -> int:
        """How many collections are registered (for tests)."""
        return len(self._collections)


def _forgetter(
    registry_ref: weakref.ref[SnapshotRegistry], cid: int
) -> Callable[[weakref.ref[Revertable]], None]:
    # A closure over a weak reference: the callback must keep neither side alive.
    def forget(_: weakref.ref[Revertable]) -> None:
        registry = registry_ref()
        if registry is not None:
            registry._forget(cid)

    return forget
