"""Retention rules of both tiers, as pure functions (no I/O, no clock).

Local: a controller (active or standby) deletes a local segment only when the
segment lies wholly below its newest durable snapshot AND below the end of what
the tier holds (the COPY_FINISHED log objects) AND is outside local retention (older
than `local_retention_ms` or beyond `local_retention_bytes` of newer local log; -1
switches a limit off). The active segment is never deleted.

Remote: the oldest finished log objects are deleted, through DELETE_STARTED and
DELETE_FINISHED, once older than `retention_ms` or beyond `retention_bytes` (-1:
keep forever, the default), but only while a finished snapshot at or after their end
keeps the state there reconstructible, and never the newest one (whose end is what
local retention counts on). Snapshots older than the newest one at or below the
history's new start go with them.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.metadata.tier import ObjectKind, RemoteObject, SegmentState
from controller.storage.log_config import SegmentInfo


def local_retention_floor(segments: Sequence[SegmentInfo], *, snapshot_end_offset: int,
                          copied_end_offset: int | None, now_ms: int, retention_ms: int,
                          retention_bytes: int) -> int:
    """The offset below which local segments may be deleted (the first segment's base
    offset when none may)."""
    assert segments, "a log always has its active segment"
    floor = segments[0].base_offset
    if copied_end_offset is None:
        return floor
    limit = min(snapshot_end_offset, copied_end_offset)
    total = sum(s.size_bytes for s in segments)
    for seg in segments:
        if seg.is_active or seg.next_offset > limit:
            break
        too_old = retention_ms >= 0 and now_ms - seg.modified_ms > retention_ms
        too_big = retention_bytes >= 0 and total > retention_bytes
        if not (too_old or too_big):
            break
        floor = seg.next_offset
        total -= seg.size_bytes
    return floor


def remote_expired(objects: Sequence[RemoteObject], *, now_ms: int, retention_ms: int,
                   retention_bytes: int) -> list[RemoteObject]:
    """The finished objects remote retention deletes now, oldest first."""
    finished = [o for o in objects if o.state is SegmentState.COPY_FINISHED]
    segments = sorted((o for o in finished if o.kind is ObjectKind.SEGMENT),
                      key=lambda o: o.start_offset)
    snapshots = sorted((o for o in finished if o.kind is ObjectKind.SNAPSHOT),
                       key=lambda o: o.end_offset)
    newest_snapshot_end = snapshots[-1].end_offset if snapshots else -1
    total = sum(o.size_bytes for o in segments)
    out: list[RemoteObject] = []
    kept = list(segments)
    for seg in segments[:-1]:
        too_old = retention_ms >= 0 and now_ms - seg.end_time_ms > retention_ms
        too_big = retention_bytes >= 0 and total > retention_bytes
        if not (too_old or too_big) or seg.end_offset > newest_snapshot_end:
            break
        out.append(seg)
        kept.pop(0)
        total -= seg.size_bytes
    if out:
        history_start = kept[0].start_offset if kept else out[-1].end_offset
        anchors = [s.end_offset for s in snapshots if s.end_offset <= history_start]
        if anchors:
            out += [s for s in snapshots if s.end_offset < max(anchors)]
    return out
