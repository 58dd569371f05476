"""Timeline: snapshottable in-memory collections (MVCC), after Kafka's timeline package.

A `SnapshotRegistry` records snapshots at epochs (log offsets, only growing); the
collections registered with it (`TimelineHashMap`, `TimelineSortedMap`,
`TimelineHashSet`, `TimelineInteger`, `TimelineLong`, `TimelineObject`) keep their
latest state in plain Python containers and their history as copy-on-write deltas in
the snapshots. Reads take an optional ``epoch``; ``revert_to_snapshot`` restores a past
state in O(changes since it); ``delete_snapshots_up_to`` frees history.

Not thread-safe: one thread owns a registry and its collections. The past is
read-only. The registry holds collections weakly.
"""

from timeline.delta import ABSENT
from timeline.hash_map import TimelineHashMap
from timeline.hash_set import TimelineHashSet
from timeline.integer import TimelineInteger, TimelineLong
from timeline.object import TimelineObject
from timeline.registry import SnapshotNotFoundError, SnapshotRegistry
from timeline.revertable import Revertable
from timeline.snapshot import Snapshot
from timeline.sorted_map import TimelineSortedMap

__all__ = [
    "ABSENT",
    "Revertable",
    "Snapshot",
    "SnapshotNotFoundError",
    "SnapshotRegistry",
    "TimelineHashMap",
    "TimelineHashSet",
    "TimelineInteger",
    "TimelineLong",
    "TimelineObject",
    "TimelineSortedMap",
]
