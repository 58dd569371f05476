"""Where a watcher reads committed batches: the local log, else the remote tier.

Every read is by offset, so the hand-overs (tier -> local log -> the live tail,
which is the local log's recent batches) can neither skip nor repeat an offset: a
watcher asks for the batch holding its next offset wherever that is now. The local
log may be trimmed (or, on a standby, reset to a snapshot) between two reads; the
next read then goes to the tier.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from controller.logformat import RecordBatch
from controller.storage.errors import OffsetOutOfRangeError
from controller.tier.history import Piece, iter_piece_batches, list_tier, read_tier_range
from controller.tier.objects import Manifest
from controller.tier.remote import RemoteStorage, TierError

# How long a tier listing is reused before it is read again (objects appear as the
# copier uploads them; a reader past the listing's end always lists again).
TIER_LISTING_TTL_S = 10.0


class HistoryUnavailableError(Exception):
    """Neither this controller's log nor the tier holds an offset."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"offset {offset}: {reason}")
        self.offset = offset


class LocalLog(Protocol):
    """The controller's local log (`RaftDriver`)."""

    def local_start_offset(self) -> int: ...

    def read_committed_batches(self, from_offset: int, to_offset: int,
                               max_bytes: int) -> list[RecordBatch]: ...


class TierReader(Protocol):
    """The remote tier as a watcher reads it (`TierSource`)."""

    async def start_offset(self) -> int | None: ...

    async def read(self, from_offset: int) -> list[RecordBatch]: ...


class TierSource:
    """The tier's objects, read by byte range off the loop: from the manifest's
    offset index entry at or below the offset wanted, about `read_bytes` at a time
    (more when one batch is larger), so a watcher replaying the tier holds about
    that much, not a whole object. Each batch's CRC is checked as it is parsed."""

    def __init__(self, store: RemoteStorage, cluster_id: str,
                 clock_s: Callable[[], float] = time.monotonic,
                 read_bytes: int = 1 << 20) -> None:
        assert read_bytes > 0, read_bytes
        self._read_bytes = read_bytes
        self._store = store
        self._cluster_id = cluster_id
        self._clock_s = clock_s
        self._segments: tuple[Manifest, ...] = ()
        self._listed_s: float | None = None
        self.objects_read = 0

    async def _listing(self, need_offset: int | None = None) -> tuple[Manifest, ...]:
        stale = (self._listed_s is None
                 or self._clock_s() - self._listed_s > TIER_LISTING_TTL_S
                 or (need_offset is not None
                     and not any(m.start_offset <= need_offset < m.end_offset
                                 for m in self._segments)))
        if stale:
            listing = await asyncio.to_thread(list_tier, self._store, self._cluster_id)
            self._segments, self._listed_s = listing.segments, self._clock_s()
        return self._segments

    async def start_offset(self) -> int | None:
        """The tier's first offset (None: it holds no log object)."""
        segments = await self._listing()
        return segments[0].start_offset if segments else None

    async def read(self, from_offset: int) -> list[RecordBatch]:
        """Batches of the object holding `from_offset`, from the batch holding it (the
        object reaching furthest, when copies overlap); [] when none does.
        CorruptObjectError names the object when a batch is damaged."""
        holding = [m for m in await self._listing(from_offset)
                   if m.start_offset <= from_offset < m.end_offset]
        if not holding:
            return []
        manifest = max(holding, key=lambda m: m.end_offset)
        batches = await asyncio.to_thread(self._load, manifest, from_offset)
        self.objects_read += 1
        return batches

    def _load(self, manifest: Manifest, from_offset: int) -> list[RecordBatch]:
        """The whole batches in about `read_bytes` from the one holding `from_offset`
        (at least that one): one ranged read through the offset index."""
        data, first = read_tier_range(self._store, manifest, from_offset,
                                      max_bytes=self._read_bytes)
        piece = Piece("tier", manifest.data_key, from_offset, manifest.end_offset, manifest)
        return list(iter_piece_batches(data, piece, first))


class HistoryReader:
    def __init__(self, local: LocalLog, tier: TierReader | None,
                 read_max_bytes: int = 256 * 1024) -> None:
        self._local = local
        self._tier = tier
        self._read_max_bytes = read_max_bytes

    async def oldest_offset(self) -> int:
        """The oldest offset a watch can start at."""
        local = self._local.local_start_offset()
        if self._tier is None:
            return local
        try:
            tiered = await self._tier.start_offset()
        except TierError as exc:
            raise HistoryUnavailableError(local, f"the tier cannot be listed: {exc}") from None
        return local if tiered is None else min(local, tiered)

    async def read(self, offset: int, end: int) -> list[RecordBatch]:
        """Committed batches from the one holding `offset`, all starting below `end`
        (`offset` < `end` <= the committed end). HistoryUnavailableError when no one
        here holds `offset`."""
        assert 0 <= offset < end, (offset, end)
        if offset >= self._local.local_start_offset():
            try:
                batches = self._local.read_committed_batches(offset, end,
                                                             self._read_max_bytes)
            except (OffsetOutOfRangeError, ValueError):
                batches = []  # trimmed (or reset to a snapshot) since: try the tier
            if batches:
                return batches
        if self._tier is not None:
            try:
                tiered = await self._tier.read(offset)
            except TierError as exc:  # unreachable, or a damaged object (named)
                raise HistoryUnavailableError(offset, f"the tier: {exc}") from None
            batches = [b for b in tiered if b.base_offset < end]
            if batches:
                return batches
            where = "this controller's log starts above it and no tier object holds it"
        else:
            where = "this controller's log starts above it and no tier is configured"
        raise HistoryUnavailableError(offset, where)
