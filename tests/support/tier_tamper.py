"""Tampering with a directory tier as someone with write access to the bucket would:
each function changes a copy of the tier so that every CRC-32C still checks out, and
returns the key of the object a tamper check must name."""

from __future__ import annotations

import hashlib
from pathlib import Path

import attrs

from controller.logformat.batch import decode_batch, encode_batch
from controller.records import NoOpRecord, encode_record, make_record
from controller.tier.history import list_tier
from controller.tier.objects import Manifest, segment_manifest, snapshot_manifest
from controller.tier.remote import open_store


def _listing(tier_dir: Path) -> tuple[list[Manifest], list[Manifest]]:
    listing = list_tier(open_store(tier_dir.as_uri()))
    return list(listing.segments), list(listing.snapshots)


def _put(tier_dir: Path, manifest: Manifest, data: bytes | None) -> None:
    if data is not None:
        (tier_dir / manifest.data_key).write_bytes(data)
    (tier_dir / manifest.manifest_key).write_bytes(manifest.encode())


def middle_segment(tier_dir: Path) -> Manifest:
    segments, _ = _listing(tier_dir)
    hashed = [m for m in segments if m.hashed]
    assert len(hashed) >= 3, "a chain of at least three log objects"
    return hashed[len(hashed) // 2]


def replace_object(tier_dir: Path) -> str:
    """A log object in the middle rewritten: its first batch of metadata records other
    than no-ops (a topic's creation, an ISR change, ...) gets no-ops instead, every batch re-encoded
    with valid CRCs, and a manifest made for the new bytes (valid CRC-32C, SHA-256,
    and the same link back)."""
    victim = middle_segment(tier_dir)
    data = (tier_dir / victim.data_key).read_bytes()
    noop = encode_record(make_record(NoOpRecord()))
    out, pos, forged = [], 0, False
    while pos < len(data):
        batch, size = decode_batch(data, pos)
        pos += size
        # The first batch with something besides no-ops (an idle controller's no-op
        # batches would come out the same).
        if not forged and not batch.is_control and any(r != noop for r in batch.records):
            batch = attrs.evolve(batch, records=tuple(noop for _ in batch.records))
            forged = True
        out.append(encode_batch(batch))
    assert forged, "the object holds a batch of metadata records"
    new = b"".join(out)
    assert new != data
    manifest = segment_manifest(victim.cluster_id, victim.segment_id, victim.start_offset, new,
                                copier_id=victim.copier_id, copier_epoch=victim.copier_epoch,
                                prev_manifest_sha256=victim.prev_manifest_sha256)
    _put(tier_dir, manifest, new)
    return victim.manifest_key


def delete_object(tier_dir: Path) -> str:
    """A log object in the middle deleted (manifest and data); returns the key of the
    object after it, whose link now points at nothing."""
    segments, _ = _listing(tier_dir)
    victim = middle_segment(tier_dir)
    (tier_dir / victim.manifest_key).unlink()
    (tier_dir / victim.data_key).unlink()
    after = next(m for m in segments if m.start_offset == victim.end_offset)
    return after.manifest_key


def swap_manifest(tier_dir: Path) -> str:
    """A log object's manifest replaced by one that chains to another predecessor
    (valid CRC-32C; the data untouched)."""
    victim = middle_segment(tier_dir)
    other = hashlib.sha256(b"another history").hexdigest()
    _put(tier_dir, attrs.evolve(victim, prev_manifest_sha256=other), None)
    return victim.manifest_key


def replace_snapshot(tier_dir: Path) -> str:
    """The oldest tiered snapshot replaced by a newer snapshot's bytes, under a
    manifest made for it (valid CRC-32C and SHA-256). The oldest: its record is in
    the tier's history (the newest one's may still be only in the local logs)."""
    _, snapshots = _listing(tier_dir)
    hashed = [m for m in snapshots if m.hashed]
    assert len(hashed) >= 2, "two snapshots in the tier"
    victim, newer = hashed[0], hashed[-1]
    data = (tier_dir / newer.data_key).read_bytes()
    manifest = snapshot_manifest(victim.cluster_id, victim.segment_id, victim.end_offset,
                                 victim.last_epoch, data, victim.start_time_ms,
                                 copier_id=victim.copier_id, copier_epoch=victim.copier_epoch,
                                 hashed=True)
    _put(tier_dir, manifest, data)
    return victim.manifest_key


TAMPERINGS = {"object replaced": replace_object, "object deleted": delete_object,
              "manifest swapped": swap_manifest, "snapshot replaced": replace_snapshot}
