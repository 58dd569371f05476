"""The whole history of a cluster's log: the remote tier and a local log directory,
read as one sequence of offsets.

`list_tier` reads the tier's manifests (refusing a tier of another cluster and
objects that are not the tier's, by name); `plan_history` picks, for every offset
from the oldest held to the end, one place to read it from: the tier objects first
(overlapping objects after a failover hold the same committed batches, so each
offset is taken once), then the local segments. A hole between them is an error
naming the missing range.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from controller.logformat.batch import RecordBatch, decode_batch, verify_batch
from controller.storage.errors import CorruptBatchError
from controller.storage.segment import parse_segment_file_name
from controller.tier.objects import (
    CLUSTER_MARKER,
    CorruptObjectError,
    Manifest,
    check_data,
    parse_key,
)
from controller.tier.remote import RemoteStorage, TierError

MAX_OFFSET = 2**63 - 1


class HistoryGapError(TierError):
    """Offsets that neither the tier nor the local log holds."""

    def __init__(self, start: int, end: int, where: str) -> None:
        self.start = start
        self.end = end
        super().__init__(f"offsets [{start}, {end}) are missing: {where}")


@attrs.frozen
class TierListing:
    url: str
    cluster_id: str | None
    # Complete objects (those with a manifest), by kind then offsets.
    segments: tuple[Manifest, ...]
    snapshots: tuple[Manifest, ...]
    # Data objects without a manifest: a copy in progress or abandoned.
    incomplete: tuple[str, ...]
    total_bytes: int


def read_cluster_id(store: RemoteStorage) -> str | None:
    """The cluster id the tier was first written for (None: a new, empty tier)."""
    from controller.tier.remote import ObjectNotFoundError

    try:
        data = store.get(CLUSTER_MARKER)
    except ObjectNotFoundError:
        return None
    try:
        cluster_id = json.loads(data)["cluster_id"]
    except (ValueError, KeyError, TypeError):
        raise TierError(f"{store.url}: {CLUSTER_MARKER} is unreadable") from None
    if not isinstance(cluster_id, str) or not cluster_id:
        raise TierError(f"{store.url}: {CLUSTER_MARKER} names no cluster id")
    return cluster_id


def claim_tier(store: RemoteStorage, cluster_id: str) -> None:
    """Mark a new tier as this cluster's, or check that it is; TierError if it is
    another cluster's."""
    found = read_cluster_id(store)
    if found is None:
        store.put(CLUSTER_MARKER, json.dumps({"cluster_id": cluster_id}).encode() + b"\n")
    elif found != cluster_id:
        raise TierError(f"{store.url} belongs to cluster {found}, not {cluster_id}: refusing "
                        "to use it (point this cluster at a tier of its own)")


def list_tier(store: RemoteStorage, cluster_id: str | None = None) -> TierListing:
    """Every complete object of the tier. TierError if the tier belongs to another
    cluster than `cluster_id`, or holds objects that are not a tier's (named)."""
    found = read_cluster_id(store)
    if cluster_id is not None and found is not None and found != cluster_id:
        raise TierError(f"{store.url} belongs to cluster {found}, not {cluster_id}")
    owner = found or cluster_id
    infos = store.list("")
    foreign = [i.key for i in infos if i.key != CLUSTER_MARKER and parse_key(i.key) is None]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5
                                          else "")
        raise TierError(f"{store.url} holds objects that are not a metakraft tier's: {shown}")
    manifests: list[Manifest] = []
    data_keys: set[str] = set()
    for info in infos:
        parsed = parse_key(info.key)
        if parsed is None:
            continue
        if not parsed[2]:
            data_keys.add(info.key)
            continue
        manifest = Manifest.decode(info.key, store.get(info.key))
        if owner is not None and manifest.cluster_id != owner:
            raise TierError(f"{store.url}: object {info.key} belongs to cluster "
                            f"{manifest.cluster_id}, not {owner}")
        manifests.append(manifest)
    described = {m.data_key for m in manifests}
    segments = sorted((m for m in manifests if m.kind == "segment"),
                      key=lambda m: (m.start_offset, -m.end_offset, m.segment_id))
    snapshots = sorted((m for m in manifests if m.kind == "snapshot"),
                       key=lambda m: (m.end_offset, m.segment_id))
    sizes = {i.key: i.size_bytes for i in infos}
    return TierListing(store.url, owner, tuple(segments), tuple(snapshots),
                       tuple(sorted(data_keys - described)),
                       sum(sizes.get(k, 0) for k in described)
                       + sum(sizes.get(m.manifest_key, 0) for m in manifests))


