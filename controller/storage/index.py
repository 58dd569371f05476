"""Sparse offset index of one segment: offset -> byte position, one entry every N bytes.

The index file (`<base_offset:020d>.index`) is a cache of what a scan of the
segment would find. It is never fsynced and never trusted blindly: on open the
log scans the segment anyway (to check CRCs), rebuilds the entries in memory and
rewrites the file if it differs. Entries are pairs of big-endian uint32
(offset relative to the segment's base offset, byte position in the segment).
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from pathlib import Path

_ENTRY = struct.Struct(">II")
ENTRY_BYTES = _ENTRY.size


class OffsetIndex:
    """In-memory entries plus their file; `lookup` answers from memory."""

    def __init__(self, path: Path, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._offsets: list[int] = []
        self._positions: list[int] = []
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def __len__(self) -> int:
        return len(self._offsets)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))

    def lookup(self, offset: int) -> tuple[int, int]:
        """(base offset, byte position) of the last indexed batch starting at or before
        `offset`; (segment base offset, 0) if there is none."""
        i = bisect_right(self._offsets, offset)
        return (self._offsets[i - 1], self._positions[i - 1]) if i else (self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        assert not self._offsets or (offset > self._offsets[-1]
                                     and position > self._positions[-1]), "index must grow"
        self._offsets.append(offset)
        self._positions.append(position)
        # Explicit positions: the fd's own file position is never relied on.
        os.pwrite(self._fd, _ENTRY.pack(offset - self.base_offset, position),
                  (len(self._offsets) - 1) * ENTRY_BYTES)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches at or after byte `position` (the segment was cut there)."""
        keep = bisect_right(self._positions, position - 1)
        del self._offsets[keep:]
        del self._positions[keep:]
        os.ftruncate(self._fd, keep * ENTRY_BYTES)

    def replace(self, entries: list[tuple[int, int]]) -> bool:
        """Install entries found by a scan; rewrite the file only if it differs. True if rewritten."""
        self._offsets = [o for o, _ in entries]
        self._positions = [p for _, p in entries]
        wanted = b"".join(_ENTRY.pack(o - self.base_offset, p) for o, p in entries)
        size = os.fstat(self._fd).st_size
        if size == len(wanted) and os.pread(self._fd, size, 0) == wanted:
            return False
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, wanted, 0)
        return True

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
