"""A tier of real objects for unit tests: log objects of PER_OBJECT offsets, each
opening with the copier's records announcing the one before it, on the hash chain."""

from __future__ import annotations

from pathlib import Path

import attrs

from controller.logformat.batch import EMPTY_ORIGIN, RecordBatch, encode_batch
from controller.metadata.tier import ObjectKind, SegmentState
from controller.records import (
    RemoteLogSegmentRecord,
    RemoteLogSegmentStateChangeRecord,
    encode_record,
    make_record,
)
from controller.tier.chain import TierLedger, check_chain
from controller.tier.history import claim_tier, history_batches, list_tier, plan_history
from controller.tier.objects import Manifest, segment_manifest
from controller.tier.remote import DirectoryStore

PER_OBJECT = 10


def seg_id(n: int) -> str:
    return f"{n:032x}"


def announce(m: Manifest, state: SegmentState = SegmentState.COPY_FINISHED) -> list[bytes]:
    """The records a copier writes for `m`: announced with its manifest's SHA-256,
    then moved to `state`."""
    kind = ObjectKind.SEGMENT if m.kind == "segment" else ObjectKind.SNAPSHOT
    out = [encode_record(make_record(RemoteLogSegmentRecord(
        segment_id=m.segment_id, kind=kind.value, start_offset=m.start_offset,
        end_offset=m.end_offset, size_bytes=m.size_bytes,
        manifest_sha256=m.sha256() if m.hashed else "")))]
    for s in (SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED,
              SegmentState.DELETE_FINISHED):
        out.append(encode_record(make_record(RemoteLogSegmentStateChangeRecord(
            segment_id=m.segment_id, state=s.value))))
        if s is state:
            break
    return out


def batches(start: int, end: int, leading: list[bytes], filler: bytes = b"r") -> bytes:
    """Batches [start, end): `leading` records first, then filler records."""
    out, offset = [], start
    if leading:
        out.append(encode_batch(RecordBatch(offset, 1, 1000 + offset, False, EMPTY_ORIGIN,
                                            tuple(leading))))
        offset += len(leading)
    while offset < end:
        n = min(3, end - offset)
        out.append(encode_batch(RecordBatch(offset, 1, 1000 + offset, False, EMPTY_ORIGIN,
                                            tuple(filler + b"%d" % (offset + i)
                                                  for i in range(n)))))
        offset += n
    return b"".join(out)


@attrs.define
class Tier:
    store: DirectoryStore
    manifests: list[Manifest]
    # The records the local log holds after the tier: the newest object's announcement.
    local: list[RecordBatch]

    def put(self, m: Manifest, data: bytes) -> None:
        self.store.put(m.data_key, data)
        self.store.put(m.manifest_key, m.encode())

    def ledger(self, *, with_local: bool) -> TierLedger:
        listing = list_tier(self.store)
        ledger = TierLedger()
        ledger.add_batches(b for _, b in history_batches(self.store,
                                                         plan_history(listing.segments, [])))
        if with_local:
            ledger.add_batches(self.local)
        return ledger

    def check(self, *, with_local: bool = True) -> list[str]:
        listing = list_tier(self.store)
        report = check_chain(listing.segments, listing.snapshots,
                             self.ledger(with_local=with_local), complete=with_local)
        return [str(f) for f in report.findings]


def build(tmp_path: Path, n: int = 4, *, hashed_from: int = 0) -> Tier:
    """A tier of `n` log objects of PER_OBJECT offsets, each object's first batch
    announcing the one before it (as the copier's records follow a copy), chained
    from object `hashed_from` on (those before it: format 1, below level 9)."""
    tier = Tier(DirectoryStore(tmp_path / "tier"), [], [])
    claim_tier(tier.store, "cid")
    prev = ""
    for i in range(n):
        start = i * PER_OBJECT
        leading = announce(tier.manifests[-1]) if tier.manifests else []
        data = batches(start, start + PER_OBJECT, leading)
        m = segment_manifest("cid", seg_id(i), start, data,
                             prev_manifest_sha256=prev if i >= hashed_from else None)
        tier.put(m, data)
        tier.manifests.append(m)
        prev = m.sha256() if m.hashed else ""
    end = n * PER_OBJECT
    tier.local = [RecordBatch(end, 1, 1000 + end, False, EMPTY_ORIGIN,
                              tuple(announce(tier.manifests[-1])))] if n else []
    return tier