@attrs.frozen
class Piece:
    """Read offsets [start, end) of one place: a tier object or a local segment file."""

    source: str  # "tier" or "local"
    location: str  # the object's key, or the segment file's path
    start: int
    end: int
    manifest: Manifest | None = None


def local_segments(log_dir: str | Path) -> list[tuple[int, Path]]:
    """(base offset, path) of the segment files of a data directory (or its
    metadata/ directory), ascending."""
    root = Path(log_dir)
    seg_dir = root / "metadata" if (root / "metadata").is_dir() else root
    if not seg_dir.is_dir():
        raise FileNotFoundError(f"{log_dir}: no such log directory")
    return sorted((b, p) for p in seg_dir.iterdir()
                  if (b := parse_segment_file_name(p.name)) is not None)


def plan_history(segments: Sequence[Manifest], local: Sequence[tuple[int, Path]], *,
                 start: int = 0, end: int = MAX_OFFSET) -> list[Piece]:
    """One place to read each offset of [start, end) from (see the module docstring).

    The history starts at the oldest offset held (the tier's first object, else the
    local log's first segment): offsets below it were never tiered or were deleted
    by remote retention, which is not a gap. HistoryGapError for a hole after it.
    """
    pieces: list[Piece] = []
    cur: int | None = None
    for m in segments:
        if cur is None:
            cur = m.start_offset
        if m.end_offset <= cur:
            continue  # covered already (an overlapping copy of the same batches)
        if m.start_offset > cur:
            break  # a hole in the tier: the local log must cover it
        lo, hi = max(cur, start), min(m.end_offset, end)
        if lo < hi:
            pieces.append(Piece("tier", m.data_key, lo, hi, m))
        cur = m.end_offset
    if local:
        local_start = local[0][0]
        if cur is not None and local_start > cur and cur < end:
            tier_end = cur
            raise HistoryGapError(tier_end, local_start,
                                  f"the tier ends at {tier_end} and the local log starts at "
                                  f"{local_start}")
        cur = local_start if cur is None else max(cur, local_start)
        for i, (base, path) in enumerate(local):
            seg_end = local[i + 1][0] if i + 1 < len(local) else MAX_OFFSET
            lo, hi = max(base, cur, start), min(seg_end, end)
            if lo < hi:
                pieces.append(Piece("local", str(path), lo, hi))
    elif cur is not None:
        following = [m for m in segments if m.start_offset > cur]
        if following and cur < end:
            raise HistoryGapError(cur, following[0].start_offset,
                                  "no tier object holds them and no local log was given")
    return pieces


def read_piece(store: RemoteStorage | None, piece: Piece) -> bytes:
    """The bytes of a piece's object or file, checked against its manifest (tier)."""
    if piece.source == "local":
        return Path(piece.location).read_bytes()
    assert store is not None and piece.manifest is not None
    data = store.get(piece.location)
    check_data(piece.manifest, data)
    return data


def epoch_history(segments: Sequence[Manifest]) -> tuple[tuple[int, int], ...]:
    """The leader-epoch history of the tiered log: (epoch, the offset where its
    batches start), merged from the manifests' epoch slices (an epoch that spans
    objects starts where its first object has it; overlapping copies hold the same
    batches). What a controller's own checkpoint no longer holds below its snapshot.
    CorruptObjectError naming the first object whose epochs go back in time."""
    starts: dict[int, int] = {}
    prev: Manifest | None = None
    for m in segments:  # by start offset
        if not m.epochs:
            continue
        if (prev is not None and m.start_offset >= prev.end_offset
                and m.epochs[0][0] < prev.epochs[-1][0]):
            raise CorruptObjectError(m.manifest_key, f"its first epoch {m.epochs[0][0]} is "
                                     f"older than epoch {prev.epochs[-1][0]} of "
                                     f"{prev.manifest_key}, before it", m.start_offset)
        for epoch, start in m.epochs:
            starts[epoch] = min(start, starts.get(epoch, start))
        if prev is None or m.end_offset >= prev.end_offset:
            prev = m
    return tuple(sorted(starts.items()))


