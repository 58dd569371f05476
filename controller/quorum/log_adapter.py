"""The durable storage as the Raft core sees it.

`DurableRaftLog` makes `controller.storage.SegmentedLog` satisfy the core's
`RaftLog` protocol (controller/raft/log.py); `FileSnapshotStore` makes the
snapshot directory satisfy `SnapshotStore` (controller/raft/snapshot.py).

Differences bridged here:

- The core's log starts exactly at its snapshot (`start_offset ==
  snapshot_id.end_offset`), while `SegmentedLog` deletes whole segments only (and
  keeps what a remote tier has not copied yet), so it may still hold batches below
  the snapshot: the core sees them as the retained prefix (`retained_start_offset`),
  which a leader serves to fetchers.
- `SegmentedLog.last_epoch` is -1 for a log without batches; the core wants the
  snapshot's epoch. `end_offset_for_epoch` follows the core's contract (largest
  epoch <= the one asked, None below the snapshot), not Kafka's.
- Appends are buffered in the page cache; `flush()` is the group commit (one
  fsync for everything appended since the last flush) and also persists the
  leader-epoch checkpoint when the epoch history changed.
"""

from __future__ import annotations

import os
import shutil
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from controller.logformat import EMPTY_SNAPSHOT, EpochEndOffset, RecordBatch, SnapshotId
from controller.logformat.batch import decode_batch
from controller.quorum.wire import StoredBatchCache
from controller.storage import snapshot_file as sf
from controller.storage.errors import LogCorruptionError, StorageError
from controller.storage.fsutil import fsync_dir
from controller.storage.leader_epoch import LeaderEpochCheckpoint
from controller.storage.log import LogConfig, LogDamage, SegmentedLog, SegmentInfo
from controller.storage.log_config import LOG_DAMAGE_POLICIES
from controller.storage.log_repair import LogRepairMarker, PendingRepair
from controller.storage.meta_properties import DataDir

# How many appended batches `DurableRaftLog` keeps to serve reads of the tail.
RECENT_BATCHES = 1024


def _log_ends_snapshot(log: SegmentedLog, snapshot_id: SnapshotId) -> bool:
    """Does the local log agree with the snapshot where the snapshot ends: no batch
    there at all, or the batch ending there in the snapshot's epoch, and a boundary?
    (The log is at least as long as the snapshot.)"""
    offset = snapshot_id.end_offset
    if offset <= log.start_offset:
        return True
    history = log.epoch_history()
    i = bisect_right([s for _, s in history], offset - 1)
    if i == 0 or history[i - 1][0] != snapshot_id.epoch:
        return False
    if offset == log.end_offset:
        return True
    data = log.read(offset, 1)
    return bool(data) and decode_batch(data[0])[0].base_offset == offset


def discard_replica_log(data_dir: DataDir) -> None:
    """Delete a replica's copy of the metadata log: segments, snapshots and their
    bookkeeping (meta.properties and the quorum state stay). For an observer whose
    committed history was rewritten upstream: it then fetches everything again."""
    for directory in (data_dir.log_dir, data_dir.snapshot_dir):
        if directory.exists():
            shutil.rmtree(directory)
    for path in (data_dir.recovery_point, data_dir.log_repair, data_dir.leader_epoch_checkpoint):
        path.unlink(missing_ok=True)
    fsync_dir(data_dir.root)


