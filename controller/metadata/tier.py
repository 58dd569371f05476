"""`RemoteLogControlManager`: what the remote tier holds, as the metadata log says.

Every object the active controller puts in the remote tier (a range of committed
log batches, or a snapshot) is announced by a `RemoteLogSegmentRecord` before its
first byte is uploaded, and moves through states by
`RemoteLogSegmentStateChangeRecord`s. The transitions, all in `_TRANSITIONS`:

    COPY_STARTED -> COPY_FINISHED -> DELETE_STARTED -> DELETE_FINISHED
    COPY_STARTED -> DELETE_STARTED            (a copy abandoned half way)

Replay is the only mutator (a timeline map, so a leader that loses office reverts
it with the rest of the state); the `*_records` methods only generate, after
checking the transition against the latest state. A DELETE_FINISHED object leaves
the map (the map stays bounded by what the tier holds).

Invariants kept by the generators and asserted on replay:
- the log objects that finished copying cover one contiguous offset range
  (each copy starts at the end of the previous one). Two copies of one range may
  both be in COPY_STARTED (a new leader does not wait for its predecessor's copy
  to time out); they hold the same committed batches, so either may finish.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from controller.metadata.errors import MetadataReplayError
from controller.records import (
    MetadataRecord,
    RemoteLogSegmentRecord,
    RemoteLogSegmentStateChangeRecord,
    make_record,
)
from controller.records import metadata_pb2 as pb
from timeline import SnapshotRegistry, TimelineHashMap


class ObjectKind(enum.Enum):
    SEGMENT = pb.REMOTE_LOG_OBJECT_KIND_SEGMENT
    SNAPSHOT = pb.REMOTE_LOG_OBJECT_KIND_SNAPSHOT


class SegmentState(enum.Enum):
    COPY_STARTED = pb.REMOTE_LOG_SEGMENT_STATE_COPY_STARTED
    COPY_FINISHED = pb.REMOTE_LOG_SEGMENT_STATE_COPY_FINISHED
    DELETE_STARTED = pb.REMOTE_LOG_SEGMENT_STATE_DELETE_STARTED
    DELETE_FINISHED = pb.REMOTE_LOG_SEGMENT_STATE_DELETE_FINISHED


# state -> the states it may move to.
_TRANSITIONS: dict[SegmentState, frozenset[SegmentState]] = {
    SegmentState.COPY_STARTED: frozenset({SegmentState.COPY_FINISHED,
                                          SegmentState.DELETE_STARTED}),
    SegmentState.COPY_FINISHED: frozenset({SegmentState.DELETE_STARTED}),
    SegmentState.DELETE_STARTED: frozenset({SegmentState.DELETE_FINISHED}),
    SegmentState.DELETE_FINISHED: frozenset(),
}


def _is_sha256_hex(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


class TierStateError(ValueError):
    """A tier change that does not fit the current tier state (nothing is written)."""


@attrs.frozen
class RemoteObject:
    """One object in the remote tier and its state."""

    segment_id: str
    kind: ObjectKind
    start_offset: int
    end_offset: int
    start_time_ms: int
    end_time_ms: int
    size_bytes: int
    last_epoch: int
    copier_id: int
    copier_epoch: int
    # When the current state was entered (the changing controller's clock).
    state: SegmentState
    state_time_ms: int
    # SHA-256 (hex) of the object's manifest (metadata.version 9; "" before): what a
    # tamper check compares the tier's manifest with, and the link the next log
    # object's manifest chains to.
    manifest_sha256: str = ""

    def __attrs_post_init__(self) -> None:
        assert 0 <= self.start_offset <= self.end_offset, self
        assert self.size_bytes >= 0, self

    def to_records(self) -> list[MetadataRecord]:
        """The records that recreate this object in a fresh state (snapshots)."""
        records = [make_record(self._started_record())]
        if self.state is not SegmentState.COPY_STARTED:
            records.append(make_record(RemoteLogSegmentStateChangeRecord(
                segment_id=self.segment_id, state=self.state.value,
                copier_id=self.copier_id, copier_epoch=self.copier_epoch,
                event_time_ms=self.state_time_ms)))
        return records

    def _started_record(self) -> RemoteLogSegmentRecord:
        return RemoteLogSegmentRecord(
            segment_id=self.segment_id, kind=self.kind.value,
            start_offset=self.start_offset, end_offset=self.end_offset,
            start_time_ms=self.start_time_ms, end_time_ms=self.end_time_ms,
            size_bytes=self.size_bytes, last_epoch=self.last_epoch, copier_id=self.copier_id,
            copier_epoch=self.copier_epoch, event_time_ms=self.state_time_ms,
            manifest_sha256=self.manifest_sha256)


class RemoteLogControlManager:
    def __init__(self, registry: SnapshotRegistry) -> None:
        self._objects: TimelineHashMap[str, RemoteObject] = TimelineHashMap(registry)

    # -- reads ---------------------------------------------------------------------

    def objects(self, epoch: int | None = None) -> list[RemoteObject]:
        """Every object the tier holds or may hold, by kind then start offset."""
        return sorted(self._objects.values(epoch),
                      key=lambda o: (o.kind.value, o.start_offset, o.end_offset, o.segment_id))

    def get(self, segment_id: str, epoch: int | None = None) -> RemoteObject | None:
        return self._objects.get(segment_id, epoch=epoch)

    def chain_predecessor(self, start_offset: int, epoch: int | None = None) -> str:
        """The manifest SHA-256 a log object starting at `start_offset` chains to: that
        of the finished log object ending there ("" if none, or if it predates
        metadata.version 9). Two finished copies of one range hold the same batches;
        a hashed one with the smallest id is taken, so every controller picks the same."""
        ends_here = sorted((not o.manifest_sha256, o.segment_id, o.manifest_sha256)
                           for o in self._objects.values(epoch)
                           if o.kind is ObjectKind.SEGMENT and o.end_offset == start_offset
                           and o.state is SegmentState.COPY_FINISHED)
        return ends_here[0][2] if ends_here else ""

    def copied_end_offset(self, epoch: int | None = None) -> int | None:
        """End of the log range whose copy finished (None: nothing copied yet).
        Local log below it may be deleted (with the other conditions)."""
        ends = [o.end_offset for o in self._objects.values(epoch)
                if o.kind is ObjectKind.SEGMENT and o.state is SegmentState.COPY_FINISHED]
        return max(ends) if ends else None

    # -- generate (no state change) ---------------------------------------------------

    def copy_started_records(self, obj: RemoteObject) -> list[MetadataRecord]:
        """Announce a copy. A log copy must start where the finished ones end."""
        if obj.state is not SegmentState.COPY_STARTED:
            raise TierStateError(f"a new object starts in COPY_STARTED, not {obj.state.name}")
        if obj.segment_id in self._objects:
            raise TierStateError(f"remote object {obj.segment_id} exists already")
        if obj.kind is ObjectKind.SEGMENT:
            end = self.copied_end_offset()
            if end is not None and obj.start_offset != end:
                raise TierStateError(f"a log copy must start at the copied end offset {end}, "
                                     f"not {obj.start_offset}")
            if obj.end_offset <= obj.start_offset:
                raise TierStateError("a log copy must hold at least one offset")
        return [make_record(obj._started_record())]

    def state_change_records(self, segment_id: str, state: SegmentState, *, copier_id: int,
                             copier_epoch: int, now_ms: int) -> list[MetadataRecord]:
        obj = self._objects.get(segment_id)
        if obj is None:
            raise TierStateError(f"no remote object {segment_id}")
        if state not in _TRANSITIONS[obj.state]:
            raise TierStateError(f"remote object {segment_id}: {obj.state.name} cannot move "
                                 f"to {state.name}")
        return [make_record(RemoteLogSegmentStateChangeRecord(
            segment_id=segment_id, state=state.value,
            copier_id=copier_id, copier_epoch=copier_epoch, event_time_ms=now_ms))]

    # -- replay (the only mutators) ----------------------------------------------------

    def replay_segment(self, record: RemoteLogSegmentRecord) -> None:
        try:
            kind = ObjectKind(record.kind)
        except ValueError:
            raise MetadataReplayError(
                f"remote object {record.segment_id}: unknown kind {record.kind}") from None
        if not record.segment_id:
            raise MetadataReplayError("remote object without an id")
        if record.segment_id in self._objects:
            raise MetadataReplayError(f"remote object {record.segment_id} announced twice")
        if record.manifest_sha256 and not _is_sha256_hex(record.manifest_sha256):
            raise MetadataReplayError(f"remote object {record.segment_id}: manifest SHA-256 "
                                      f"{record.manifest_sha256[:80]!r} is not 64 hex digits")
        if not 0 <= record.start_offset <= record.end_offset or record.size_bytes < 0:
            raise MetadataReplayError(f"remote object {record.segment_id}: bad range "
                                      f"[{record.start_offset}, {record.end_offset}) or size")
        self._objects[record.segment_id] = RemoteObject(
            record.segment_id, kind, record.start_offset, record.end_offset,
            record.start_time_ms, record.end_time_ms, record.size_bytes, record.last_epoch,
            record.copier_id, record.copier_epoch, SegmentState.COPY_STARTED,
            record.event_time_ms, record.manifest_sha256)

    def replay_state_change(self, record: RemoteLogSegmentStateChangeRecord) -> None:
        obj = self._objects.get(record.segment_id)
        if obj is None:
            raise MetadataReplayError(f"state change of unknown remote object "
                                      f"{record.segment_id}")
        try:
            state = SegmentState(record.state)
        except ValueError:
            raise MetadataReplayError(f"remote object {record.segment_id}: unknown state "
                                      f"{record.state}") from None
        if state not in _TRANSITIONS[obj.state]:
            raise MetadataReplayError(f"remote object {record.segment_id}: {obj.state.name} "
                                      f"cannot move to {state.name}")
        if state is SegmentState.DELETE_FINISHED:
            del self._objects[record.segment_id]
            return
        self._objects[record.segment_id] = attrs.evolve(
            obj, state=state, state_time_ms=record.event_time_ms, copier_id=record.copier_id,
            copier_epoch=record.copier_epoch)

    # -- snapshots ---------------------------------------------------------------------

    def snapshot_records(self, epoch: int | None = None, *, with_hashes: bool = True
                         ) -> list[MetadataRecord]:
        """`with_hashes=False` (below metadata.version 9, after an unsafe downgrade):
        the manifest hashes are left out."""
        out: list[MetadataRecord] = []
        for obj in self.objects(epoch):
            out += (obj if with_hashes else attrs.evolve(obj, manifest_sha256="")).to_records()
        return out

    def image(self, epoch: int | None = None) -> Sequence[RemoteObject]:
        return tuple(self.objects(epoch))
