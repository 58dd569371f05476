"""Prometheus metrics of the remote tier, on the controller's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class TierMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.up = Gauge("metakraft_tier_up",
                        "1 while the last tier round succeeded, 0 while the tier fails.",
                        registry=r)
        self.last_success = Gauge("metakraft_tier_last_success_timestamp_seconds",
                                  "Unix time of the last tier round that succeeded.",
                                  registry=r)
        self.errors = Counter("metakraft_tier_errors_total",
                              "Tier rounds that failed (tier unreachable, refused, ...).",
                              registry=r)
        self.copies = Counter("metakraft_tier_copies_total",
                              "Objects this controller copied to the tier.", ["kind"],
                              registry=r)
        self.copied_bytes = Counter("metakraft_tier_copied_bytes_total",
                                    "Bytes this controller copied to the tier.", ["kind"],
                                    registry=r)
        self.handovers = Counter(
            "metakraft_tier_leadership_handovers_total",
            "Leadership handed to another voter because this controller's local log "
            "lacked a range the tier still needed (it was reset to a snapshot).",
            registry=r)
        self.throttled = Counter(
            "metakraft_tier_copy_throttled_seconds_total",
            "Seconds the copier waited to keep its uploads under "
            "tier.copy_max_bytes_per_second.", registry=r)
        self.deletes = Counter("metakraft_tier_deletes_total",
                               "Objects this controller deleted from the tier.", ["kind"],
                               registry=r)
        self.copy_lag_offsets = Gauge(
            "metakraft_tier_copy_lag_offsets",
            "Committed offsets not yet in the tier (high watermark - copied end).",
            registry=r)
        self.copy_lag_bytes = Gauge(
            "metakraft_tier_copy_lag_bytes",
            "Bytes of local segments holding offsets not yet in the tier.", registry=r)
        self.copied_end = Gauge("metakraft_tier_copied_end_offset",
                                "End of the log range the tier holds (-1: none).", registry=r)
        self.local_start = Gauge("metakraft_tier_local_log_start_offset",
                                 "First offset the local log segments hold.", registry=r)
        self.local_bytes = Gauge("metakraft_tier_local_log_bytes",
                                 "Bytes of local log segments.", registry=r)
        self.remote_objects = Gauge("metakraft_tier_remote_objects",
                                    "Finished objects in the tier (log and snapshots).",
                                    registry=r)
        self.remote_bytes = Gauge("metakraft_tier_remote_bytes",
                                  "Bytes of finished objects in the tier.", registry=r)
