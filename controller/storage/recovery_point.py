"""`RecoveryPointFile`: how far the metadata log was durably flushed.

Why it exists: after a crash, recovery must tell a torn write (records appended
but never fsynced, so never acknowledged: safe to cut) from damage to records
this replica had fsynced and may have acknowledged to the leader (a flipped
byte, a deleted segment). A batch that runs past the end of the file is torn;
a complete batch whose CRC fails is not necessarily damage (after a power loss
the file system may have extended the file without writing its data). The
recovery point settles it: every offset below it was fsynced before the replica
said so to anyone, so a log that now ends below it has lost acknowledged data.

Rules kept by `SegmentedLog` (storage/log.py):
- it is raised only after the segments' fsyncs of a flush returned, and before
  the flush is reported (`complete_flush`), so it is never below what was
  acknowledged;
- it is lowered before a truncation cuts the log (a crash in between leaves a
  longer log than the point: fine), and set to a new log's start after a reset.

Format: two 32-byte slots, written alternately with pwrite + fdatasync, each
``magic u32 | sequence u64 | offset u64 | reserved u32 | crc32c u32`` (big-endian;
the CRC covers the first 28 bytes). A write that tears leaves the other slot
intact; the valid slot with the higher sequence wins. Neither slot valid is
corruption (`CheckpointCorruptionError`); no file is "unknown" (None).
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import crc32c

from controller.storage.errors import CheckpointCorruptionError
from controller.storage.fsutil import fdatasync, fsync_dir

_MAGIC = 0x4D4B5250  # "MKRP"
_SLOT = struct.Struct(">IQQI")
_SLOT_BYTES = _SLOT.size + 4
_FILE_BYTES = 2 * _SLOT_BYTES
# Offsets are int64 on the wire and in batches.
_MAX_OFFSET = 2**63 - 1


def _encode_slot(sequence: int, offset: int) -> bytes:
    body = _SLOT.pack(_MAGIC, sequence, offset, 0)
    return body + struct.pack(">I", crc32c.crc32c(body))


def _decode_slot(data: bytes) -> tuple[int, int] | None:
    """(sequence, offset) of a valid slot, None for a torn, zeroed or foreign one."""
    if len(data) != _SLOT_BYTES:
        return None
    body, (crc,) = data[:-4], struct.unpack(">I", data[-4:])
    if crc32c.crc32c(body) != crc:
        return None
    magic, sequence, offset, _ = _SLOT.unpack(body)
    if magic != _MAGIC or offset > _MAX_OFFSET:
        return None
    return sequence, offset


def _newest_slot(path: Path) -> tuple[int, int] | None:
    """(sequence, offset) of the newest valid slot; None when there is no file.
    Raises `CheckpointCorruptionError` when it exists but no slot checks out."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    slots = [s for s in (_decode_slot(data[i:i + _SLOT_BYTES])
                         for i in (0, _SLOT_BYTES)) if s is not None]
    if not slots:
        raise CheckpointCorruptionError(
            f"{path}: neither copy of the log recovery point checks out ({len(data)} bytes)")
    return max(slots)


def read_recovery_point(path: Path) -> int | None:
    """The stored recovery point; None when the file does not exist."""
    newest = _newest_slot(path)
    return None if newest is None else newest[1]


class RecoveryPointFile:
    """The recovery point of one log. Written by the log's owner and by one flush
    worker thread at a time; a lock orders them (see `raise_to`). Reading it does not
    create the file: the first write does (a recovery that fails leaves none)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        newest = _newest_slot(path)
        # What the file said when opened (None: no file yet).
        self.stored = None if newest is None else newest[1]
        self._sequence, self._offset = (0, -1) if newest is None else newest
        self._fd = -1
        self._lock = threading.Lock()
        # The most a flush running now may record (lowered by a truncation that
        # happens while it runs: it must not vouch for records since removed).
        self._ceiling = self._offset

    @property
    def offset(self) -> int:
        return self._offset

    def _write(self, offset: int) -> None:
        assert 0 <= offset <= _MAX_OFFSET, offset
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(self._fd).st_size < _FILE_BYTES:
                os.ftruncate(self._fd, _FILE_BYTES)
                fsync_dir(self.path.parent)
        self._sequence += 1
        slot = self._sequence % 2
        os.pwrite(self._fd, _encode_slot(self._sequence, offset), slot * _SLOT_BYTES)
        fdatasync(self._fd)
        self._offset = offset

    def begin_flush(self, target_offset: int) -> None:
        """A flush up to `target_offset` starts (owner thread)."""
        with self._lock:
            self._ceiling = target_offset

    def raise_to(self, offset: int) -> None:
        """After a flush's fsyncs: record `offset` (capped by any truncation since
        `begin_flush`). Any thread."""
        with self._lock:
            value = min(offset, self._ceiling)
            if value > self._offset:
                self._write(value)

    def lower_to(self, offset: int) -> None:
        """Before the log is cut at `offset` (owner thread)."""
        with self._lock:
            self._ceiling = min(self._ceiling, offset)
            if offset < self._offset:
                self._write(offset)

    def reset(self, offset: int) -> None:
        """The log was emptied and restarts at `offset` (owner thread)."""
        with self._lock:
            self._ceiling = offset
            if offset != self._offset:
                self._write(offset)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
