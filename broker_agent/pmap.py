"""`PersistentMap`: an immutable hash map whose `set` / `delete` copy O(log n) data.

Why: a broker image holds every topic, and a one-partition change must produce the
next image without copying a dict of 100k+ topics. This is a hash trie (HAMT-like,
without bitmaps: 32-slot tuples): an update copies the tuples on one root-to-leaf
path (depth ~4 at a million keys) plus one small leaf dict; everything else is
shared between the old and the new map, so both stay valid and immutable.

Keys are placed by `hash()`, which for strings is salted per process: the layout is
never persisted, only the contents.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar, Union

K = TypeVar("K")
V = TypeVar("V")

_BITS = 5
_WIDTH = 1 << _BITS
_MASK = _WIDTH - 1
# A leaf bucket larger than this splits into a child node (unless hash bits ran out).
_LEAF_MAX = 16
_MAX_SHIFT = 60

# A slot is empty, a leaf bucket (dict, never mutated once shared) or a child node.
_Slot = Union[None, "dict[object, object]", "tuple[_Slot, ...]"]
_EMPTY_NODE: tuple[_Slot, ...] = (None,) * _WIDTH


def _index(key_hash: int, shift: int) -> int:
    return (key_hash >> shift) & _MASK


def _build(items: list[tuple[int, object, object]], shift: int) -> _Slot:
    """A slot holding `items` (hash, key, value), built bottom-up in one pass."""
    if not items:
        return None
    if len(items) <= _LEAF_MAX or shift > _MAX_SHIFT:
        return {k: v for _, k, v in items}
    groups: list[list[tuple[int, object, object]]] = [[] for _ in range(_WIDTH)]
    for item in items:
        groups[_index(item[0], shift)].append(item)
    return tuple(_build(group, shift + _BITS) for group in groups)


def _set(node: tuple[_Slot, ...], key_hash: int, key: object, value: object,
         shift: int) -> tuple[tuple[_Slot, ...], bool]:
    """The node with key set, and whether the key is new."""
    i = _index(key_hash, shift)
    slot = node[i]
    added: bool
    new_slot: _Slot
    if slot is None:
        new_slot, added = {key: value}, True
    elif isinstance(slot, dict):
        added = key not in slot
        bucket = dict(slot)
        bucket[key] = value
        if len(bucket) > _LEAF_MAX and shift + _BITS <= _MAX_SHIFT:
            new_slot = _build([(hash(k), k, v) for k, v in bucket.items()], shift + _BITS)
        else:
            new_slot = bucket
    else:
        new_slot, added = _set(slot, key_hash, key, value, shift + _BITS)
    return (*node[:i], new_slot, *node[i + 1:]), added


def _delete(node: tuple[_Slot, ...], key_hash: int, key: object,
            shift: int) -> tuple[_Slot, ...] | None:
    """The node without key, or None when the key is absent (nothing to copy)."""
    i = _index(key_hash, shift)
    slot = node[i]
    new_slot: _Slot
    if slot is None:
        return None
    if isinstance(slot, dict):
        if key not in slot:
            return None
        bucket = dict(slot)
        del bucket[key]
        new_slot = bucket or None
    else:
        child = _delete(slot, key_hash, key, shift + _BITS)
        if child is None:
            return None
        # Empty children are kept: maps shrink rarely and a lookup just finds None.
        new_slot = child
    return (*node[:i], new_slot, *node[i + 1:])


def _iter(slot: _Slot) -> Iterator[tuple[object, object]]:
    if slot is None:
        return
    if isinstance(slot, dict):
        yield from slot.items()
        return
    for child in slot:
        yield from _iter(child)


class PersistentMap(Mapping[K, V], Generic[K, V]):
    """Immutable mapping; `set` and `delete` return a new map sharing most of this one."""

    __slots__ = ("_len", "_root")

    def __init__(self, root: tuple[_Slot, ...] = _EMPTY_NODE, length: int = 0) -> None:
        self._root = root
        self._len = length

    @classmethod
    def from_mapping(cls, source: Mapping[K, V]) -> PersistentMap[K, V]:
        """Bulk build (used for snapshots): linear, no path copying."""
        items: list[tuple[int, object, object]] = [(hash(k), k, v) for k, v in source.items()]
        return cls(_spread_root(items), len(items))

    def __getitem__(self, key: K) -> V:
        key_hash = hash(key)
        node: _Slot = self._root
        shift = 0
        while isinstance(node, tuple):
            node = node[_index(key_hash, shift)]
            shift += _BITS
        if node is None:
            raise KeyError(key)
        return node[key]  # type: ignore[return-value]

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[K]:
        for key, _ in _iter(self._root):
            yield key  # type: ignore[misc]

    def __len__(self) -> int:
        return self._len

    def items_iter(self) -> Iterator[tuple[K, V]]:
        return _iter(self._root)  # type: ignore[return-value]

    def set(self, key: K, value: V) -> PersistentMap[K, V]:
        root, added = _set(self._root, hash(key), key, value, 0)
        return PersistentMap(root, self._len + (1 if added else 0))

    def delete(self, key: K) -> PersistentMap[K, V]:
        root = _delete(self._root, hash(key), key, 0)
        if root is None:
            return self
        return PersistentMap(root, self._len - 1)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(
            k in other and other[k] == v for k, v in self.items_iter())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PersistentMap({dict(self.items_iter())!r})"


def _spread_root(items: list[tuple[int, object, object]]) -> tuple[_Slot, ...]:
    # The root is always a node (lookups start by indexing it), even for few keys.
    groups: list[list[tuple[int, object, object]]] = [[] for _ in range(_WIDTH)]
    for item in items:
        groups[_index(item[0], 0)].append(item)
    return tuple(_build(group, _BITS) for group in groups)