class DurableRaftLog:
    """A `RaftLog` over a `SegmentedLog`, its leader-epoch checkpoint and the newest
    snapshot. One owner (the driver's node task); not thread-safe."""

    def __init__(self, log: SegmentedLog, checkpoint: LeaderEpochCheckpoint,
                 snapshot_id: SnapshotId, cache: StoredBatchCache | None = None) -> None:
        self._log = log
        self._checkpoint = checkpoint
        self._snapshot = snapshot_id
        self.cache = cache if cache is not None else StoredBatchCache()
        # Set by `open` when the log lost flushed records and is being repaired.
        self.pending_repair: PendingRepair | None = None
        self._repair_marker: LogRepairMarker | None = None
        # With a remote tier, local segments below the snapshot are deleted only below
        # this offset (what the tier holds and local retention lets go); None: no tier,
        # everything below the snapshot goes.
        self.retention_floor: int | None = None
        # The batches appended last, by base offset (insertion order = log order):
        # reads of the log's tail (the followers' fetches, the commit of what was
        # just appended) are served from them instead of re-reading and decoding
        # the bytes just written. Every entry is the batch the log holds at its
        # offset: truncation drops those at or above it, a reset drops all.
        self._recent: dict[int, tuple[RecordBatch, int]] = {}
        if log.start_offset > snapshot_id.end_offset:
            raise LogCorruptionError(str(log.directory), f"log starts at {log.start_offset} "
                                     f"but the newest snapshot ends at {snapshot_id.end_offset}: "
                                     "records in between are missing", log.start_offset)
        if log.end_offset < snapshot_id.end_offset or not _log_ends_snapshot(log, snapshot_id):
            # A crash between installing a fetched snapshot and emptying the log:
            # finish the reset (the snapshot is durable, the old log is obsolete, and
            # may even differ from it below its end, if it held an uncommitted tail).
            log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self._sync_checkpoint()

    @classmethod
    def open(cls, data_dir: DataDir, config: LogConfig | None = None,
             on_log_damage: str = "repair") -> DurableRaftLog:
        """Open the log, the checkpoint and the newest snapshot of a formatted data dir.

        Damage to flushed records (storage/log.py) is refused with
        `LogCorruptionError` when `on_log_damage` is "refuse"; with "repair" it is
        noted in the data dir (`LogRepairMarker`) before the log is cut, and
        `pending_repair` tells the Raft core to fetch it again before voting.
        """
        if on_log_damage not in LOG_DAMAGE_POLICIES:
            raise ValueError(f"on_log_damage must be one of {LOG_DAMAGE_POLICIES}")
        sf.remove_partial_snapshots(data_dir.snapshot_dir)
        latest = sf.latest_snapshot(data_dir.snapshot_dir)
        snapshot_id = EMPTY_SNAPSHOT if latest is None else latest
        marker = LogRepairMarker(data_dir.log_repair)
        pending = marker.read()

        def on_damage(damage: LogDamage) -> None:
            if on_log_damage == "refuse":
                raise LogCorruptionError(
                    damage.segment, f"{damage.reason} (flushed up to offset "
                    f"{damage.recovery_point}; on_log_damage = \"refuse\": set it to "
                    "\"repair\" to rejoin and fetch the lost records from the leader)",
                    damage.offset, damage.position if damage.position >= 0 else None)
            nonlocal pending
            target = max(damage.recovery_point, pending.repair_to_offset if pending else 0)
            pending = PendingRepair(target, damage.describe())
            marker.write(pending)

        log = SegmentedLog.open(data_dir.log_dir, config, initial_offset=snapshot_id.end_offset,
                                recovery_point_path=data_dir.recovery_point,
                                on_damage=on_damage)
        try:
            opened = cls(log, LeaderEpochCheckpoint(data_dir.leader_epoch_checkpoint),
                         snapshot_id)
        except BaseException:
            log.close()
            raise
        opened._repair_marker = marker
        opened.pending_repair = pending
        return opened

    # -- RaftLog ---------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._snapshot.end_offset

    @property
    def end_offset(self) -> int:
        return self._log.end_offset

    @property
    def last_epoch(self) -> int:
        if self._log.end_offset == self._snapshot.end_offset:
            return self._snapshot.epoch
        return self._log.last_epoch

    @property
    def snapshot_id(self) -> SnapshotId:
        return self._snapshot

    @property
    def retained_start_offset(self) -> int:
        return self._log.start_offset

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset | None:
        # (epoch, start offset) of every epoch the local segments hold, retained
        # batches below the snapshot included.
        entries = self._log.epoch_history()
        retains = self._log.start_offset < self._snapshot.end_offset and bool(entries)
        if epoch < (entries[0][0] if retains else self._snapshot.epoch):
            return None
        i = bisect_right([e for e, _ in entries], epoch)
        found = entries[i - 1][0] if i > 0 else self._snapshot.epoch
        end = entries[i][1] if i < len(entries) else self.end_offset
        return EpochEndOffset(found, end)

    def append(self, batch: RecordBatch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(f"append at {batch.base_offset}, log ends at {self.end_offset}")
        if batch.epoch < self.last_epoch:
            raise ValueError(f"batch epoch {batch.epoch} < last epoch {self.last_epoch}")
        if not batch.records:
            raise ValueError("empty batch")
        # Followers append the bytes they fetched (remembered by the wire layer);
        # the leader encodes its own batch once and serves those bytes to fetchers.
        data = self.cache.encode(batch)
        self._log.append(data)
        recent = self._recent
        recent[batch.base_offset] = (batch, len(data))
        if len(recent) > RECENT_BATCHES:
            del recent[next(iter(recent))]

    def read(self, from_offset: int, max_batches: int, max_bytes: int) -> list[RecordBatch]:
        if not self.retained_start_offset <= from_offset <= self.end_offset:
            raise ValueError(f"read at {from_offset} outside [{self.retained_start_offset}, "
                             f"{self.end_offset}]")
        if from_offset == self.end_offset or max_batches <= 0:
            return []
        if from_offset in self._recent:
            return self._read_recent(from_offset, max_batches, max_bytes)
        out: list[RecordBatch] = []
        # SegmentedLog.read starts with the batch containing `from_offset`, as the
        # contract asks.
        for data in self._log.read(from_offset, max_bytes)[:max_batches]:
            batch, _ = decode_batch(data)
            self.cache.remember(batch, data)
            out.append(batch)
        return out

    def _read_recent(self, from_offset: int, max_batches: int,
                     max_bytes: int) -> list[RecordBatch]:
        """`read` from the recent batches (the limits as `SegmentedLog.read` applies
        them); fewer batches when the recent ones stop before the end of the log."""
        recent, end = self._recent, self.end_offset
        out: list[RecordBatch] = []
        offset, total = from_offset, 0
        while offset < end and len(out) < max_batches:
            entry = recent.get(offset)
            if entry is None:
                break
            batch, size = entry
            if out and total + size > max_bytes:
                break
            out.append(batch)
            total += size
            if total >= max_bytes:
                break
            offset = batch.next_offset
        return out

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        if offset < self.start_offset:
            raise ValueError(f"truncate to {offset} below the log start {self.start_offset}")
        for base in [b for b in self._recent if b >= offset]:
            del self._recent[base]
        try:
            self._log.truncate_to(offset)
        except StorageError as exc:
            raise ValueError(str(exc)) from None

    def reset_to_snapshot(self, snapshot_id: SnapshotId) -> None:
        self._recent.clear()
        self._log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self._snapshot = snapshot_id
        self._sync_checkpoint()

    def delete_below(self, snapshot_id: SnapshotId) -> None:
        offset = snapshot_id.end_offset
        if offset <= self.start_offset:
            return
        if offset > self.end_offset:
            raise ValueError(f"delete below {offset} beyond log end {self.end_offset}")
        if not _log_ends_snapshot(self._log, snapshot_id):
            raise ValueError(f"snapshot {snapshot_id} does not match the log (epoch "
                             "or batch boundary)")
        self._snapshot = snapshot_id
        self._delete_local_below(offset)

    def apply_retention_floor(self, floor: int | None) -> int:
        """Set `retention_floor` and delete the local segments it and the snapshot
        now allow; returns the local log's first offset."""
        self.retention_floor = floor
        self._delete_local_below(self._snapshot.end_offset)
        return self._log.start_offset

    def _delete_local_below(self, offset: int) -> None:
        floor = self.retention_floor
        limit = offset if floor is None else min(offset, floor)
        if limit > self._log.start_offset:
            self._log.delete_below(limit)
            self._sync_checkpoint()

    def segment_infos(self) -> list[SegmentInfo]:
        return self._log.segment_infos()

    def read_batches_below(self, from_offset: int, to_offset: int, max_bytes: int
                           ) -> list[RecordBatch]:
        """Decoded batches from the one holding `from_offset` (at or above the retained
        start) that start below `to_offset`, at most about `max_bytes`: the recent
        batches when they hold it (the live tail, no read), else the segments (not
        remembered in the batch cache: a reader of old offsets must not push the
        tail out of it)."""
        if from_offset in self._recent:
            return [b for b in self._read_recent(from_offset, 1 << 30, max_bytes)
                    if b.base_offset < to_offset]
        return [decode_batch(data)[0]
                for data in self._log.read(from_offset, max_bytes, max_offset=to_offset)]

    def read_committed_range(self, from_offset: int, to_offset: int, max_bytes: int
                             ) -> list[bytes]:
        """Stored batches from `from_offset` (a batch boundary the local log holds)
        up to `to_offset` (exclusive, a batch boundary), at most about `max_bytes`."""
        return self._log.read(from_offset, max_bytes, max_offset=to_offset)

    # -- driver side -----------------------------------------------------------

    @property
    def flushed_offset(self) -> int:
        return self._log.flushed_offset

    def flush(self) -> int:
        """Group commit: make every buffered append and truncation durable; returns the
        flushed end offset."""
        flushed = self._log.flush()
        self._sync_checkpoint()
        return flushed

    def control_batches(self, from_offset: int) -> Iterator[RecordBatch]:
        return self._log.control_batches(max(from_offset, self.start_offset))

    def read_stored(self, from_offset: int, max_bytes: int) -> list[bytes]:
        """Stored batches from `from_offset` (a batch boundary), for tools and tests."""
        if from_offset >= self.end_offset:
            return []
        return self._log.read(max(from_offset, self.start_offset), max_bytes)

    def repair_done(self) -> None:
        """The Raft core holds every record the damaged log had lost again."""
        if self._repair_marker is not None:
            self._repair_marker.clear()
        self.pending_repair = None

    def close(self) -> None:
        self._log.close()

    def _sync_checkpoint(self) -> None:
        # The log rebuilds its epoch history from the batches on open, so it is
        # the source of truth; the checkpoint file mirrors it for operators and
        # tools. `flush` rewrites the file only when the history changed.
        self._checkpoint.replace(self._log.epoch_history())
        self._checkpoint.flush()


class FileSnapshotStore:
    """`SnapshotStore` over the snapshot directory (controller.storage.snapshot_file).

    A fetched snapshot is written to a temp file chunk by chunk; `finish_write`
    verifies every CRC and the footer before it atomically becomes visible.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._writers: dict[SnapshotId, sf.SnapshotWriter] = {}
        self._written: dict[SnapshotId, int] = {}

    def _path(self, snapshot_id: SnapshotId) -> Path:
        return self.directory / snapshot_id.file_name

    def size_bytes(self, snapshot_id: SnapshotId) -> int | None:
        try:
            return self._path(snapshot_id).stat().st_size
        except FileNotFoundError:
            return None

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        with open(self._path(snapshot_id), "rb") as f:
            f.seek(position)
            return f.read(max_bytes)

    def begin_write(self, snapshot_id: SnapshotId) -> None:
        old = self._writers.pop(snapshot_id, None)
        if old is not None:
            old.abort()
        self._writers[snapshot_id] = sf.SnapshotWriter(self.directory,
                                                       snapshot_id, raw=True)
        self._written[snapshot_id] = 0

    def write_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        if position != self._written[snapshot_id]:
            raise ValueError(f"chunk at {position}, have {self._written[snapshot_id]} bytes "
                             f"of {snapshot_id}")
        self._writers[snapshot_id].append_raw(data)
        self._written[snapshot_id] += len(data)

    def finish_write(self, snapshot_id: SnapshotId) -> Path:
        """Verify and publish a fetched snapshot (durable when this returns)."""
        writer = self._writers.pop(snapshot_id)
        del self._written[snapshot_id]
        return writer.freeze()

    def latest(self) -> SnapshotId | None:
        latest = sf.latest_snapshot(self.directory)
        return latest