def first_offset_after(segments: Sequence[Manifest], time_ms: int) -> int | None:
    """The first offset whose batch was appended after `time_ms` (None: none held),
    from the manifests' time indexes alone: each lists every batch whose append time
    passes all earlier ones in its object, so the first entry past `time_ms` in the
    first object that has one is that batch (append times may step back across a
    failover; a batch that steps back is never the first past a time)."""
    for m in segments:
        for entry_ms, offset in m.time_index:
            if entry_ms > time_ms:
                return offset
    return None


def byte_range(manifest: Manifest, start: int, end: int = MAX_OFFSET,
               max_bytes: int | None = None) -> tuple[int, int, int]:
    """(position, length, first offset): the bytes of `manifest`'s object that hold
    the batches of offsets [start, end), through its offset index. The range runs from
    the last index entry at or below `start` to the first entry at or above `end`, or
    (with `max_bytes`) the first entry past about that many bytes, else to the
    object's end: batch boundaries both, so the range is whole batches."""
    position, first = 0, manifest.start_offset
    stop = manifest.size_bytes
    for offset, pos in manifest.offset_index:
        if offset <= start:
            position, first = pos, offset
        elif offset >= end or (max_bytes is not None and pos - position >= max_bytes):
            stop = pos
            break
    return position, stop - position, first


def read_tier_range(store: RemoteStorage, manifest: Manifest, start: int,
                    end: int = MAX_OFFSET, max_bytes: int | None = None) -> tuple[bytes, int]:
    """Only the bytes of a log object that hold [start, end) (`byte_range`), and the
    offset of their first batch. Read whole, the object is checked against its
    manifest (CRC-32C, SHA-256); read in part, each batch's CRC is checked as it is
    parsed (`iter_piece_batches`), and a short read is CorruptObjectError."""
    position, length, first = byte_range(manifest, start, end, max_bytes)
    key = manifest.data_key
    if position == 0 and length == manifest.size_bytes:
        data = store.get(key)
        check_data(manifest, data)
        return data, first
    data = store.get(key, position, length)
    if len(data) != length:
        raise CorruptObjectError(key, f"object ends at byte {position + len(data)}, the "
                                 f"manifest says {manifest.size_bytes} (short object)", first)
    return data, first


def read_piece_range(store: RemoteStorage | None, piece: Piece) -> tuple[bytes, int]:
    """The bytes a piece needs and the offset of their first batch: a local segment
    whole, a tier object only in the range the piece covers (`read_tier_range`)."""
    if piece.source == "local":
        first = parse_segment_file_name(Path(piece.location).name)
        assert first is not None, piece.location
        return Path(piece.location).read_bytes(), first
    assert store is not None and piece.manifest is not None
    return read_tier_range(store, piece.manifest, piece.start, piece.end)


def iter_piece_batches(data: bytes, piece: Piece, start_offset: int | None = None
                       ) -> Iterator[RecordBatch]:
    """The decoded batches of a piece's bytes that hold offsets of [piece.start,
    piece.end). CorruptObjectError (tier) or CorruptBatchError (local) at damage."""
    pos = 0
    expected = start_offset
    while pos < len(data):
        try:
            header = verify_batch(data, pos)
            if expected is not None and header.base_offset != expected:
                raise CorruptBatchError(f"offset discontinuity: batch starts at "
                                        f"{header.base_offset}, expected {expected}",
                                        expected, pos)
        except CorruptBatchError as exc:
            if piece.source == "tier":
                raise CorruptObjectError(piece.location, exc.reason, exc.offset) from None
            raise CorruptBatchError(exc.reason, exc.offset, pos) from None
        batch, size = decode_batch(data, pos, verified=header)
        pos += size
        expected = batch.next_offset
        if batch.next_offset <= piece.start:
            continue
        if batch.base_offset >= piece.end:
            return
        yield batch


def history_batches(store: RemoteStorage | None, pieces: Sequence[Piece]
                    ) -> Iterator[tuple[Piece, RecordBatch]]:
    """Every batch of the planned history, in offset order, with its piece (tier
    objects read only in the ranges the pieces cover)."""
    for piece in pieces:
        data, first = read_piece_range(store, piece)
        for batch in iter_piece_batches(data, piece, first):
            yield piece, batch
