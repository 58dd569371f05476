"""Tamper evidence: the tier's hash chain, checked against the log's own record of it.

From metadata.version 9 every manifest holds the SHA-256 of its data, every log
object's manifest the SHA-256 of the previous log object's manifest (the object
ending where it starts), and the active controller commits each manifest's SHA-256
in the object's `RemoteLogSegmentRecord` *before* the upload. So:

- an object replaced by other batches with valid CRCs (and a manifest rewritten to
  match) no longer matches the SHA-256 the log recorded, and breaks the link of the
  object after it;
- a manifest replaced or swapped does the same; a snapshot replaced does not match
  its record;
- an object deleted leaves a link pointing at nothing, or a recorded, finished,
  never deleted object missing.

The log's records of the newest objects are in the controllers' local logs (an
object's record comes after its range), so a check that reads a controller's local
log too (`complete=True`) anchors the whole chain to that controller's disk: whoever
rewrites the bucket must also rewrite every controller's log. Check against a
controller that is caught up: objects copied after the end of its log are reported
as not vouched for, and an object it saw copied but not yet deleted by retention
counts as missing. A check of the tier
alone verifies each object against the records held in later objects and the links,
which leaves the newest objects and a consistent rewrite of the whole bucket
unanchored (the report says how many).

Pure: `TierLedger` reads records, `check_chain` compares; `tier verify` and the Spark
audit feed them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from controller.logformat.batch import RecordBatch
from controller.metadata.tier import ObjectKind, SegmentState
from controller.records import MetadataRecord, decode_record, record_type
from controller.tier.objects import Manifest

# The oneof tags of RemoteLogSegmentRecord (22) and its state change (23), as they
# open those fields in an encoded MetadataRecord: records without either byte pair
# cannot be one of them and are not decoded.
_TIER_RECORD_TAGS = (b"\xb2\x01", b"\xba\x01")
_KINDS = {ObjectKind.SEGMENT.value: "segment", ObjectKind.SNAPSHOT.value: "snapshot"}


@attrs.frozen
class Logged:
    """What the log says about one tier object."""

    segment_id: str
    kind: str  # "segment" or "snapshot"
    start_offset: int
    end_offset: int
    manifest_sha256: str  # "" below metadata.version 9
    announced_at: int  # offset of its RemoteLogSegmentRecord
    state: SegmentState  # the last state the records read give it


class TierLedger:
    """The tier objects the log's records announce, with their last state."""

    def __init__(self) -> None:
        self.objects: dict[str, Logged] = {}
        self.first_offset: int | None = None
        self.end_offset = 0

    def add_batch(self, batch: RecordBatch) -> None:
        if self.first_offset is None:
            self.first_offset = batch.base_offset
        self.end_offset = batch.next_offset
        for i, data in enumerate(batch.records):
            if any(tag in data for tag in _TIER_RECORD_TAGS):
                self.add(batch.base_offset + i, decode_record(data))

    def add(self, offset: int, record: MetadataRecord) -> None:
        kind = record_type(record)
        if kind == "remote_log_segment":
            r = record.remote_log_segment
            self.objects[r.segment_id] = Logged(
                r.segment_id, _KINDS.get(r.kind, "unknown"), r.start_offset, r.end_offset,
                r.manifest_sha256, offset, SegmentState.COPY_STARTED)
        elif kind == "remote_log_segment_state_change":
            c = record.remote_log_segment_state_change
            found = self.objects.get(c.segment_id)
            if found is not None:  # else announced below the history read
                self.objects[c.segment_id] = attrs.evolve(found, state=SegmentState(c.state))

    def add_batches(self, batches: Iterable[RecordBatch]) -> None:
        for batch in batches:
            self.add_batch(batch)


@attrs.frozen
class Finding:
    """One place the chain or the record breaks: the object, the offset, why."""

    key: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"remote object {self.key} at offset {self.offset}: {self.reason}"


@attrs.frozen
class ChainReport:
    findings: tuple[Finding, ...]  # by offset: the first is the first break
    hashed: int  # objects on the chain (format 2 manifests)
    unhashed: int  # objects copied below metadata.version 9: CRC-32C only
    recorded: int  # hashed objects whose manifest matches the log's record
    # Hashed objects no record read vouches for (their records are in the local log
    # of a controller, which a check of the tier alone does not read, or past the
    # end of the log read).
    unanchored: tuple[str, ...]
    # The history read ran to a controller's log end (`check_chain(complete=)`).
    complete: bool = False

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        parts = [f"hash chain: {self.hashed} object(s), {self.recorded} matching the log's "
                 "record"]
        if self.unhashed:
            parts.append(f"{self.unhashed} copied before metadata.version 9 (CRC-32C only)")
        if self.unanchored and self.complete:
            parts.append(f"{len(self.unanchored)} copied after the end of the log read (check "
                         "against a controller that is caught up to vouch for them)")
        elif self.unanchored:
            parts.append(f"{len(self.unanchored)} not yet in the history read (the newest: "
                         "their records are in the controllers' local logs; give --log-dir "
                         "to check them)")
        return "; ".join(parts)


