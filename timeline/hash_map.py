"""`TimelineHashMap`: a snapshottable dict (Kafka's TimelineHashMap, in Python).

A ``collections.abc.MutableMapping`` at the latest state; reads also take an epoch:
``get(key, default=None, epoch=None)``, ``items/keys/values(epoch=None)``,
``size(epoch=None)``, ``contains(key, epoch=None)``. The latest state is a real dict
and history is kept as copy-on-write deltas in the snapshots (see
``timeline.base_map``), so memory grows with the changes made after the oldest live
snapshot, not with size x snapshots.

Not thread-safe; the past is read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from timeline.base_map import BaseTimelineMap

if TYPE_CHECKING:
    from timeline.registry import SnapshotRegistry

K = TypeVar("K")
V = TypeVar("V")


class TimelineHashMap(BaseTimelineMap[K, V]):
    """A hash map with history: latest-state reads are dict reads."""

    __slots__ = ()

    def __init__(self, registry: SnapshotRegistry) -> None:
        super().__init__(registry, {})
