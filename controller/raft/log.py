"""The log as the Raft core sees it: `RaftLog`, and `MemoryRaftLog` for tests.

The real `SegmentedLog` is adapted to `RaftLog` by the driver. The contract:

* Offsets are per record; a batch of n records covers [base_offset, base_offset + n).
  The log holds the batches in [start_offset, end_offset); everything below
  `start_offset` is covered by the snapshot `snapshot_id` (end_offset ==
  start_offset).
* Below the snapshot the log may still keep a committed prefix, [retained_start_offset,
  start_offset): compaction deletes whole segments, and a remote tier keeps what it has
  not copied yet. A leader serves fetches from there (`read`, `end_offset_for_epoch`)
  instead of sending the snapshot, so a follower a little behind keeps its own log,
  history included, rather than dropping it for a snapshot. Nothing else looks below
  `start_offset`: voter sets, truncation and the state machine start at the snapshot.
* `append` and `truncate_to` are buffered: they take effect in memory at once and
  reach disk, in order, when the driver flushes (the core asks with
  `Ready.flush_to_offset` and learns of completion through `RaftNode.flushed`).
  A crash keeps the last flushed state plus possibly a prefix of later writes.
* `reset_to_snapshot` and `delete_below` are durable when they return (the real log
  does them with atomic renames/deletes), because the snapshot they pair with
  already is.
* Epochs of batches never decrease along the log.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from typing import Protocol

from controller.logformat import EMPTY_SNAPSHOT, EpochEndOffset, RecordBatch, SnapshotId


class RaftLog(Protocol):
    @property
    def start_offset(self) -> int:
        """Where the log proper starts: the snapshot's end."""
        ...

    @property
    def retained_start_offset(self) -> int:
        """The first offset `read` serves (<= start_offset): the batches kept below the
        snapshot are committed and stay readable until retention deletes them."""
        ...

    @property
    def end_offset(self) -> int:
        """One past the last record (the next offset to append)."""
        ...

    @property
    def last_epoch(self) -> int:
        """Epoch of the last batch; the snapshot's epoch when the log is empty."""
        ...

    @property
    def snapshot_id(self) -> SnapshotId:
        """The snapshot the log starts from (`EMPTY_SNAPSHOT` when none)."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset | None:
        """The largest epoch <= `epoch` in the log's history and where it ends.

        None when `epoch` is older than every epoch the log still holds (the snapshot's,
        or the oldest retained below it): that history is gone and the asker must be
        sent the snapshot.
        """
        ...

    def append(self, batch: RecordBatch) -> None:
        """Buffered append; `batch.base_offset` must equal `end_offset`."""
        ...

    def read(self, from_offset: int, max_batches: int, max_bytes: int) -> list[RecordBatch]:
        """Batches from the one containing `from_offset` (in [retained_start_offset,
        end_offset]; nothing at end_offset); at least one batch when any exists,
        even if it alone exceeds `max_bytes`."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Buffered removal of every record >= `offset` (a batch boundary, >=
        start_offset: what a snapshot covers is committed)."""
        ...

    def control_batches(self, from_offset: int) -> Iterator[RecordBatch]:
        """The control batches (voter sets, leader changes) from `from_offset` on, in
        order: what a starting node scans for voter sets, without decoding the rest."""
        ...

    def reset_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Drop the whole log and start it empty at `snapshot_id` (durable)."""
        ...

    def delete_below(self, snapshot_id: SnapshotId) -> None:
        """Record `snapshot_id` as the log start and drop the batches below its end
        offset (a batch boundary in the log) that retention lets go (durable)."""
        ...


def batch_bytes(batch: RecordBatch) -> int:
    """Size estimate used for fetch and proposal limits (record bytes only)."""
    return sum(len(r) for r in batch.records)


