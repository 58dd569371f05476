"""`BaseTimelineMap`: the mapping machinery shared by the hash map and the sorted map.

The latest state is a real dict (``_data``; a ``SortedDict``, itself a dict, for the
sorted map), so a latest-state read is a plain dict read. History lives in the
snapshots as per-snapshot deltas (``timeline.delta``): the first write to a key after
the newest snapshot saves the key's old value (or ``ABSENT``) into that snapshot's
delta for this map. The write path's check, "is this key already saved in the newest
snapshot's delta?", is one dict lookup on a cached handle (``_cur``).

Reads at an epoch merge the latest state with the deltas of the snapshots at or after
that epoch; whole-state reads (items/keys/values at an epoch) return a copy, stable
against later writes. Reading at an epoch that is not a live snapshot raises
``SnapshotNotFoundError`` (a KeyError) naming the epoch.

Values are kept by reference, never copied: treat them as immutable, or a change made
in place would show at every epoch.

Not thread-safe; the past is read-only (writes always go to the latest state).
"""

from __future__ import annotations

from collections.abc import (
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    ValuesView,
)
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from timeline.delta import ABSENT, MapDelta, overlay
from timeline.revertable import Revertable

if TYPE_CHECKING:
    from timeline.registry import SnapshotRegistry

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_NOT_SAVED: Any = object()  # "this delta did not save the key" (distinct from ABSENT)


class BaseTimelineMap(Revertable, MutableMapping[K, V]):
    """A MutableMapping at the latest state whose reads can also name a past epoch."""

    __slots__ = ("_cur", "_data")

    def __init__(self, registry: SnapshotRegistry, data: dict[K, V]) -> None:
        assert isinstance(data, dict) and not data, "a timeline map starts empty"
        self._data: dict[K, V] = data
        # Write cache: this map's delta in the newest snapshot; False when there is no
        # snapshot (save nothing); None when unknown (ask the registry). Cleared by the
        # registry whenever the newest snapshot changes.
        self._cur: MapDelta | Literal[False] | None = None
        super().__init__(registry)

    # -- write-path cache (cold) ------------------------------------------------------

    def _sync(self) -> MapDelta | Literal[False]:
        cur = self._cur = self._registry._write_cache(self._cid)
        return cur

    def _forget_cache(self) -> None:
        self._cur = None

    # -- latest state: MutableMapping ----------------------------------------------

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __setitem__(self, key: K, value: V) -> None:
        cur = self._cur
        if cur is None:
            cur = self._sync()
        data = self._data
        if cur is not False and key not in cur:
            cur[key] = data[key] if key in data else ABSENT  # noqa: SIM401 (faster than .get)
        data[key] = value

    def put_all(self, items: Iterable[tuple[K, V]]) -> None:
        """``self[key] = value`` for each pair, in order, in one call (replaying a
        topic's partitions writes a run of keys; a method call per key cost more
        than the writes)."""
        cur = self._cur
        if cur is None:
            cur = self._sync()
        data = self._data
        if cur is False:
            data.update(items)
            return
        for key, value in items:
            if key not in cur:
                cur[key] = data[key] if key in data else ABSENT  # noqa: SIM401
            data[key] = value

    def latest(self) -> Mapping[K, V]:
        """A read-only view of the latest state whose lookups (``get``, ``[]``,
        ``in``) run without a Python-level call, for hot loops. It stays live: it
        shows whatever is latest when read."""
        return MappingProxyType(self._data)

    def __delitem__(self, key: K) -> None:
        cur = self._cur
        if cur is None:
            cur = self._sync()
        data = self._data
        if cur is not False and key not in cur:
            # For a missing key this saves ABSENT, which is true at the snapshot, and
            # the del below raises KeyError as a dict does.
            cur[key] = data[key] if key in data else ABSENT  # noqa: SIM401
        del data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"

    def clear(self) -> None:
        """Remove every key (each removal is saved for the snapshots, as usual)."""
        for key in list(self._data):
            del self[key]

    # -- reads, latest or at an epoch ------------------------------------------------

    @overload
    def get(self, key: K, default: None = None, epoch: int | None = None) -> V | None: ...
    @overload
    def get(self, key: K, default: V, epoch: int | None = None) -> V: ...
    @overload
    def get(self, key: K, default: D, epoch: int | None = None) -> V | D: ...
    def get(self, key: K, default: object = None, epoch: int | None = None) -> object:
        """The value of ``key`` (at ``epoch`` if given), or ``default``."""
        if epoch is None:
            return self._data.get(key, default)
        for snapshot in self._snapshots_from(epoch):
            delta = snapshot.deltas.get(self._cid)
            if delta is not None:
                saved = delta.get(key, _NOT_SAVED)
                if saved is not _NOT_SAVED:
                    return default if saved is ABSENT else saved
        return self._data.get(key, default)

    def contains(self, key: K, epoch: int | None = None) -> bool:
        """Whether ``key`` is present (at ``epoch`` if given)."""
        if epoch is None:
            return key in self._data
        marker: Any = _NOT_SAVED
        return self.get(key, marker, epoch) is not marker

    def size(self, epoch: int | None = None) -> int:
        """The number of keys (at ``epoch`` if given). O(changes since epoch)."""
        data = self._data
        if epoch is None:
            return len(data)
        size = len(data)
        for key, saved in self._overlay(epoch).items():
            size += (saved is not ABSENT) - (key in data)
        assert size >= 0
        return size

    def keys(self, epoch: int | None = None) -> KeysView[K]:
        """Latest: the live keys view. At an epoch: a view of a stable copy."""
        if epoch is None:
            return self._data.keys()
        return self._state_at(epoch).keys()

    def items(self, epoch: int | None = None) -> ItemsView[K, V]:
        """Latest: the live items view. At an epoch: a view of a stable copy."""
        if epoch is None:
            return self._data.items()
        return self._state_at(epoch).items()

    def values(self, epoch: int | None = None) -> ValuesView[V]:
        """Latest: the live values view. At an epoch: a view of a stable copy."""
        if epoch is None:
            return self._data.values()
        return self._state_at(epoch).values()

    def _overlay(self, epoch: int) -> MapDelta:
        """Key -> value at ``epoch`` (or ABSENT) for every key changed since ``epoch``."""
        return overlay(self._deltas_newest_first(epoch))

    def _state_at(self, epoch: int) -> dict[K, V]:
        """A fresh dict of the whole state at ``epoch``. O(size + changes since epoch)."""
        changed = self._overlay(epoch)
        state = dict(self._data)
        for key, saved in changed.items():
            if saved is ABSENT:
                state.pop(key, None)
            else:
                state[key] = saved  # type: ignore[assignment]
        return state

    # -- registry hooks -----------------------------------------------------------------

    def _revert(self, delta: MapDelta) -> None:
        data = self._data
        for key, saved in delta.items():
            if saved is ABSENT:
                data.pop(key, None)
            else:
                data[key] = saved  # type: ignore[assignment]

    def _reset(self) -> None:
        self._data.clear()
