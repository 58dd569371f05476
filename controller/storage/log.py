"""`SegmentedLog`: the metadata log on disk, as a sequence of segments.

Invariants (checked on open, kept by every operation):
- segments are contiguous: each starts at the previous one's `next_offset`;
- batches are contiguous inside a segment and epochs never go back;
- only the last (active) segment is written; a segment is fsynced before the
  next one is created, so after a crash only the last segment can have a torn
  tail;
- the recovery point (recovery_point.py, when the log keeps one) is never below
  an offset that `flushed_offset` has reported.

Recovery cuts a torn tail: a bad batch at the end of the last segment, at or
beyond the recovery point, with no intact batch after it. Anything else that
loses records (a bad batch below the recovery point or in an older segment,
intact batches behind a bad one, missing segments) is damage to records this
replica may have acknowledged: `LogCorruptionError`, or, with `on_damage`, a
cut that the caller records so the replica repairs it before it votes again.

Durability: `append` writes to the page cache; `flush()` fsyncs every file
written since the last flush (group commit) and the directory if segments were
created, and only then moves `flushed_offset`. Not thread-safe: one owner (the
Raft driver) calls it; the one exception is `PendingFlush.run()` (see flush.py):
`begin_flush()` / `run()` in a worker thread / `complete_flush()` keeps the
fsyncs off the event loop.

Open scans every segment with CRC checks (cost: one sequential read of the
log); it also rebuilds the index files and the epoch history from the batches.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from controller.logformat.batch import (
    EMPTY_ORIGIN,
    BatchHeader,
    BatchOrigin,
    RecordBatch,
    decode_batch,
    encode_batch,
    verify_batch,
)
from controller.storage.errors import (
    CorruptBatchError,
    InvalidAppendError,
    LogCorruptionError,
    OffsetOutOfRangeError,
)
from controller.storage.flush import PendingFlush
from controller.storage.fsutil import fsync_dir
from controller.storage.leader_epoch import EpochHistory
from controller.storage.log_config import LogConfig, LogDamage, RecoveryReport, SegmentInfo
from controller.storage.recovery_point import RecoveryPointFile
from controller.storage.segment import (
    ScanResult,
    Segment,
    find_valid_batch_after,
    index_file_name,
    parse_segment_file_name,
    segment_file_name,
)

__all__ = ["LogConfig", "LogDamage", "RecoveryReport", "SegmentInfo", "SegmentedLog"]

logger = logging.getLogger(__name__)

_MIN_CHUNK_BYTES = 64 * 1024
_MAX_CHUNK_BYTES = 4 * 1024 * 1024


class SegmentedLog:
    """Append-only log of record batches in segment files under one directory."""

    def __init__(self, directory: Path, config: LogConfig, clock_ms: Callable[[], int] | None):
        self.directory = directory
        self.config = config
        self._clock_ms = clock_ms
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._epochs = EpochHistory()
        self._dir_dirty = False
        self._flushed_offset = 0
        self._pending_flush: PendingFlush | None = None
        self._lowest_end_during_flush = 0
        self._recovery_point: RecoveryPointFile | None = None
        self.recovery = RecoveryReport()

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, directory: str | os.PathLike[str], config: LogConfig | None = None,
             clock_ms: Callable[[], int] | None = None, initial_offset: int = 0,
             recovery_point_path: Path | None = None,
             on_damage: Callable[[LogDamage], None] | None = None) -> SegmentedLog:
        """Open (creating if needed) the log in `directory` and recover it.

        `initial_offset` is the start of a brand-new log (e.g. after a snapshot).
        `recovery_point_path` keeps how far the log was flushed (recovery_point.py);
        without it a complete batch that fails its check at the very end of the
        log cannot be told from a torn write and is cut. Damage to flushed records
        raises `LogCorruptionError`, unless `on_damage` is given: it is called
        before anything is cut (to persist that a repair is due, or to raise),
        and the log is then cut at the damage.
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        log = cls(path, config or LogConfig(), clock_ms)
        try:
            log._recover(initial_offset, recovery_point_path, on_damage)
        except BaseException:
            log.close()
            raise
        return log

    def _recover(self, initial_offset: int, recovery_point_path: Path | None,
                 on_damage: Callable[[LogDamage], None] | None) -> None:
        if recovery_point_path is not None:
            self._recovery_point = RecoveryPointFile(recovery_point_path)
        stored_point = None if self._recovery_point is None else self._recovery_point.stored
        bases = sorted(b for b in (parse_segment_file_name(p.name) for p in
                                   self.directory.iterdir()) if b is not None)
        self._remove_orphan_indexes(set(bases))
        if not bases:
            self._segments.append(self._new_segment(initial_offset))
            self._bases.append(initial_offset)
            fsync_dir(self.directory)
        for i, base in enumerate(bases):
            segment = Segment(self.directory, base, self.config.index_interval_bytes,
                              self._now_ms(0))
            if i > 0 and base != self._segments[i - 1].next_offset:
                end = self._segments[i - 1].next_offset
                segment.close()
                self._damaged(on_damage, bases[i:], LogDamage(
                    str(segment.path), end, -1, max(stored_point or 0, base),
                    f"segment starts at {base} but the previous one ends at {end} "
                    "(missing or extra data)"))
                break
            self._segments.append(segment)
            self._bases.append(base)
            scan = segment.scan()
            cut_here = scan.error is not None
            if scan.error is not None:
                damage = self._classify(segment, scan, i == len(bases) - 1, stored_point)
                if damage is not None:
                    self._damaged(on_damage, bases[i + 1:], damage)
                else:
                    self.recovery = RecoveryReport(segment.size_bytes - scan.valid_size_bytes,
                                                   str(segment.path), scan.next_offset,
                                                   scan.error.reason)
                    logger.warning("log recovery: cutting %s at offset %d (byte %d): %s",
                                   segment.path, scan.next_offset, scan.valid_size_bytes,
                                   scan.error.reason)
            segment.install_scan(scan)
            for epoch, start in scan.epoch_starts:
                if epoch < self._epochs.latest_epoch:
                    raise LogCorruptionError(str(segment.path), "epoch goes back across "
                                             f"segments (to {epoch})", start)
                self._epochs.assign(epoch, start)
            if cut_here:
                break
        if stored_point is not None and self.end_offset < stored_point \
                and self.recovery.damage is None:
            # Whole segments gone (deleted by hand, a lost directory): the files
            # that are left check out, but they end before what was flushed.
            self._damaged(on_damage, [], LogDamage(
                str(self._segments[-1].path), self.end_offset, -1, stored_point,
                "the log ends before its recovery point (segment files are missing)"))
        # What we recovered may still sit only in the page cache (the previous
        # process died, not the machine): make it durable before calling it flushed.
        # Older segments were synced when they were rolled.
        self._segments[-1].sync(force=True)
        fsync_dir(self.directory)
        self._flushed_offset = self.end_offset
        if self._recovery_point is not None:
            # A log without the file yet (new, or written by a version without it)
            # starts from what it holds; after damage, from what is left.
            self._recovery_point.reset(self.end_offset)

    def _classify(self, segment: Segment, scan: ScanResult, is_last: bool,
                  stored_point: int | None) -> LogDamage | None:
        """A scan that stopped at a bad batch: damage to flushed records, or (None)
        a torn write at the end of the log that is safe to cut."""
        assert scan.error is not None
        reason = scan.error.reason
        point = max(stored_point or 0, scan.next_offset)
        if not is_last:
            # A segment is fsynced before the next one exists: only the last can tear.
            return LogDamage(str(segment.path), scan.next_offset, scan.valid_size_bytes,
                             max(point, segment.base_offset + 1),
                             f"{reason} (in a closed segment)")
        if stored_point is not None and scan.next_offset < stored_point:
            return LogDamage(str(segment.path), scan.next_offset, scan.valid_size_bytes,
                             stored_point, f"{reason}, below the recovery point")
        last_epoch = scan.epoch_starts[-1][0] if scan.epoch_starts else self._epochs.latest_epoch
        found = find_valid_batch_after(segment.fd, scan.valid_size_bytes, segment.size_bytes,
                                       scan.next_offset, max(last_epoch, 0))
        if found is not None:
            # Not a torn tail: records this node stored (and may have acknowledged)
            # sit behind the damage.
            return LogDamage(str(segment.path), scan.next_offset, scan.valid_size_bytes,
                             max(point, found[1].next_offset),
                             f"{reason}; intact batches follow it (offset "
                             f"{found[1].base_offset} at byte {found[0]}), so this is "
                             "damage inside the log, not a torn write at its end")
        return None

    def _damaged(self, on_damage: Callable[[LogDamage], None] | None,
                 later_bases: list[int], damage: LogDamage) -> None:
        """Damage to flushed records: refuse (no `on_damage`), or let `on_damage`
        record it, then drop the segments after the damaged one."""
        if on_damage is None:
            raise LogCorruptionError(damage.segment, damage.reason, damage.offset,
                                     damage.position if damage.position >= 0 else None)
        on_damage(damage)
        logger.error("log recovery: %s; cutting the log there, this replica repairs "
                     "it from the leader before it votes again", damage.describe())
        for base in later_bases:
            (self.directory / segment_file_name(base)).unlink(missing_ok=True)
            (self.directory / index_file_name(base)).unlink(missing_ok=True)
        self.recovery = RecoveryReport(0, damage.segment, damage.offset, damage.reason, damage)

    def _remove_orphan_indexes(self, bases: set[int]) -> None:
        for entry in self.directory.iterdir():
            stem, _, suffix = entry.name.partition(".")
            if suffix == "index" and stem.isdigit() and int(stem) not in bases:
                entry.unlink()

    def _now_ms(self, fallback_ms: int) -> int:
        return self._clock_ms() if self._clock_ms is not None else fallback_ms

    def _new_segment(self, base_offset: int, created_ms: int = 0) -> Segment:
        segment = Segment(self.directory, base_offset, self.config.index_interval_bytes,
                          created_ms)
        if not segment.is_empty:
            # A stale file with this name (only possible after manual meddling).
            raise LogCorruptionError(str(segment.path), "new segment file is not empty",
                                     base_offset)
        self._dir_dirty = True
        return segment

    # -------------------------------------------------------------- properties

    @property
    def start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def end_offset(self) -> int:
        """The next offset to write (one past the last record)."""
        return self._segments[-1].next_offset

    @property
    def flushed_offset(self) -> int:
        """Every record below this offset is on disk (fsynced)."""
        return self._flushed_offset

    @property
    def last_epoch(self) -> int:
        """Epoch of the last batch (-1 when the log has never held a batch)."""
        return self._epochs.latest_epoch

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def segment_paths(self) -> list[Path]:
        return [s.path for s in self._segments]

    def segment_infos(self) -> list[SegmentInfo]:
        """Each segment's offsets, size and last write time, oldest first (the last
        is the active one)."""
        return [SegmentInfo(s.base_offset, s.next_offset, s.size_bytes, s.modified_ms(),
                            i == len(self._segments) - 1)
                for i, s in enumerate(self._segments)]

    def epoch_history(self) -> list[tuple[int, int]]:
        """(epoch, start offset) for each epoch with batches in the log, ascending."""
        return self._epochs.entries()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch` in the log, its end offset); see leader_epoch."""
        return self._epochs.end_offset_for_epoch(epoch, self.end_offset)

    # ------------------------------------------------------------------ writes

    def append(self, batch: RecordBatch | bytes) -> int:
        """Append one batch, or raw bytes of one or more back-to-back batches (as fetched).

        Raw bytes are verified (CRC, structure) before anything is written. The
        first base offset must equal `end_offset`; returns the new end offset.
        """
        data = encode_batch(batch) if isinstance(batch, RecordBatch) else bytes(batch)
        headers = self._validate_append(data)
        now_ms = self._now_ms(headers[0][1].append_time_ms)
        self._maybe_roll(now_ms, len(data))
        self._segments[-1].append(data, headers, now_ms)
        for _, header in headers:
            self._epochs.assign(header.epoch, header.base_offset)
        return self.end_offset

    def append_records(self, epoch: int, append_time_ms: int, records: Sequence[bytes],
                       origin: BatchOrigin = EMPTY_ORIGIN,
                       is_control: bool = False) -> RecordBatch:
        """Build a batch at `end_offset` from records and append it (leader path)."""
        batch = RecordBatch(self.end_offset, epoch, append_time_ms, is_control, origin,
                            tuple(records))
        self.append(batch)
        return batch

    def _validate_append(self, data: bytes) -> list[tuple[int, BatchHeader]]:
        if not data:
            raise InvalidAppendError("append of zero bytes")
        headers: list[tuple[int, BatchHeader]] = []
        expected = self.end_offset
        last_epoch = self.last_epoch
        pos = 0
        while pos < len(data):
            try:
                header = verify_batch(data, pos)
            except CorruptBatchError as exc:
                raise InvalidAppendError(f"refusing to append: {exc}") from None
            if header.base_offset != expected:
                raise InvalidAppendError(
                    f"batch base offset {header.base_offset} != log end offset {expected}")
            if header.epoch < last_epoch:
                raise InvalidAppendError(
                    f"batch epoch {header.epoch} is below the log's last epoch {last_epoch}")
            headers.append((pos, header))
            expected = header.next_offset
            last_epoch = header.epoch
            pos += header.size_bytes
        if len(data) > self.config.segment_bytes:
            raise InvalidAppendError(f"{len(data)} bytes in one append exceed segment_bytes")
        return headers

    def _maybe_roll(self, now_ms: int, size_bytes: int) -> None:
        active = self._segments[-1]
        if active.is_empty:
            return
        too_big = active.size_bytes + size_bytes > self.config.segment_bytes
        too_old = now_ms - active.created_ms >= self.config.segment_ms
        if too_big or too_old:
            self.roll(now_ms)

    def roll(self, now_ms: int | None = None) -> None:
        """Close the active segment (fsync it) and start a new one at `end_offset`."""
        active = self._segments[-1]
        if active.is_empty:
            return
        # Sync the old segment before the new file exists, so a crash can only
        # ever tear the last segment (see the module docstring). Forced: a
        # PendingFlush running in another thread may have taken the dirty flag
        # without having finished its fsync yet.
        active.sync(force=True)
        active.index.sync()
        created_ms = now_ms if now_ms is not None else self._now_ms(0)
        segment = self._new_segment(active.next_offset, created_ms)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    def flush(self) -> int:
        """Make everything appended so far durable; returns the new `flushed_offset`."""
        return self.complete_flush(self.begin_flush().run())

    def begin_flush(self) -> PendingFlush:
        """Capture a group commit; `run()` it (any thread), then `complete_flush` it.

        One flush at a time: begin the next only after completing this one.
        """
        assert self._pending_flush is None, "a flush is already in progress"
        fds = [fd for fd in (s.take_dirty_fd() for s in self._segments) if fd is not None]
        directory = self.directory if self._dir_dirty else None
        self._dir_dirty = False
        if self._recovery_point is not None:
            self._recovery_point.begin_flush(self.end_offset)
        self._pending_flush = PendingFlush(self.end_offset, fds, directory,
                                           self._recovery_point)
        self._lowest_end_during_flush = self.end_offset
        return self._pending_flush

    def complete_flush(self, pending: PendingFlush) -> int:
        """After `pending.run()` returned: move `flushed_offset`; returns it."""
        assert pending is self._pending_flush and pending.done, "complete the flush that ran"
        self._pending_flush = None
        # A truncation while the fsyncs ran removed records the flush covered.
        durable = min(pending.target_offset, self._lowest_end_during_flush)
        self._flushed_offset = max(min(self._flushed_offset, self.end_offset), durable)
        return self._flushed_offset

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or after `offset`, a batch boundary in [start, end]."""
        if offset == self.end_offset:
            return
        if not self.start_offset <= offset < self.end_offset:
            raise OffsetOutOfRangeError(
                f"cannot truncate to {offset}: log holds [{self.start_offset}, {self.end_offset})")
        i = max(bisect_right(self._bases, offset) - 1, 0)
        target = self._segments[i]
        target.position_of(offset)  # fail before deleting anything if not a boundary
        if self._recovery_point is not None:
            # Lowered first: a crash before the cut leaves a longer log than the point.
            self._recovery_point.lower_to(offset)
        later = self._segments[i + 1:]
        if later:
            # Delete later segments durably before cutting the target: a crash in
            # between leaves a longer, still contiguous log, never a gap.
            for segment in later:
                segment.delete()
            del self._segments[i + 1:]
            del self._bases[i + 1:]
            fsync_dir(self.directory)
        target.truncate_to(offset)
        self._epochs.truncate_from_end(offset)
        self._flushed_offset = min(self._flushed_offset, offset)
        self._lowest_end_during_flush = min(self._lowest_end_during_flush, offset)

    def delete_below(self, offset: int) -> int:
        """Delete the segments whose records are all below `offset`; returns the new start.

        The active segment is never deleted. Below the start it is a no-op.
        """
        deleted = 0
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            self._segments.pop(0).delete()
            self._bases.pop(0)
            deleted += 1
        if deleted:
            self._epochs.truncate_from_start(self.start_offset)
            fsync_dir(self.directory)
        return self.start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at `offset` (after installing a snapshot).

        Not atomic: a crash in the middle can leave an empty log at offset 0. On
        start-up, open with `initial_offset=<latest snapshot end offset>` and call
        this again if `end_offset` is still below the snapshot's end offset.
        """
        for segment in self._segments:
            segment.delete()
        self._segments.clear()
        self._bases.clear()
        self._epochs.clear()
        fsync_dir(self.directory)
        self._segments.append(self._new_segment(offset, self._now_ms(0)))
        self._bases.append(offset)
        fsync_dir(self.directory)
        self._dir_dirty = False
        self._flushed_offset = offset
        if self._recovery_point is not None:
            # After the reset: a crash before it leaves a log shorter than the
            # snapshot, which the snapshot's owner completes (log_adapter.py).
            self._recovery_point.reset(offset)
        # A flush in progress covered records of the old log: it must not count.
        self._lowest_end_during_flush = -1

    # ------------------------------------------------------------------- reads

    def _iter_stored(self, from_offset: int,
                     max_bytes: int) -> Iterator[tuple[BatchHeader, bytes, int]]:
        if not self.start_offset <= from_offset <= self.end_offset:
            raise OffsetOutOfRangeError(
                f"offset {from_offset} outside [{self.start_offset}, {self.end_offset}]")
        # Read what the caller wants plus the index gap in one pread, within bounds:
        # a small fetch must not pull megabytes, a big one should not take many syscalls.
        chunk_bytes = min(max(max_bytes + self.config.index_interval_bytes, _MIN_CHUNK_BYTES),
                          _MAX_CHUNK_BYTES)
        i = max(bisect_right(self._bases, from_offset) - 1, 0)
        for segment in self._segments[i:]:
            try:
                for _, header, buf, rel in segment.iter_from(from_offset, chunk_bytes):
                    yield header, buf, rel
            except CorruptBatchError as exc:
                raise LogCorruptionError(str(segment.path), exc.reason, exc.offset,
                                         exc.position) from None

    def _select(self, from_offset: int, max_bytes: int,
                max_offset: int | None) -> Iterator[tuple[BatchHeader, bytes, int]]:
        """The batches a read returns: from the one holding `from_offset`, within limits."""
        total = 0
        for header, buf, rel in self._iter_stored(from_offset, max_bytes):
            if max_offset is not None and header.base_offset >= max_offset:
                return
            if total and total + header.size_bytes > max_bytes:
                return
            yield header, buf, rel
            total += header.size_bytes
            if total >= max_bytes:
                return

    def read(self, from_offset: int, max_bytes: int = 1024 * 1024,
             max_offset: int | None = None) -> list[bytes]:
        """Raw stored batches from the one containing `from_offset`, up to `max_bytes`.

        At least one batch is returned (if any exists) even when larger than
        `max_bytes`. `max_offset` (e.g. the high watermark) excludes batches that
        start at or after it. Each batch's CRC is checked before it is served.
        """
        return [buf[rel:rel + h.size_bytes] for h, buf, rel in
                self._select(from_offset, max_bytes, max_offset)]

    def read_batches(self, from_offset: int, max_bytes: int = 1024 * 1024,
                     max_offset: int | None = None) -> list[RecordBatch]:
        """Like `read`, decoded (records stay bytes)."""
        return [decode_batch(buf, rel, verified=h)[0] for h, buf, rel in
                self._select(from_offset, max_bytes, max_offset)]

    def control_batches(self, from_offset: int) -> Iterator[RecordBatch]:
        """The control batches from the one holding `from_offset` on, decoded; the
        others are only walked (header and CRC), never decoded."""
        if from_offset >= self.end_offset:
            return
        for header, buf, rel in self._iter_stored(from_offset, _MAX_CHUNK_BYTES):
            if header.is_control:
                yield decode_batch(buf, rel, verified=header)[0]

    @property
    def recovery_point(self) -> int | None:
        """The persisted recovery point (None: not kept for this log)."""
        return None if self._recovery_point is None else self._recovery_point.offset

    def close(self) -> None:
        for segment in self._segments:
            segment.close()
        if self._recovery_point is not None:
            self._recovery_point.close()

    def __enter__(self) -> SegmentedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
