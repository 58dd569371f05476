"""`metakraft storage restore`'s plan: which snapshot and log objects a restore point
needs, from the manifests alone (the restore itself runs against real controller
processes in tests/analytics/test_tier.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.logformat.batch import iter_batches
from controller.quorum_controller.restore import (
    RestoreError,
    plan_restore,
    rebuild,
    seed_from_tier,
)
from controller.storage.snapshot_file import SnapshotId, SnapshotWriter
from controller.tier.chain import TierLedger, check_chain
from controller.tier.history import list_tier
from controller.tier.objects import segment_manifest, snapshot_manifest
from tests.support.tier_objects import PER_OBJECT, announce, batches, build, seg_id


def test_the_tiers_end_is_the_default_point(tmp_path: Path) -> None:
    tier = build(tmp_path)
    plan = plan_restore(tier.store)
    assert (plan.limit, plan.tier_end, plan.snapshot) == (4 * PER_OBJECT, 4 * PER_OBJECT, None)
    assert [(p.start, p.end) for p in plan.pieces] == [(0, 10), (10, 20), (20, 30), (30, 40)]
    assert plan.read_bytes == sum(m.size_bytes for m in tier.manifests)
    assert "the end of the tier" in plan.describe()[0]


def test_a_point_in_offsets_starts_from_the_newest_snapshot_below_it(tmp_path: Path) -> None:
    tier = build(tmp_path)
    for end in (10, 20, 30):
        tier.put(snapshot_manifest("cid", seg_id(100 + end), end, 1, b"s%d" % end, 0,
                                   hashed=True), b"s%d" % end)
    plan = plan_restore(tier.store, to_offset=25)
    assert plan.limit == 26 and plan.snapshot is not None and plan.snapshot.end_offset == 20
    assert [(p.start, p.end) for p in plan.pieces] == [(20, 26)]
    # Exactly at a snapshot's end: nothing to replay after it.
    plan = plan_restore(tier.store, to_offset=29)
    assert plan.snapshot is not None and plan.snapshot.end_offset == 30 and not plan.pieces


def test_a_point_in_time_ends_before_the_first_later_batch(tmp_path: Path) -> None:
    tier = build(tmp_path)
    appended = [(b.append_time_ms, b.base_offset) for m in tier.manifests
                for b in iter_batches(tier.store.get(m.data_key))]
    for to_time_ms in (appended[5][0], appended[5][0] + 1, 0, 10**12):
        later = [offset for time_ms, offset in appended if time_ms > to_time_ms]
        expected = later[0] if later else 4 * PER_OBJECT
        if expected == 0:
            with pytest.raises(RestoreError, match="holds nothing at or before"):
                plan_restore(tier.store, to_time_ms=to_time_ms)
            continue
        assert plan_restore(tier.store, to_time_ms=to_time_ms).limit == expected


def test_points_the_tier_cannot_restore_are_refused(tmp_path: Path) -> None:
    tier = build(tmp_path)
    with pytest.raises(RestoreError, match="beyond the tier, which holds offsets below 40"):
        plan_restore(tier.store, to_offset=40)
    with pytest.raises(RestoreError, match="not both"):
        plan_restore(tier.store, to_offset=3, to_time_ms=5)
    # Retention took the history's head and no snapshot covers it.
    oldest = tier.manifests[0]
    tier.store.delete(oldest.manifest_key)
    tier.store.delete(oldest.data_key)
    with pytest.raises(RestoreError, match=r"starts at offset 10 and no tiered snapshot"):
        plan_restore(tier.store, to_offset=25)
    empty = build(tmp_path / "empty", 0)
    with pytest.raises(RestoreError, match="holds no history"):
        plan_restore(empty.store)


def test_seeding_a_controller_needs_the_clusters_own_tier_with_a_snapshot(
        tmp_path: Path) -> None:
    tier = build(tmp_path)
    with pytest.raises(RestoreError, match="belongs to cluster cid, not other"):
        seed_from_tier(tier.store, str(tmp_path / "d"), "other")
    with pytest.raises(RestoreError, match="holds no snapshot yet"):
        seed_from_tier(tier.store, str(tmp_path / "d"), "cid")


def test_a_restore_refuses_a_tier_where_a_copy_it_does_not_read_was_replaced(
        tmp_path: Path) -> None:
    """A dead leader's copy of a range copied again is on no chain (nothing links to
    it) and below the snapshot a restore starts from: the snapshot's own record of
    its manifest SHA-256 is what catches it replaced."""
    tier = build(tmp_path)
    data = batches(10, 20, [])
    twin = segment_manifest("cid", seg_id(50), 10, data,
                            prev_manifest_sha256=tier.manifests[0].sha256())
    tier.put(twin, data)
    # The snapshot at offset 30: the state holds every object announced below it.
    with SnapshotWriter(tmp_path / "snap", SnapshotId(30, 1)) as writer:
        writer.append(r for m in (*tier.manifests[:3], twin) for r in announce(m))
        path = writer.freeze()
    image = path.read_bytes()
    tier.put(snapshot_manifest("cid", seg_id(60), 30, 1, image, 0, hashed=True), image)
    plan = plan_restore(tier.store, to_offset=29)
    assert plan.snapshot is not None and not plan.pieces  # the twin is not read
    assert len(rebuild(tier.store, plan).state.tier.objects()) == 4
    forged = batches(10, 20, [], filler=b"forged")
    tier.put(segment_manifest("cid", twin.segment_id, 10, forged,
                              prev_manifest_sha256=twin.prev_manifest_sha256), forged)
    listing = list_tier(tier.store)
    links = check_chain(listing.segments, listing.snapshots, TierLedger(), complete=False)
    assert links.ok  # no link breaks: only the log's record of the twin tells
    with pytest.raises(RestoreError, match=f"was changed: remote object {twin.manifest_key}"
                                           ".*not the one the log recorded"):
        rebuild(tier.store, plan_restore(tier.store, to_offset=29))