class MemoryRaftLog:
    """An in-memory `RaftLog` that also models a disk for the simulation.

    In memory: `_batches`. On "disk": `_durable_batches` and `_durable_snapshot`,
    updated by `sync` (what a flush does) and read back by `crash`. Writes not yet
    synced sit in `_pending` as ("append", batch) / ("truncate", offset) operations
    in the order they were made. `retain_batches` models retention below the
    snapshot: compaction keeps that many batches below it.
    """

    def __init__(self, snapshot_id: SnapshotId = EMPTY_SNAPSHOT, *,
                 retain_batches: int = 0) -> None:
        assert retain_batches >= 0, retain_batches
        self._snapshot = snapshot_id
        self._retain_batches = retain_batches
        # Invariant: contiguous batches covering [retained_start_offset, end_offset);
        # those below the snapshot are a committed prefix.
        self._batches: list[RecordBatch] = []
        # Parallel to _batches, for bisection.
        self._bases: list[int] = []
        self._epochs: list[int] = []
        self._durable_snapshot = snapshot_id
        self._durable_batches: list[RecordBatch] = []
        self._pending: list[tuple[str, RecordBatch | int]] = []
        # Buffered writes ever made; the one at index ops_issued - len(_pending)
        # is the oldest not yet synced.
        self._ops_issued = 0

    # -- RaftLog ---------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._snapshot.end_offset

    @property
    def retained_start_offset(self) -> int:
        return self._bases[0] if self._bases else self._snapshot.end_offset

    @property
    def end_offset(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._snapshot.end_offset

    @property
    def last_epoch(self) -> int:
        return self._batches[-1].epoch if self._batches else self._snapshot.epoch

    @property
    def snapshot_id(self) -> SnapshotId:
        return self._snapshot

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset | None:
        retains = bool(self._bases) and self._bases[0] < self._snapshot.end_offset
        if epoch < (self._epochs[0] if retains else self._snapshot.epoch):
            return None
        # Number of batches whose epoch is <= `epoch` (epochs never decrease).
        i = bisect_right(self._epochs, epoch)
        found = self._epochs[i - 1] if i > 0 else self._snapshot.epoch
        end = self._bases[i] if i < len(self._bases) else self.end_offset
        return EpochEndOffset(found, end)

    def append(self, batch: RecordBatch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(f"append at {batch.base_offset}, log ends at {self.end_offset}")
        if batch.epoch < self.last_epoch:
            raise ValueError(f"batch epoch {batch.epoch} < last epoch {self.last_epoch}")
        if not batch.records:
            raise ValueError("empty batch")
        self._push(batch)
        self._pending.append(("append", batch))
        self._ops_issued += 1

    def control_batches(self, from_offset: int) -> Iterator[RecordBatch]:
        return (b for b in self._batches if b.is_control and b.next_offset > from_offset)

    def read(self, from_offset: int, max_batches: int, max_bytes: int) -> list[RecordBatch]:
        if not self.retained_start_offset <= from_offset <= self.end_offset:
            raise ValueError(f"read at {from_offset} outside "
                             f"[{self.retained_start_offset}, {self.end_offset}]")
        if from_offset == self.end_offset:
            return []
        i = bisect_right(self._bases, from_offset) - 1
        out: list[RecordBatch] = []
        size = 0
        for batch in self._batches[i : i + max_batches]:
            size += batch_bytes(batch)
            if out and size > max_bytes:
                break
            out.append(batch)
        return out

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        if offset < self.start_offset:
            raise ValueError(f"truncate to {offset} below the log start {self.start_offset}")
        i = self._index_of(offset)
        del self._batches[i:], self._bases[i:], self._epochs[i:]
        self._pending.append(("truncate", offset))
        self._ops_issued += 1

    def reset_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        self._snapshot = self._durable_snapshot = snapshot_id
        self._batches, self._bases, self._epochs = [], [], []
        self._durable_batches = []
        self._pending = []

    def delete_below(self, snapshot_id: SnapshotId) -> None:
        offset = snapshot_id.end_offset
        if offset <= self.start_offset:
            return
        if offset > self.end_offset:
            raise ValueError(f"delete below {offset} beyond log end {self.end_offset}")
        i = self._index_of(offset) if offset < self.end_offset else len(self._batches)
        if i > 0 and self._batches[i - 1].epoch != snapshot_id.epoch:
            raise ValueError(f"snapshot {snapshot_id} does not match the log")
        self._snapshot = self._durable_snapshot = snapshot_id
        i = max(0, i - self._retain_batches)
        keep_from = self._bases[i] if i < len(self._bases) else offset
        del self._batches[:i], self._bases[:i], self._epochs[:i]
        self._durable_batches = [b for b in self._durable_batches
                                 if b.base_offset >= keep_from]

    # -- test and simulation helpers ------------------------------------------

    @property
    def batches(self) -> tuple[RecordBatch, ...]:
        return tuple(self._batches)

    @property
    def durable_batches(self) -> tuple[RecordBatch, ...]:
        return tuple(self._durable_batches)

    @property
    def durable_snapshot_id(self) -> SnapshotId:
        return self._durable_snapshot

    @property
    def pending_op_count(self) -> int:
        return len(self._pending)

    @property
    def ops_issued(self) -> int:
        """How many buffered writes were ever made (a flush syncs up to a count)."""
        return self._ops_issued

    def sync(self, through_op: int | None = None) -> None:
        """Make buffered writes durable, up to the `through_op`-th write ever made
        (default: all of them), in the order they were made."""
        first = self._ops_issued - len(self._pending)
        n = (
            len(self._pending)
            if through_op is None
            else max(0, min(through_op - first, len(self._pending)))
        )
        self._sync_count(n)

    def _sync_count(self, n: int) -> None:
        self._durable_batches = _apply(self._durable_batches, self._pending[:n])
        del self._pending[:n]

    def durable_batch_at(self, base_offset: int) -> RecordBatch | None:
        """The durable batch starting at `base_offset`, if any (scans from the end:
        the simulation asks about recent offsets)."""
        for batch in reversed(self._durable_batches):
            if batch.base_offset == base_offset:
                return batch
            if batch.base_offset < base_offset:
                return None
        return None

    def crash(self, keep_ops: int) -> None:
        """Lose everything not synced except the first `keep_ops` buffered writes
        (a torn write keeps a prefix), as a power cut would; the result is durable."""
        self._sync_count(keep_ops)
        self._pending = []
        self._snapshot = self._durable_snapshot
        self._batches, self._bases, self._epochs = [], [], []
        for batch in self._durable_batches:
            self._push(batch)

    def _push(self, batch: RecordBatch) -> None:
        self._batches.append(batch)
        self._bases.append(batch.base_offset)
        self._epochs.append(batch.epoch)

    def _index_of(self, offset: int) -> int:
        """Index of the batch starting exactly at `offset`."""
        i = bisect_right(self._bases, offset) - 1
        if i < 0 or self._bases[i] != offset:
            raise ValueError(f"offset {offset} is not a batch boundary")
        return i


def _apply(
    batches: list[RecordBatch], ops: list[tuple[str, RecordBatch | int]]
) -> list[RecordBatch]:
    out = list(batches)
    for kind, arg in ops:
        if kind == "append":
            assert isinstance(arg, RecordBatch)
            out.append(arg)
        else:
            assert isinstance(arg, int)
            out = [b for b in out if b.base_offset < arg]
    return out
