"""Retention rules of both tiers (pure functions)."""

from __future__ import annotations

import itertools

from controller.metadata.tier import ObjectKind, RemoteObject, SegmentState
from controller.storage.log_config import SegmentInfo
from controller.tier.retention import local_retention_floor, remote_expired

NOW = 1_000_000


def segs(*bounds: int, size: int = 100, age_ms: int = 10_000) -> list[SegmentInfo]:
    out = [SegmentInfo(a, b, size, NOW - age_ms, False) for a, b in itertools.pairwise(bounds)]
    out[-1] = SegmentInfo(out[-1].base_offset, out[-1].next_offset, size, NOW, True)
    return out


def floor(segments: list[SegmentInfo], snapshot: int, copied: int | None, ms: int = 0,
          nbytes: int = -1) -> int:
    return local_retention_floor(segments, snapshot_end_offset=snapshot,
                                 copied_end_offset=copied, now_ms=NOW, retention_ms=ms,
                                 retention_bytes=nbytes)


def test_local_segments_go_only_below_snapshot_and_copied_end_and_outside_retention() -> None:
    log = segs(0, 10, 20, 30, 40)  # four segments, the last one active
    assert floor(log, snapshot=40, copied=None) == 0  # nothing tiered: keep everything
    assert floor(log, snapshot=40, copied=25) == 20  # [20, 30) holds untiered offsets
    assert floor(log, snapshot=15, copied=40) == 10  # [10, 20) is above the snapshot
    assert floor(log, snapshot=40, copied=40) == 30  # the active segment always stays
    assert floor(log, snapshot=40, copied=40, ms=60_000) == 0  # all younger than a minute
    assert floor(log, snapshot=40, copied=40, ms=-1, nbytes=-1) == 0  # no limit: keep
    # Bytes: 400 bytes in all; keep at most 250 -> two segments go.
    assert floor(log, snapshot=40, copied=40, ms=-1, nbytes=250) == 20


def obj(segment_id: str, kind: ObjectKind, start: int, end: int, end_time_ms: int,
        size: int = 100, state: SegmentState = SegmentState.COPY_FINISHED) -> RemoteObject:
    return RemoteObject(segment_id, kind, start, end, 0, end_time_ms, size, 1, 1, 1, state, 0)


SEG, SNAP = ObjectKind.SEGMENT, ObjectKind.SNAPSHOT


def expired(objects: list[RemoteObject], ms: int = -1, nbytes: int = -1) -> list[str]:
    return [o.segment_id for o in remote_expired(objects, now_ms=NOW, retention_ms=ms,
                                                 retention_bytes=nbytes)]


def test_remote_retention_keeps_forever_by_default_and_needs_a_snapshot_above() -> None:
    tier = [obj("a", SEG, 0, 10, 1), obj("b", SEG, 10, 20, 2), obj("c", SEG, 20, 30, 3),
            obj("s1", SNAP, 0, 5, 1), obj("s2", SNAP, 0, 20, 2)]
    assert expired(tier) == []
    # Everything is old, but only segments below the newest snapshot may go (the state
    # at the new history start must be reconstructible), never the newest segment;
    # the snapshot older than the one at the new start goes with them.
    assert expired(tier, ms=0) == ["a", "b", "s1"]
    assert expired(tier, nbytes=150) == ["a", "b", "s1"]
    assert expired(tier, nbytes=250) == ["a"]
    # Objects not finished are never retention's to delete.
    started = [obj("a", SEG, 0, 10, 1, state=SegmentState.COPY_STARTED), *tier[1:]]
    assert "a" not in expired(started, ms=0)
