"""Snapshot files: the whole metadata image at a committed offset.

Name: `<end_offset:020d>-<epoch:010d>.checkpoint` where end_offset is the first
offset NOT contained (the log resumes there) and epoch the Raft epoch of the
last contained record. Contents: record batches in the log's batch format
(each CRC'd), with batch offsets counting records inside the snapshot from 0:

    batch 0 (control): SnapshotHeaderRecord(last_contained_offset, epoch, time, format)
    batches 1..n:      the image records, opaque bytes, in the caller's order
    last (control):    SnapshotFooterRecord(record_count = number of image records)

A snapshot is written to `<name>.tmp`, fsynced, renamed and the directory
fsynced (fsutil.AtomicFileWriter), so a visible `.checkpoint` is complete. A
reader still checks every CRC and the footer. `remove_partial_snapshots` deletes
`.tmp` files left by a crash; call it once at start-up, before any writer runs.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path

import attrs

from controller.logformat.batch import EMPTY_ORIGIN, RecordBatch, decode_batch, encode_batch
from controller.logformat.values import SNAPSHOT_SUFFIX, SnapshotId, parse_snapshot_file_name
from controller.records import (
    RecordDecodeError,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    decode_record,
    encode_record,
    make_record,
    record_type,
)
from controller.storage.errors import CorruptBatchError, SnapshotCorruptionError
from controller.storage.fsutil import TEMP_SUFFIX, AtomicFileWriter, fsync_dir, remove_temp_files
from controller.storage.segment import iter_stored_batches

SNAPSHOT_FORMAT_VERSION = 1
DEFAULT_RECORDS_PER_BATCH = 1000
DEFAULT_BATCH_BYTES = 1024 * 1024


class SnapshotWriter:
    """Builds one snapshot file; nothing is visible until `freeze()`.

    `append(records)` takes encoded records (bytes) and cuts them into batches.
    Receivers of FetchSnapshot chunks use `append_raw` instead; `freeze()` then
    verifies the whole file before committing it.
    """

    def __init__(self, directory: str | os.PathLike[str], snapshot_id: SnapshotId,
                 last_contained_log_time_ms: int = 0, *, raw: bool = False,
                 records_per_batch: int = DEFAULT_RECORDS_PER_BATCH,
                 batch_bytes: int = DEFAULT_BATCH_BYTES):
        if snapshot_id.end_offset < 1 and not raw:
            raise ValueError("a snapshot must contain at least one offset (end_offset >= 1)")
        self.snapshot_id = snapshot_id
        self.path = Path(directory) / snapshot_id.file_name
        self._time_ms = last_contained_log_time_ms
        self._raw = raw
        self._records_per_batch = records_per_batch
        self._batch_bytes = batch_bytes
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._next_offset = 0
        self.record_count = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = AtomicFileWriter(self.path)
        if not raw:
            header = SnapshotHeaderRecord(
                last_contained_offset=snapshot_id.end_offset - 1,
                last_contained_epoch=snapshot_id.epoch,
                last_contained_log_time_ms=last_contained_log_time_ms,
                format_version=SNAPSHOT_FORMAT_VERSION)
            self._write_batch([encode_record(make_record(header))], is_control=True)

    def _write_batch(self, records: list[bytes], is_control: bool) -> None:
        batch = RecordBatch(self._next_offset, self.snapshot_id.epoch, self._time_ms,
                            is_control, EMPTY_ORIGIN, tuple(records))
        self._file.write(encode_batch(batch))
        self._next_offset = batch.next_offset

    def _flush_pending(self) -> None:
        if self._pending:
            self._write_batch(self._pending, is_control=False)
            self._pending = []
            self._pending_bytes = 0

    def append(self, records: Iterable[bytes]) -> None:
        """Add records; a batch is cut once it holds `records_per_batch` records or
        `batch_bytes` bytes."""
        assert not self._raw, "append() on a raw snapshot writer"
        todo = records if isinstance(records, list) else list(records)
        i = 0
        while i < len(todo):
            # Whole slices that fill neither limit go in at once (a snapshot is a
            # million records); the slice that would is taken record by record.
            room = self._records_per_batch - len(self._pending)
            part = todo[i:i + room]
            size = sum(map(len, part))
            if self._pending_bytes + size < self._batch_bytes:
                self._pending += part
                self._pending_bytes += size
                self.record_count += len(part)
                i += len(part)
                if len(self._pending) >= self._records_per_batch:
                    self._flush_pending()
                continue
            for record in part:
                self._pending.append(record)
                self._pending_bytes += len(record)
                self.record_count += 1
                i += 1
                if self._pending_bytes >= self._batch_bytes:
                    self._flush_pending()
                    break
            else:
                if len(self._pending) >= self._records_per_batch:
                    self._flush_pending()

    def append_raw(self, chunk: bytes) -> None:
        """Write bytes of a snapshot file as received (FetchSnapshot)."""
        assert self._raw, "append_raw() on a record snapshot writer"
        self._file.write(chunk)

    def freeze(self) -> Path:
        """Finish the file (footer), commit it atomically; returns the final path."""
        if self._raw:
            # Check the received bytes before they become a visible snapshot.
            try:
                _validate(self._file.temp_path, self.snapshot_id)
            except SnapshotCorruptionError:
                self.abort()
                raise
        else:
            self._flush_pending()
            footer = SnapshotFooterRecord(record_count=self.record_count)
            self._write_batch([encode_record(make_record(footer))], is_control=True)
        self._file.commit()
        return self.path

    def abort(self) -> None:
        self._file.abort()

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()  # no-op after freeze()


@attrs.frozen
class SnapshotSummary:
    last_contained_offset: int
    last_contained_epoch: int
    last_contained_log_time_ms: int
    record_count: int
    size_bytes: int


def _iter_file_batches(path: Path) -> Generator[RecordBatch, None, None]:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        expected = 0
        for pos, header, buf, rel in iter_stored_batches(fd, 0, size):
            if header.base_offset != expected:
                raise CorruptBatchError(f"batch offset {header.base_offset}, expected {expected}",
                                        header.base_offset, pos)
            expected = header.next_offset
            yield decode_batch(buf, rel, verified=header)[0]
    finally:
        os.close(fd)


def _decode_control(path: Path, data: bytes, want: str) -> object:
    try:
        rec = decode_record(data)
    except RecordDecodeError as exc:
        raise SnapshotCorruptionError(f"{path}: unreadable {want} record: {exc}") from None
    if record_type(rec) != want:
        raise SnapshotCorruptionError(f"{path}: expected a {want} record, found "
                                      f"{record_type(rec)}")
    return getattr(rec, want)


def _validate(path: Path, snapshot_id: SnapshotId | None) -> SnapshotSummary:
    """Read the whole file: every CRC, contiguity, header first, footer last with the count."""
    header: SnapshotHeaderRecord | None = None
    last: RecordBatch | None = None
    data_records = 0
    try:
        for batch in _iter_file_batches(path):
            if header is None:
                if not batch.is_control:
                    raise SnapshotCorruptionError(f"{path}: first batch is not the header")
                found = _decode_control(path, batch.records[0], "snapshot_header")
                assert isinstance(found, SnapshotHeaderRecord)
                header = found
            elif last is not None:
                data_records += last.record_count if not last.is_control else 0
            last = batch
    except CorruptBatchError as exc:
        raise SnapshotCorruptionError(f"{path}: {exc}") from None
    if header is None or last is None or last.base_offset == 0:
        raise SnapshotCorruptionError(f"{path}: missing header or footer (truncated?)")
    footer = _decode_control(path, last.records[-1], "snapshot_footer")
    assert isinstance(footer, SnapshotFooterRecord)
    if not last.is_control or footer.record_count != data_records:
        raise SnapshotCorruptionError(f"{path}: footer says {footer.record_count} records, "
                                      f"file holds {data_records}")
    if snapshot_id is not None and (header.last_contained_offset != snapshot_id.end_offset - 1
                                    or header.last_contained_epoch != snapshot_id.epoch):
        raise SnapshotCorruptionError(f"{path}: header ({header.last_contained_offset}, "
                                      f"{header.last_contained_epoch}) does not match the name")
    return SnapshotSummary(header.last_contained_offset, header.last_contained_epoch,
                           header.last_contained_log_time_ms, data_records,
                           path.stat().st_size)


class SnapshotReader:
    """A verified snapshot file: `open` checks all of it, then iterate batches or records."""

    def __init__(self, path: Path, snapshot_id: SnapshotId | None, summary: SnapshotSummary):
        self.path = path
        self.snapshot_id = snapshot_id
        self.summary = summary

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> SnapshotReader:
        p = Path(path)
        snapshot_id = parse_snapshot_file_name(p.name)
        return cls(p, snapshot_id, _validate(p, snapshot_id))

    @property
    def size_bytes(self) -> int:
        return self.summary.size_bytes

    def batches(self) -> Iterator[RecordBatch]:
        """Every batch, header and footer included (re-checked: the file may change)."""
        try:
            yield from _iter_file_batches(self.path)
        except CorruptBatchError as exc:
            raise SnapshotCorruptionError(f"{self.path}: {exc}") from None

    def records(self) -> Iterator[bytes]:
        """The image records (header and footer left out), in file order."""
        for batch in self.batches():
            if not batch.is_control:
                yield from batch.records

    def read_chunk(self, position: int, max_bytes: int) -> bytes:
        """Raw bytes for FetchSnapshot."""
        with open(self.path, "rb") as f:
            f.seek(position)
            return f.read(max_bytes)


def head_records(path: str | os.PathLike[str], count: int) -> list[bytes]:
    """The first `count` image records of a snapshot file, reading (and checking) only
    the batches that hold them: what a reader needs of a file a `SnapshotReader`
    verified, or will verify, as a whole."""
    out: list[bytes] = []
    batches = _iter_file_batches(Path(path))
    try:
        for batch in batches:
            if not batch.is_control:
                out.extend(batch.records[:count - len(out)])
            if len(out) >= count:
                break
    except CorruptBatchError as exc:
        raise SnapshotCorruptionError(f"{path}: {exc}") from None
    finally:
        batches.close()
    return out


def list_snapshots(directory: str | os.PathLike[str]) -> list[SnapshotId]:
    """Committed snapshots in the directory, oldest first (by end offset, then epoch)."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = (parse_snapshot_file_name(p.name) for p in d.iterdir())
    return sorted(s for s in found if s is not None)


def latest_snapshot(directory: str | os.PathLike[str]) -> SnapshotId | None:
    snapshots = list_snapshots(directory)
    return snapshots[-1] if snapshots else None


def prune_snapshots(directory: str | os.PathLike[str], keep: int) -> list[SnapshotId]:
    """Delete all but the newest `keep` snapshots; returns the deleted ids."""
    if keep < 1:
        raise ValueError("keep must be >= 1: never delete the newest snapshot")
    doomed = list_snapshots(directory)[:-keep]
    for snapshot_id in doomed:
        (Path(directory) / snapshot_id.file_name).unlink(missing_ok=True)
    if doomed:
        fsync_dir(directory)
    return doomed


def remove_partial_snapshots(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete half-written snapshot temp files (left by a crash). Call before any writer."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    return remove_temp_files(d, SNAPSHOT_SUFFIX + TEMP_SUFFIX)
