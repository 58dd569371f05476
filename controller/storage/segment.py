"""One segment: a file of back-to-back batches named by its base offset, plus its index.

A segment knows how to scan itself (recovery), append, find and read batches
from an offset, and cut itself at a batch boundary. Policy (which segment is
active, rolling, what a corrupt batch means) lives in `SegmentedLog`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import attrs

from controller.logformat.batch import (
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    peek_batch_header,
    verify_batch,
)
from controller.storage.errors import CorruptBatchError, OffsetOutOfRangeError, TruncatedBatchError
from controller.storage.fsutil import fdatasync
from controller.storage.index import OffsetIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
# Reads go through chunks of this size so small batches cost no syscall each.
READ_CHUNK_BYTES = 1024 * 1024


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{INDEX_SUFFIX}"


def parse_segment_file_name(name: str) -> int | None:
    """Base offset of a segment file name, None if the name is not one."""
    stem, dot, suffix = name.partition(".")
    if "." + suffix != LOG_SUFFIX or len(stem) != 20 or not stem.isdigit() or not dot:
        return None
    return int(stem)


StoredBatch = tuple[int, BatchHeader, bytes, int]
"""(file position, verified header, buffer holding the batch, position in that buffer)."""


def iter_stored_batches(fd: int, pos: int, end_pos: int,
                        chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[StoredBatch]:
    """Verify and yield the batches stored in `[pos, end_pos)` of a file.

    Raises `CorruptBatchError` (or `TruncatedBatchError`) at the first bad batch,
    with its file position; the batches before it have been yielded already.
    """
    buf = b""
    buf_start = pos
    while pos < end_pos:
        rel = pos - buf_start
        try:
            need = HEADER_SIZE
            header = None
            if len(buf) - rel >= HEADER_SIZE:
                header = peek_batch_header(buf, rel)
                need = header.size_bytes
            if len(buf) - rel < need or header is None:
                buf = os.pread(fd, min(max(need, chunk_bytes), end_pos - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < need:
                    if len(buf) >= HEADER_SIZE:
                        peek_batch_header(buf, 0)  # a garbage header is corrupt, not torn
                    raise TruncatedBatchError(
                        f"file ends {len(buf)} bytes into a batch that needs {need}")
                continue
            header = verify_batch(buf, rel, header)
        except CorruptBatchError as exc:
            raise type(exc)(exc.reason, exc.offset, pos) from None
        yield pos, header, buf, rel
        pos += header.size_bytes


# The magic byte's place in a batch header (controller/logformat/batch.py).
_MAGIC_AT = 16
_MAGIC_BYTE = bytes([MAGIC])


def find_valid_batch_after(fd: int, pos: int, end_pos: int, min_offset: int,
                           min_epoch: int) -> tuple[int, BatchHeader] | None:
    """The first intact batch (header, CRC, lengths) starting after byte `pos` of a
    file whose batch at `pos` is damaged, with an offset and epoch that could follow
    the good part: its (file position, header), or None.

    Recovery asks this to tell a torn tail (a write the crash cut short: nothing
    valid after it, safe to cut) from damage in the middle of the log (valid data
    after it: cutting would silently drop records this node acknowledged).
    """
    data = os.pread(fd, end_pos - pos, pos)
    start = 1
    while True:
        i = data.find(_MAGIC_BYTE, start + _MAGIC_AT)
        if i < 0:
            return None
        at = i - _MAGIC_AT
        start = at + 1
        try:
            header = peek_batch_header(data, at)
            if header.base_offset < min_offset or header.epoch < min_epoch:
                continue
            verify_batch(data, at, header)
        except CorruptBatchError:
            continue
        return pos + at, header


@attrs.define
class ScanResult:
    """What a recovery scan of one segment found."""

    valid_size_bytes: int
    next_offset: int
    index_entries: list[tuple[int, int]]
    epoch_starts: list[tuple[int, int]]
    first_append_time_ms: int | None
    error: CorruptBatchError | None


class Segment:
    """An open segment file; the caller serialises access (the log is single-threaded)."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int,
                 created_ms: int):
        self.base_offset = base_offset
        self.path = directory / segment_file_name(base_offset)
        self.index = OffsetIndex(directory / index_file_name(base_offset), base_offset)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.index_interval_bytes = index_interval_bytes
        self.size_bytes = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        # Time the segment was started: its first batch's append time, else its creation.
        self.created_ms = created_ms
        self.first_append_time_ms: int | None = None
        self.dirty = False
        self._bytes_since_index_entry = 0

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    def _track_index(self, offset: int, position: int, size_bytes: int,
                     entries: list[tuple[int, int]] | None) -> None:
        # Same rule for appends and scans, so a clean reopen finds the same index.
        if self._bytes_since_index_entry >= self.index_interval_bytes and position > 0:
            if entries is None:
                self.index.append(offset, position)
            else:
                entries.append((offset, position))
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size_bytes

    def scan(self) -> ScanResult:
        """Walk and verify every batch; stop at the first bad one (reported, not raised)."""
        entries: list[tuple[int, int]] = []
        epoch_starts: list[tuple[int, int]] = []
        expected = self.base_offset
        valid = 0
        first_time: int | None = None
        last_epoch = -1
        self._bytes_since_index_entry = 0
        error: CorruptBatchError | None = None
        try:
            for pos, header, _, _ in iter_stored_batches(self.fd, 0, self.size_bytes):
                if header.base_offset != expected:
                    raise CorruptBatchError(
                        f"offset discontinuity: batch starts at {header.base_offset}, "
                        f"expected {expected}", expected, pos)
                if header.epoch < last_epoch:
                    raise CorruptBatchError(
                        f"epoch goes back from {last_epoch} to {header.epoch}", expected, pos)
                if header.epoch > last_epoch:
                    epoch_starts.append((header.epoch, header.base_offset))
                    last_epoch = header.epoch
                if first_time is None:
                    first_time = header.append_time_ms
                self._track_index(header.base_offset, pos, header.size_bytes, entries)
                expected = header.next_offset
                valid = pos + header.size_bytes
        except CorruptBatchError as exc:
            # Report where the log breaks (the next expected offset): a damaged
            # header's own base offset may be garbage.
            exc.offset = expected
            error = exc
        return ScanResult(valid, expected, entries, epoch_starts, first_time, error)

    def install_scan(self, scan: ScanResult) -> None:
        """Adopt a scan: cut the file after the last good batch, rebuild the index."""
        if scan.valid_size_bytes < self.size_bytes:
            os.ftruncate(self.fd, scan.valid_size_bytes)
            self.size_bytes = scan.valid_size_bytes
            self.dirty = True
        self.next_offset = scan.next_offset
        self.first_append_time_ms = scan.first_append_time_ms
        if scan.first_append_time_ms is not None:
            self.created_ms = scan.first_append_time_ms
        self.index.replace(scan.index_entries)

    def append(self, data: bytes, batches: list[tuple[int, BatchHeader]], now_ms: int) -> None:
        """Append verified batches (`batches`: position in `data` and header of each).

        The age of a segment counts from its first append (`now_ms` of that call).
        """
        assert batches and batches[0][1].base_offset == self.next_offset
        if self.is_empty:
            self.created_ms = now_ms
        start = self.size_bytes
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.pwrite(self.fd, view[written:], start + written)
        except OSError:
            # E.g. disk full: drop the partial write so the file ends at a batch
            # boundary again (a roll would otherwise freeze garbage into an older segment).
            os.ftruncate(self.fd, start)
            raise
        for rel, header in batches:
            self._track_index(header.base_offset, start + rel, header.size_bytes, None)
            if self.first_append_time_ms is None:
                self.first_append_time_ms = header.append_time_ms
        self.size_bytes += len(data)
        self.next_offset = batches[-1][1].next_offset
        self.dirty = True

    def iter_from(self, from_offset: int,
                  chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[StoredBatch]:
        """Stored batches from the one containing `from_offset` to the end of the segment.

        Offsets are checked for continuity from the index entry on: the CRC does
        not cover a batch's base offset, so damage there shows up only this way.
        """
        expected, pos = self.index.lookup(from_offset)
        for stored in iter_stored_batches(self.fd, pos, self.size_bytes, chunk_bytes):
            header = stored[1]
            if header.base_offset != expected:
                raise CorruptBatchError(f"offset discontinuity: batch starts at "
                                        f"{header.base_offset}, expected {expected}",
                                        expected, stored[0])
            expected = header.next_offset
            if expected > from_offset:
                yield stored

    def position_of(self, offset: int) -> int:
        """Byte position of the batch starting at `offset`; error if no batch starts there."""
        if offset == self.next_offset:
            return self.size_bytes
        for pos, header, _, _ in self.iter_from(offset):
            if header.base_offset == offset:
                return pos
            break
        raise OffsetOutOfRangeError(f"{self.path}: offset {offset} is not a batch boundary")

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after `offset` (a batch boundary of this segment)."""
        position = self.position_of(offset)
        os.ftruncate(self.fd, position)
        self.size_bytes = position
        self.next_offset = offset
        self.index.truncate_to_position(position)
        # Re-derive the byte count since the last index entry from what is left.
        last_entry = self.index.entries()[-1][1] if len(self.index) else 0
        self._bytes_since_index_entry = position - last_entry
        if position == 0:
            self.first_append_time_ms = None
        self.dirty = True

    def modified_ms(self) -> int:
        """When the file was last written (the file system's clock)."""
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def take_dirty_fd(self) -> int | None:
        """A duplicate descriptor to fsync if the file changed since the last one, else None.

        The segment counts as clean from now on: writes after this call mark it
        dirty again, so the next flush picks them up.
        """
        if not self.dirty:
            return None
        self.dirty = False
        return os.dup(self.fd)

    def sync(self, force: bool = False) -> None:
        """fdatasync if written since the last sync; `force` even if not (see roll)."""
        if self.dirty or force:
            fdatasync(self.fd)
            self.dirty = False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.index.close()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.index.path.unlink(missing_ok=True)

