"""Point-in-time restore from the remote tier (`metakraft storage restore`).

When every controller's disk is lost, the tier still holds the history. A restore
rebuilds the metadata state at a point (an offset, an append time, or the tier's
end) from the newest tiered snapshot at or below it and the tiered batches after
it, each object checked against its manifest (CRC-32C, SHA-256) and every batch's
CRC as it is read, and writes it as the one snapshot of a freshly formatted data
directory:

- whole batches only: a batch is one atomic write, so the point is rounded down to
  the end of the last batch at or below it;
- the restored cluster is a new cluster: a new cluster id (the same for every
  controller restored, `--cluster-id`), its own voters (`--initial-controllers`, or
  the configured ones), no tier objects (its tier must be another one: the old
  tier's `cluster.json` names the old id), Raft epochs from 0 again (the snapshot
  is at epoch 0), and its log offsets continuing at the restored end offset;
- the cluster config `restored.from.cluster.id` / `restored.from.offset` links it
  to the history it came from (read-only).

Deterministic: restoring each controller of the new cluster from the same tier,
point and cluster id gives the same snapshot bytes, so they start as equals.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs

from controller.logformat import SnapshotId
from controller.metadata import MetadataState
from controller.metadata.config_schema import (
    RESTORED_FROM_CLUSTER_ID,
    RESTORED_FROM_OFFSET,
    ResourceType,
)
from controller.metadata.errors import MetadataReplayError
from controller.quorum_controller.snapshots import iter_image_chunks
from controller.raft.control import encode_voters
from controller.raft.voters import VoterSet
from controller.records import ConfigRecord, MetadataRecord, decode_record, make_record
from controller.storage.errors import StorageError
from controller.storage.fsutil import atomic_write_bytes
from controller.storage.meta_properties import DataDir, format_data_dir
from controller.storage.snapshot_file import SnapshotReader, SnapshotWriter
from controller.tier.chain import ChainReport, TierLedger, check_chain
from controller.tier.history import (
    Piece,
    TierListing,
    first_offset_after,
    iter_piece_batches,
    list_tier,
    plan_history,
    read_piece_range,
)
from controller.tier.objects import Manifest, check_data
from controller.tier.remote import RemoteStorage, TierError

# Records per chunk handed to the snapshot writer (a topic's partitions stay whole).
_CHUNK_RECORDS = 10_000


class RestoreError(Exception):
    """The restore cannot be done as asked (said in words; nothing was written)."""


@attrs.frozen
class RestorePlan:
    """What a restore reads: a snapshot (or none: from offset 0) and the log objects
    after it, up to `limit` (offsets below it; rounded down to a batch end)."""

    old_cluster_id: str
    point: str  # what was asked, in words
    limit: int
    tier_end: int
    snapshot: Manifest | None
    pieces: tuple[Piece, ...]
    # Every object of the tier: the hash chain is checked over all of them.
    listing: TierListing

    @property
    def read_bytes(self) -> int:
        snapshot = self.snapshot.size_bytes if self.snapshot is not None else 0
        return snapshot + sum(p.manifest.size_bytes for p in self.pieces
                              if p.manifest is not None)

    def describe(self) -> list[str]:
        snap = (f"snapshot {self.snapshot.data_key} (offsets below {self.snapshot.end_offset})"
                if self.snapshot is not None else "no snapshot (replays from offset 0)")
        replay = (f"then {len(self.pieces)} log object(s), offsets [{self.pieces[0].start}, "
                  f"{self.pieces[-1].end})" if self.pieces else "then no log object")
        return [f"restore point: {self.point} (the tier holds offsets below {self.tier_end})",
                f"from cluster {self.old_cluster_id}: {snap}, {replay}; "
                f"{self.read_bytes} bytes to read"]


@attrs.frozen
class Restored:
    state: MetadataState
    end_offset: int  # the state holds offsets below it
    last_time_ms: int  # append time of the last batch restored
    batches: int
    records: int


def plan_restore(store: RemoteStorage, *, to_offset: int | None = None,
                 to_time_ms: int | None = None) -> RestorePlan:
    if to_offset is not None and to_time_ms is not None:
        raise RestoreError("give a point in offsets or in time, not both")
    try:
        listing = list_tier(store)
    except TierError as exc:
        raise RestoreError(str(exc)) from None
    if listing.cluster_id is None or not (listing.segments or listing.snapshots):
        raise RestoreError(f"{store.url} holds no history (no cluster.json or no objects)")
    whole = plan_history(listing.segments, [])
    # A snapshot may reach past the log objects (copied before the segment it ends in).
    ends = [m.end_offset for m in listing.snapshots] + ([whole[-1].end] if whole else [])
    tier_end = max(ends, default=0)
    if to_offset is not None:
        if to_offset >= tier_end:
            raise RestoreError(f"offset {to_offset} is beyond the tier, which holds offsets "
                               f"below {tier_end}")
        limit, point = to_offset + 1, f"offset {to_offset}"
    elif to_time_ms is not None:
        after = first_offset_after(listing.segments, to_time_ms)
        limit, point = (tier_end if after is None else after), f"time {to_time_ms} ms"
    else:
        limit, point = tier_end, "the end of the tier"
    usable = [m for m in listing.snapshots if m.end_offset <= limit]
    snapshot = max(usable, key=lambda m: (m.end_offset, m.segment_id), default=None)
    start = snapshot.end_offset if snapshot is not None else 0
    pieces = plan_history(listing.segments, [], start=start, end=limit)
    held_from = pieces[0].start if pieces else (whole[0].start if whole else tier_end)
    if start < limit and held_from > start:
        raise RestoreError(f"the tier's history starts at offset {held_from} and no tiered "
                           f"snapshot at or below {point} covers [{start}, {held_from})")
    if limit <= 0 or (snapshot is None and not pieces):
        raise RestoreError(f"the tier holds nothing at or before {point}")
    return RestorePlan(listing.cluster_id, point, limit, tier_end, snapshot, tuple(pieces),
                       listing)


def tier_snapshot_records(store: RemoteStorage, manifest: Manifest) -> Iterator[bytes]:
    """The encoded records of a tier snapshot object, checked against its manifest
    and read as the file it is a copy of (a temporary one, named as the original:
    the whole file's CRCs and footer are verified before the first record)."""
    data = store.get(manifest.data_key)
    check_data(manifest, data)
    with tempfile.TemporaryDirectory(prefix="metakraft-snapshot-") as tmp:
        path = Path(tmp) / SnapshotId(manifest.end_offset, manifest.last_epoch).file_name
        path.write_bytes(data)
        yield from SnapshotReader.open(path).records()


def rebuild(store: RemoteStorage, plan: RestorePlan) -> Restored:
    """The state at the plan's point: RestoreError naming the object if one is
    damaged, replaced (its SHA-256), or breaks the hash chain."""
    # The links first (manifests only): a forged object is named before its batches
    # are replayed (they might not even replay).
    _refuse_changed(check_chain(plan.listing.segments, plan.listing.snapshots, TierLedger(),
                                complete=False))
    state = MetadataState(cluster_id=plan.old_cluster_id, rng=random.Random(0))
    ledger = TierLedger()
    offset = -1  # the last offset replayed
    last_time_ms = batches = records = 0
    try:
        if plan.snapshot is not None:
            offset = plan.snapshot.end_offset - 1
            state.replay_encoded(tier_snapshot_records(store, plan.snapshot), offset, step=0)
            last_time_ms = plan.snapshot.end_time_ms
            # The objects announced before the snapshot, with the manifest SHA-256 the
            # log recorded for each: a copy nothing chains to (a dead leader's, of a
            # range copied again) is checked too, though the restore reads none.
            for record in state.tier.snapshot_records():
                ledger.add(offset, record)
        for piece in plan.pieces:
            assert piece.manifest is not None
            data, first = read_piece_range(store, piece)
            for batch in iter_piece_batches(data, piece, first):
                if batch.next_offset > plan.limit:
                    break  # the point is inside this batch: not half of it
                ledger.add_batch(batch)
                if batch.next_offset <= offset + 1:
                    continue
                start = offset + 1  # a snapshot may end inside a batch
                state.replay_encoded(batch.records[start - batch.base_offset:], start)
                records += batch.next_offset - start
                offset = batch.last_offset
                last_time_ms, batches = batch.append_time_ms, batches + 1
    except (TierError, StorageError) as exc:  # CorruptObjectError names the object
        raise RestoreError(f"the tier is damaged: {exc}") from None
    except MetadataReplayError as exc:
        raise RestoreError(f"the tier's history does not replay at offset {offset + 1}: "
                           f"{exc}") from None
    # The links between every object, and each object the records read announce: a
    # tier changed anywhere is not restored from, even below the snapshot used.
    _refuse_changed(check_chain(plan.listing.segments, plan.listing.snapshots, ledger,
                                complete=False))
    return Restored(state, offset + 1, last_time_ms, batches, records)


def _refuse_changed(chain: ChainReport) -> None:
    if not chain.ok:
        raise RestoreError(f"the tier's history was changed: {chain.findings[0]}")


def write_data_dir(restored: Restored, *, data_dir: str, node_id: int, cluster_id: str,
                   old_cluster_id: str, voters: VoterSet | None) -> SnapshotId:
    """Format `data_dir` (empty) as `node_id` of the new cluster and write the restored
    state as its snapshot; the log is empty and continues at the snapshot's end."""
    directory_id = None
    if voters is not None:
        me = voters.get(node_id)
        if me is None:
            raise RestoreError(f"node {node_id} is not among the initial controllers "
                               f"{voters.describe()}")
        directory_id = me.directory_id
    state, end = restored.state, restored.end_offset
    format_data_dir(data_dir, cluster_id, node_id, directory_id=directory_id,
                    kraft_version=1 if voters is not None else 0)
    for name, value in ((RESTORED_FROM_CLUSTER_ID, old_cluster_id),
                        (RESTORED_FROM_OFFSET, str(end))):
        state.replay(make_record(ConfigRecord(resource_type=ResourceType.CLUSTER.value,
                                              resource_name="", name=name, value=value)),
                     end - 1)
    state.registry.create_snapshot(end - 1)
    head: list[MetadataRecord] = ([decode_record(encode_voters(voters))]
                                  if voters is not None else [])
    # Epoch 0: the new cluster's Raft epochs start over, above it.
    snapshot_id = SnapshotId(end, 0)
    writer = SnapshotWriter(DataDir(Path(data_dir)).snapshot_dir, snapshot_id,
                            restored.last_time_ms)
    try:
        for chunk in iter_image_chunks(state, end - 1, _CHUNK_RECORDS, voters=head,
                                       with_tier=False):
            writer.append(chunk)
        writer.freeze()
    except BaseException:
        writer.abort()
        raise
    return snapshot_id


def seed_from_tier(store: RemoteStorage, data_dir: str, cluster_id: str) -> SnapshotId:
    """Put the tier's newest snapshot (checked: CRC-32C, SHA-256, the hash chain's
    links, the file's own CRCs and footer) into a freshly formatted controller of
    the same cluster, so it starts from it and fetches only the log after it from
    the leader, instead of the whole image by FetchSnapshot. It is the file the
    active controller wrote, byte for byte, under its own name (end offset, epoch)."""
    try:
        listing = list_tier(store, cluster_id)
    except TierError as exc:
        raise RestoreError(str(exc)) from None
    if not listing.snapshots:
        raise RestoreError(f"{store.url} holds no snapshot yet")
    _refuse_changed(check_chain(listing.segments, listing.snapshots, TierLedger(),
                                complete=False))
    newest = max(listing.snapshots, key=lambda m: (m.end_offset, m.segment_id))
    snapshot_id = SnapshotId(newest.end_offset, newest.last_epoch)
    path = DataDir(Path(data_dir)).snapshot_dir / snapshot_id.file_name
    try:
        data = store.get(newest.data_key)
        check_data(newest, data)
        atomic_write_bytes(path, data)
        SnapshotReader.open(path)  # the whole file, as the controller will load it
    except (TierError, StorageError) as exc:
        path.unlink(missing_ok=True)
        raise RestoreError(f"cannot use {newest.data_key}: {exc}") from None
    return snapshot_id
