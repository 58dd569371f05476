"""`Revertable`: the base of every timeline collection, as the registry sees it.

A collection registers with a `SnapshotRegistry` when it is built and gets a small
integer id; snapshots key their deltas by that id, so they never reference the
collection itself, and the registry holds it only weakly: a collection nobody
references is freed, and its deltas are dropped from every snapshot.

Write-path cache (maps and sets): ``_cur`` is None (ask the registry, cold path),
False (no snapshot: save nothing) or this collection's delta dict in the newest
snapshot. The registry clears it whenever the newest snapshot changes, so a write costs
one dict lookup ("already saved?") to decide whether the old value must be saved.

Not thread-safe; the past is read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from timeline.delta import MapDelta
    from timeline.snapshot import Snapshot


class RegistryHooks(Protocol):
    """What collections call on their `SnapshotRegistry` (which implements it; named
    here so this module does not import the registry, which keeps collections)."""

    _latest: Snapshot | None

    def _register(self, collection: Revertable) -> int: ...
    def _write_cache(self, cid: int) -> MapDelta | Literal[False]: ...
    def _snapshots_from(self, epoch: int) -> list[Snapshot]: ...


class Revertable:
    """Base class: registration plus the hooks the registry calls."""

    __slots__ = ("__weakref__", "_cid", "_registry")

    def __init__(self, registry: RegistryHooks) -> None:
        # Checked by duck type: importing the registry here would close a circle
        # (the registry keeps its collections).
        if not callable(getattr(registry, "_register", None)):
            raise TypeError(f"expected a SnapshotRegistry, got {type(registry).__name__}")
        self._registry: RegistryHooks = registry
        self._cid: int = registry._register(self)
        assert self._cid >= 0

    # -- hooks called by the registry ------------------------------------------------

    def _revert(self, delta: Any) -> None:
        """Write back one snapshot's saved values (newest snapshot first; the target last)."""
        raise NotImplementedError

    def _reset(self) -> None:
        """Return to the empty/initial state; history is gone (the registry dropped it)."""
        raise NotImplementedError

    def _forget_cache(self) -> None:
        """The newest snapshot changed or was dropped: drop any write cache."""

    # -- helpers for subclasses ------------------------------------------------------

    def _snapshots_from(self, epoch: int) -> list[Snapshot]:
        """Live snapshots with epoch >= ``epoch``, ascending; raises if ``epoch`` is not live."""
        return self._registry._snapshots_from(epoch)

    def _deltas_newest_first(self, epoch: int) -> list[Any]:
        """This collection's deltas from the newest snapshot down to the one at ``epoch``."""
        cid = self._cid
        return [s.deltas.get(cid) for s in reversed(self._snapshots_from(epoch))]
