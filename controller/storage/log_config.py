"""Configuration and recovery report of `SegmentedLog` (kept apart to keep log.py small)."""

from __future__ import annotations

import attrs

from controller.logformat.batch import MAX_BATCH_BYTES

# What a controller does on start with damage to records its log had flushed
# (LogDamage): repair them from the leader before voting again, or refuse to start.
LOG_DAMAGE_POLICIES = ("repair", "refuse")


@attrs.frozen
class LogConfig:
    """Segment rolling and indexing. Age is measured with the clock given to `open`,
    or, without one, with the appended batches' `append_time_ms` (deterministic)."""

    segment_bytes: int = 64 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096

    def __attrs_post_init__(self) -> None:
        # Index positions are uint32 and a batch must fit in an empty segment.
        if not MAX_BATCH_BYTES <= self.segment_bytes < 2**31:
            raise ValueError(f"segment_bytes must be in [{MAX_BATCH_BYTES}, 2**31)")
        if self.segment_ms <= 0 or self.index_interval_bytes <= 0:
            raise ValueError("segment_ms and index_interval_bytes must be positive")


@attrs.frozen
class SegmentInfo:
    """One segment as retention sees it: offsets [base, next), size, last write."""

    base_offset: int
    next_offset: int
    size_bytes: int
    modified_ms: int
    is_active: bool


@attrs.frozen
class LogDamage:
    """Records this replica had fsynced (and so may have acknowledged) that recovery
    found damaged or missing: the log now ends at `offset`, it was flushed up to
    `recovery_point` (>= offset). `segment` and `position` name the first damage
    (position -1: no byte to point at, e.g. deleted segments)."""

    segment: str
    offset: int
    position: int
    recovery_point: int
    reason: str

    def describe(self) -> str:
        at = f" (byte {self.position})" if self.position >= 0 else ""
        return (f"{self.segment} at offset {self.offset}{at}: {self.reason}; the log was "
                f"flushed up to offset {self.recovery_point}, so records this replica "
                "stored (and may have acknowledged) are lost")


@attrs.frozen
class RecoveryReport:
    """What opening the log did to repair a crash: empty `reason` means nothing.
    `damage` is set when it cut records that had been flushed (see LogDamage)."""

    truncated_bytes: int = 0
    segment: str = ""
    offset: int = -1
    reason: str = ""
    damage: LogDamage | None = None