def check_chain(segments: Sequence[Manifest], snapshots: Sequence[Manifest],
                ledger: TierLedger, *, complete: bool) -> ChainReport:
    """Every way the tier's objects and the log's record of them disagree.

    `ledger` holds the records of the history read; `complete`: that history runs to
    a controller's log end (a local log was read), so every object the tier holds or
    should hold was announced in it.
    """
    hashes = {m.segment_id: m.sha256() for m in (*segments, *snapshots)}
    held = {m.segment_id: m for m in (*segments, *snapshots)}
    findings: list[Finding] = []
    findings += _link_findings(segments, hashes)
    recorded = 0
    for logged in ledger.objects.values():
        m = held.get(logged.segment_id)
        if m is None:
            if (complete and logged.state is SegmentState.COPY_FINISHED
                    and logged.manifest_sha256):
                findings.append(Finding(
                    _name(logged), logged.start_offset,
                    f"missing: the log recorded its copy at offset {logged.announced_at} "
                    "and no deletion, but the tier does not hold it (deleted)"))
            continue
        if not logged.manifest_sha256:
            continue
        if hashes[m.segment_id] != logged.manifest_sha256:
            findings.append(Finding(
                m.manifest_key, _start(m),
                f"its manifest is not the one the log recorded at offset "
                f"{logged.announced_at} (SHA-256 {hashes[m.segment_id][:16]}…, recorded "
                f"{logged.manifest_sha256[:16]}…): the object or its manifest was replaced"))
        else:
            recorded += 1
    unanchored: list[str] = []
    history_start = ledger.first_offset if ledger.first_offset is not None else 0
    # An object may be announced past the end of the log read (a controller that is
    # behind): not vouched for, not a fault, unless the log read announces something
    # that can only come after it. Log copies are announced in order of their start
    # (a range is copied once the one before it finished), so a copy starting at or
    # past an object's end comes after its announcement; a snapshot is announced only
    # when newer than every snapshot the tier holds, so a finished snapshot that
    # ends past it does too.
    later_segment = max((o.start_offset for o in ledger.objects.values()
                         if o.kind == "segment"), default=-1)
    later_snapshot = max((o.end_offset for o in ledger.objects.values()
                          if o.kind == "snapshot" and o.state is SegmentState.COPY_FINISHED),
                         default=-1)
    for m in (*segments, *snapshots):
        if not m.hashed or m.segment_id in ledger.objects:
            continue
        if m.end_offset < history_start:
            continue  # announced below the history read (its records expired)
        after = (later_segment >= m.end_offset if m.kind == "segment"
                 else later_snapshot > m.end_offset)
        if complete and after:
            findings.append(Finding(m.manifest_key, _start(m),
                                    "no record of the log announces it: no controller of "
                                    "this cluster put it there"))
        else:
            unanchored.append(m.manifest_key)
    hashed = sum(1 for m in (*segments, *snapshots) if m.hashed)
    return ChainReport(tuple(sorted(findings, key=lambda f: (f.offset, f.key))), hashed,
                       len(held) - hashed, recorded, tuple(unanchored), complete)


def _link_findings(segments: Sequence[Manifest], hashes: dict[str, str]) -> list[Finding]:
    by_end: dict[int, list[Manifest]] = {}
    for m in segments:
        by_end.setdefault(m.end_offset, []).append(m)
    oldest = min((m.start_offset for m in segments), default=0)
    out: list[Finding] = []
    for m in segments:
        if not m.hashed:
            continue
        before = by_end.get(m.start_offset, [])
        if m.prev_manifest_sha256:
            if any(hashes[p.segment_id] == m.prev_manifest_sha256 for p in before):
                continue
            if before:
                names = ", ".join(p.segment_id for p in before)
                out.append(Finding(m.manifest_key, m.start_offset,
                                   f"the hash chain breaks here: the manifest of the object "
                                   f"before it ({names}) is not the one it chains to (that "
                                   "object or this one was replaced)"))
            elif m.start_offset > oldest:
                out.append(Finding(m.manifest_key, m.start_offset,
                                   "the object it chains to (ending at this offset) is "
                                   "missing (deleted)"))
            # else: the oldest object held; what it chains to was expired by retention.
        elif any(p.hashed for p in before):
            out.append(Finding(m.manifest_key, m.start_offset,
                               "not chained to the object before it, which is on the chain "
                               "(its manifest was replaced)"))
    return out


def _start(m: Manifest) -> int:
    return m.start_offset if m.kind == "segment" else m.end_offset


def _name(logged: Logged) -> str:
    return f"{logged.kind} {logged.segment_id} [{logged.start_offset}, {logged.end_offset})"
