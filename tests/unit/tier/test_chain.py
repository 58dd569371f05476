"""The tier's hash chain (metadata.version 9): manifests hash their data and the
previous log object's manifest, the log records each manifest's SHA-256, and
`check_chain` finds every kind of tampering the chain is meant to catch: an object
replaced by other batches with valid CRCs, a manifest swapped, an object deleted,
a snapshot replaced; and it says what it cannot vouch for without a controller's log.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import attrs
import pytest

from controller.logformat.batch import EMPTY_ORIGIN, RecordBatch
from controller.metadata.tier import SegmentState
from controller.tier.chain import TierLedger, check_chain
from controller.tier.history import list_tier
from controller.tier.objects import (
    CorruptObjectError,
    Manifest,
    check_data,
    segment_manifest,
    snapshot_manifest,
)
from tests.support.tier_objects import PER_OBJECT, announce, batches, build, seg_id

# -------------------------------------------------------------------- manifests


def test_a_hashed_manifest_round_trips_and_hashes_its_canonical_bytes() -> None:
    data = batches(0, 10, [])
    m = segment_manifest("cid", seg_id(1), 0, data, prev_manifest_sha256="ab" * 32)
    assert m.hashed and m.data_sha256 == hashlib.sha256(data).hexdigest()
    again = Manifest.decode(m.manifest_key, m.encode())
    assert again == m and again.encode() == m.encode() and again.sha256() == m.sha256()
    assert json.loads(json.loads(m.encode())["manifest"])["format_version"] == 2
    # Format 1 (below level 9) round-trips to the same bytes too.
    old = segment_manifest("cid", seg_id(2), 0, data)
    assert not old.hashed
    assert json.loads(json.loads(old.encode())["manifest"])["format_version"] == 1
    assert Manifest.decode(old.manifest_key, old.encode()).encode() == old.encode()
    assert m.sha256() != attrs.evolve(m, prev_manifest_sha256="cd" * 32).sha256()


def test_a_format_2_manifest_without_its_data_hash_is_refused() -> None:
    m = segment_manifest("cid", seg_id(1), 0, batches(0, 10, []), prev_manifest_sha256="")
    body = json.loads(json.loads(m.encode())["manifest"])
    body["data_sha256"] = ""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    import crc32c

    forged = json.dumps({"crc32c": crc32c.crc32c(text.encode()), "manifest": text}).encode()
    with pytest.raises(CorruptObjectError, match="without its data SHA-256"):
        Manifest.decode(m.manifest_key, forged)


def test_other_batches_with_valid_crcs_fail_the_data_hash() -> None:
    data = batches(0, 10, [])
    m = segment_manifest("cid", seg_id(1), 0, data, prev_manifest_sha256="")
    other = batches(0, 10, [b"forged"])
    # A forger who also fixes the CRC-32C and size in the manifest: the SHA-256 is left.
    import crc32c

    forged = attrs.evolve(m, size_bytes=len(other), data_crc32c=crc32c.crc32c(other))
    with pytest.raises(CorruptObjectError, match="SHA-256 does not match"):
        check_data(forged, other)
    check_data(m, data)


# ------------------------------------------------------------------------- chain


def test_an_untouched_chain_checks_out_with_and_without_the_local_log(tmp_path: Path) -> None:
    tier = build(tmp_path)
    assert tier.check() == []
    listing = list_tier(tier.store)
    full = check_chain(listing.segments, (), tier.ledger(with_local=True), complete=True)
    assert (full.hashed, full.unhashed, full.recorded, full.unanchored) == (4, 0, 4, ())
    alone = check_chain(listing.segments, (), tier.ledger(with_local=False), complete=False)
    # The newest object's record is in the local log only: not vouched for, not a fault.
    assert alone.ok and alone.recorded == 3
    assert alone.unanchored == (tier.manifests[-1].manifest_key,)
    assert "give --log-dir" in alone.summary()


def test_an_object_replaced_with_valid_crcs_and_a_matching_manifest_is_caught(
        tmp_path: Path) -> None:
    tier = build(tmp_path)
    victim = tier.manifests[1]
    # Other batches (the same offsets, the announcement of object 0 kept), and a
    # manifest made for them with a valid CRC, SHA-256 and even the right link back.
    data = batches(victim.start_offset, victim.end_offset, announce(tier.manifests[0]),
                   filler=b"forged")
    forged = segment_manifest("cid", victim.segment_id, victim.start_offset, data,
                              prev_manifest_sha256=victim.prev_manifest_sha256)
    assert forged.sha256() != victim.sha256()
    tier.put(forged, data)
    for with_local in (True, False):
        found = tier.check(with_local=with_local)
        # Named by the log's record of it (in object 2), then by the broken link.
        assert found[0].startswith(f"remote object {victim.manifest_key} at offset 10: its "
                                   "manifest is not the one the log recorded"), found
        assert any("hash chain breaks here" in f and tier.manifests[2].manifest_key in f
                   for f in found), found


def test_the_newest_object_replaced_needs_the_local_log_to_be_caught(tmp_path: Path) -> None:
    tier = build(tmp_path)
    newest = tier.manifests[-1]
    data = batches(newest.start_offset, newest.end_offset, announce(tier.manifests[-2]),
                   filler=b"forged")
    tier.put(segment_manifest("cid", newest.segment_id, newest.start_offset, data,
                              prev_manifest_sha256=newest.prev_manifest_sha256), data)
    assert tier.check(with_local=False) == []  # nothing in the tier vouches for it
    assert "not the one the log recorded" in tier.check(with_local=True)[0]


def test_a_swapped_manifest_is_caught(tmp_path: Path) -> None:
    tier = build(tmp_path)
    # Object 2's manifest replaced by one that chains to nothing it follows.
    m = tier.manifests[2]
    data = tier.store.get(m.data_key)
    tier.store.put(m.manifest_key, attrs.evolve(m, prev_manifest_sha256="0" * 64).encode())
    found = tier.check()
    assert any(m.manifest_key in f and "hash chain breaks here" in f for f in found), found
    assert any(m.manifest_key in f and "not the one the log recorded" in f for f in found)
    # And one of the old format (no SHA-256 fields) where the chain runs.
    tier.store.put(m.manifest_key, segment_manifest("cid", m.segment_id, m.start_offset,
                                                    data).encode())
    found = tier.check(with_local=False)
    assert m.manifest_key in found[0] and "was replaced" in found[0], found
    assert any(tier.manifests[3].manifest_key in f and "hash chain breaks here" in f
               for f in found), found


def test_a_deleted_object_is_caught(tmp_path: Path) -> None:
    tier = build(tmp_path)
    gone = tier.manifests[1]
    tier.store.delete(gone.manifest_key)
    tier.store.delete(gone.data_key)
    listing = list_tier(tier.store)
    report = check_chain(listing.segments, (), TierLedger(), complete=False)
    assert [f.reason for f in report.findings] == [
        "the object it chains to (ending at this offset) is missing (deleted)"]
    assert report.findings[0].key == tier.manifests[2].manifest_key
    # The newest one deleted: only the log's record (local) says it should be there.
    tier = build(tmp_path / "b")
    newest = tier.manifests[-1]
    tier.store.delete(newest.manifest_key)
    ledger = tier.ledger(with_local=False)
    ledger.add_batches(tier.local)
    listing = list_tier(tier.store)
    report = check_chain(listing.segments, (), ledger, complete=True)
    assert any(f.key.endswith(f"{newest.segment_id} [30, 40)")
               and "missing: the log recorded its copy" in f.reason for f in report.findings)


def test_objects_expired_by_retention_are_not_a_break(tmp_path: Path) -> None:
    tier = build(tmp_path)
    # Retention deletes the oldest object (the log records it: DELETE_FINISHED).
    oldest = tier.manifests[0]
    tier.store.delete(oldest.manifest_key)
    tier.store.delete(oldest.data_key)
    end = 4 * PER_OBJECT
    tier.local.append(RecordBatch(end + 2, 1, 2000, False, EMPTY_ORIGIN, tuple(
        announce(oldest, SegmentState.DELETE_FINISHED)[2:])))
    assert tier.check() == []


def test_a_replaced_snapshot_is_caught_by_its_record(tmp_path: Path) -> None:
    tier = build(tmp_path)
    snap = snapshot_manifest("cid", seg_id(9), 20, 1, b"snapshot bytes", 5000, hashed=True)
    tier.put(snap, b"snapshot bytes")
    tier.local.append(RecordBatch(4 * PER_OBJECT + 2, 1, 2000, False, EMPTY_ORIGIN,
                                  tuple(announce(snap))))
    assert tier.check() == []
    other = snapshot_manifest("cid", seg_id(9), 20, 1, b"other snapshot", 5000, hashed=True)
    tier.put(other, b"other snapshot")
    found = tier.check()
    assert found and snap.manifest_key in found[0] and "was replaced" in found[0]


def test_an_object_nobody_announced_is_caught_with_the_local_log(tmp_path: Path) -> None:
    tier = build(tmp_path)
    # A second copy of an old range, put by someone else (valid link, valid CRCs).
    stray = segment_manifest("cid", seg_id(7), 10, batches(10, 20, announce(tier.manifests[0])),
                             prev_manifest_sha256=tier.manifests[0].sha256())
    tier.put(stray, batches(10, 20, announce(tier.manifests[0])))
    assert tier.check() == [f"remote object {stray.manifest_key} at offset 10: no record of "
                            "the log announces it: no controller of this cluster put it there"]


def test_an_object_newer_than_the_log_read_is_not_vouched_for(tmp_path: Path) -> None:
    """Its record may lie past the end of the log read (a controller behind the
    others): reported as not vouched for, not as a fault."""
    tier = build(tmp_path)
    newer = segment_manifest("cid", seg_id(8), 40, batches(40, 50, []),
                             prev_manifest_sha256=tier.manifests[-1].sha256())
    tier.put(newer, batches(40, 50, []))
    listing = list_tier(tier.store)
    report = check_chain(listing.segments, (), tier.ledger(with_local=True), complete=True)
    assert report.ok and report.unanchored == (newer.manifest_key,)


def test_the_chain_starts_where_level_9_began(tmp_path: Path) -> None:
    tier = build(tmp_path, 5, hashed_from=2)
    listing = list_tier(tier.store)
    report = check_chain(listing.segments, (), tier.ledger(with_local=True), complete=True)
    assert report.ok and (report.hashed, report.unhashed, report.recorded) == (3, 2, 3)
    assert "2 copied before metadata.version 9" in report.summary()
