"""Memory grows with the changes after the oldest live snapshot, not with size x snapshots.

Asserts on bytes (tracemalloc), never on time.
"""

from __future__ import annotations

import gc
import tracemalloc

from timeline import SnapshotRegistry, TimelineHashMap

ENTRIES = 100_000
SNAPSHOTS = 1_000
# Generous per-change budget: a Snapshot, its deltas dict, one per-collection delta dict
# with one entry, the epoch in two lists, the new value. Measured ~0.6 KiB.
BUDGET_PER_CHANGE = 2_048


def test_snapshots_cost_changes_not_size_times_snapshots() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[int, int] = TimelineHashMap(reg)
    for i in range(ENTRIES):
        m[i] = i
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for epoch in range(SNAPSHOTS):
            reg.create_snapshot(epoch)
            m[epoch] = -epoch - 1_000_000  # one change per snapshot (a fresh int object)
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
        grown = after - base

        # One full copy of the map alone would be several MB; 1,000 copies, gigabytes.
        full_copy = dict(m)
        gc.collect()
        with_copy, _ = tracemalloc.get_traced_memory()
        one_copy = with_copy - after
        del full_copy

        assert grown <= SNAPSHOTS * BUDGET_PER_CHANGE, grown
        assert grown < one_copy, (grown, one_copy)

        # The history is all readable.
        assert m.get(0, epoch=0) == 0 and m.get(999, epoch=999) == 999
        assert m.get(0, epoch=1) == -1_000_000

        # Deleting the history frees it (back to about the baseline).
        reg.delete_snapshots_up_to(SNAPSHOTS)
        gc.collect()
        freed, _ = tracemalloc.get_traced_memory()
        # What stays: the 1,000 new values in the map (ints ~32 B each) and slack.
        assert freed - base <= SNAPSHOTS * 100, freed - base
    finally:
        tracemalloc.stop()


def test_create_snapshot_copies_nothing() -> None:
    reg = SnapshotRegistry()
    m: TimelineHashMap[int, int] = TimelineHashMap(reg)
    for i in range(ENTRIES):
        m[i] = i
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for epoch in range(100):
            reg.create_snapshot(epoch)
        after, _ = tracemalloc.get_traced_memory()
        assert after - base <= 100 * 512, after - base  # a few small objects per snapshot
    finally:
        tracemalloc.stop()
