"""`[data]` of the broker config: the built-in partition logs' settings."""

from __future__ import annotations

import attrs


@attrs.frozen
class DataPlaneConfig:
    """`[data]` in the broker config."""

    segment_bytes: int = 64 * 1024 * 1024
    # Defaults for topics that set no retention.ms / retention.bytes (-1: unlimited).
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    retention_check_interval_ms: int = 60_000
    # min.insync.replicas for topics that do not set it.
    min_insync_replicas: int = 1
    # How long a follower's fetch waits at the leader for data (long poll).
    replica_fetch_wait_ms: int = 500
    # A follower not caught up for this long leaves the ISR (the leader reports it).
    replica_lag_time_max_ms: int = 10_000
    # How often a leader looks for ISR changes to report.
    isr_check_interval_ms: int = 500

    def __attrs_post_init__(self) -> None:
        assert self.retention_check_interval_ms > 0 and self.replica_fetch_wait_ms > 0
        assert self.replica_lag_time_max_ms > 0 and self.isr_check_interval_ms > 0
        assert self.min_insync_replicas >= 1


DEFAULT_DATA_PLANE = DataPlaneConfig()
