"""Leader-epoch history (epoch -> start offset) and its checkpoint file.

The semantics follow Kafka's leader epoch cache, which Raft divergence checks
need: `end_offset_for_epoch(e)` answers "(the largest epoch <= e that this log
knows, the offset where it ended)". The end of an epoch is the start offset of
the next known epoch, or the log end offset for the latest epoch.

File format (`leader-epoch-checkpoint`), text so an operator can read it::

    1              <- format version
    3              <- number of entries
    0 0            <- epoch start_offset, ascending in both
    2 57
    5 1200
    crc32c 1a2b3c4d  <- CRC-32C of every line above (hex), so a damaged file is detected
"""

from __future__ import annotations

import os
from bisect import bisect_right
from itertools import pairwise
from pathlib import Path

import crc32c

from controller.storage.errors import CheckpointCorruptionError
from controller.storage.fsutil import atomic_write_bytes

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
CHECKPOINT_VERSION = 1


def end_offset_for_epoch(entries: list[tuple[int, int]], epoch: int,
                         log_end_offset: int) -> tuple[int, int]:
    """(largest known epoch <= `epoch`, its end offset), Kafka's semantics.

    - `epoch` is the latest known epoch: (epoch, log_end_offset).
    - `epoch` is newer than every known epoch, or the history is empty:
      (UNDEFINED_EPOCH, UNDEFINED_OFFSET).
    - `epoch` is older than the first known epoch: (epoch, start of the first
      known epoch) -- the requester diverges at least from there.
    - otherwise: (floor epoch, start offset of the next known epoch).
    """
    if epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    epochs = [e for e, _ in entries]
    if epoch == epochs[-1]:
        return epoch, log_end_offset
    higher = bisect_right(epochs, epoch)
    if higher == len(epochs):
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if higher == 0:
        return epoch, entries[0][1]
    return epochs[higher - 1], entries[higher][1]


class EpochHistory:
    """Sorted (epoch, start_offset) entries, both strictly increasing."""

    def __init__(self, entries: list[tuple[int, int]] | None = None):
        self._entries: list[tuple[int, int]] = []
        for epoch, start_offset in entries or []:
            self.assign(epoch, start_offset)

    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def epoch_start_offset(self, epoch: int) -> int | None:
        for e, start in self._entries:
            if e == epoch:
                return start
        return None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the history changed.

        Re-assigning the latest epoch or an older one is ignored (the first batch
        of an epoch fixes its start). A start offset below the latest entry's is a
        caller bug: the log truncates the history before rewriting it.
        """
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            if epoch <= last_epoch:
                return False
            if start_offset < last_start:
                raise ValueError(f"epoch {epoch} starts at {start_offset}, before epoch "
                                 f"{last_epoch} at {last_start}")
            if start_offset == last_start:
                # The previous epoch wrote nothing; it never existed in this log.
                self._entries.pop()
        self._entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after `end_offset` (the log was truncated there)."""
        while self._entries and self._entries[-1][1] >= end_offset:
            self._entries.pop()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget history below `start_offset`; the epoch spanning it now starts there."""
        starts = [s for _, s in self._entries]
        i = bisect_right(starts, start_offset)
        if i == 0:
            return
        epoch = self._entries[i - 1][0]
        self._entries = [(epoch, start_offset), *self._entries[i:]]

    def clear(self) -> None:
        self._entries.clear()

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        return end_offset_for_epoch(self._entries, epoch, log_end_offset)


def _encode(entries: list[tuple[int, int]]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{epoch} {start}" for epoch, start in entries]
    body = ("\n".join(lines) + "\n").encode("ascii")
    return body + f"crc32c {crc32c.crc32c(body):08x}\n".encode("ascii")


def _decode(path: Path, data: bytes) -> list[tuple[int, int]]:
    def bad(reason: str) -> CheckpointCorruptionError:
        return CheckpointCorruptionError(
            f"{path}: {reason}; the file is damaged. It can be rebuilt from the log: "
            "move it away and restart")

    body, sep, trailer = data.rstrip(b"\n").rpartition(b"\n")
    if not sep or not trailer.startswith(b"crc32c "):
        raise bad("missing CRC line")
    body += b"\n"
    try:
        stored_crc = int(trailer[7:], 16)
    except ValueError:
        raise bad("unreadable CRC line") from None
    if crc32c.crc32c(body) != stored_crc:
        raise bad("CRC-32C mismatch")
    try:
        lines = body.decode("ascii").splitlines()
        if lines[0] != str(CHECKPOINT_VERSION):
            raise bad(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        entries = []
        for line in lines[2:]:
            epoch_text, start_text = line.split()
            entries.append((int(epoch_text), int(start_text)))
    except (UnicodeDecodeError, ValueError, IndexError) as exc:
        raise bad(f"unparsable ({exc})") from None
    if count != len(entries):
        raise bad(f"says {count} entries, has {len(entries)}")
    for (e1, s1), (e2, s2) in pairwise(entries):
        if not (e2 > e1 >= 0 and s2 > s1 >= 0):
            raise bad("entries are not increasing")
    return entries


class LeaderEpochCheckpoint:
    """The persisted epoch history: an `EpochHistory` plus atomic rewrites of its file.

    Mutations change memory only; `flush()` writes the file (atomically) if it
    changed. Call it before answering a divergence request from the history.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.history = EpochHistory(self._load())
        self._dirty = False

    def _load(self) -> list[tuple[int, int]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        return _decode(self.path, data)

    def entries(self) -> list[tuple[int, int]]:
        return self.history.entries()

    @property
    def latest_epoch(self) -> int:
        return self.history.latest_epoch

    def assign(self, epoch: int, start_offset: int) -> None:
        self._dirty |= self.history.assign(epoch, start_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        before = self.history.entries()
        self.history.truncate_from_end(end_offset)
        self._dirty |= before != self.history.entries()

    def truncate_from_start(self, start_offset: int) -> None:
        before = self.history.entries()
        self.history.truncate_from_start(start_offset)
        self._dirty |= before != self.history.entries()

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Take the history the log rebuilt from its batches (the log is the source of truth)."""
        if entries != self.history.entries():
            self.history = EpochHistory(entries)
            self._dirty = True

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        return self.history.end_offset_for_epoch(epoch, log_end_offset)

    def flush(self) -> None:
        if self._dirty or not self.path.exists():
            atomic_write_bytes(self.path, _encode(self.history.entries()))
            self._dirty = False
