"""Prometheus metrics of one broker agent (`[metrics]` in its config).

Gauges are refreshed once a second from the agent's state (`BrokerMetrics.refresh`
on the event loop); the reconcile counters and histogram are advanced by the
reconcile worker thread as it applies each plan (the client library is
thread-safe). Documented in docs/operations.md ("Metrics").
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from broker_agent.lifecycle_machine import LifecycleState
from broker_agent.reconciler import LocalReplica, ReplicaRole
from controller.metrics_common import LATENCY_BUCKETS_S, standard_registry


class BrokerMetrics:
    def __init__(self, broker_id: int, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else standard_registry()
        r = self.registry
        self.broker_id = broker_id
        self.state = Gauge("metakraft_broker_state",
                           "1 for the broker's current lifecycle state, 0 for the others.",
                           ["state"], registry=r)
        self.fenced = Gauge("metakraft_broker_fenced",
                            "1 while the broker is not in service (fenced, catching up, "
                            "shutting down), 0 while running.", registry=r)
        self.epoch = Gauge("metakraft_broker_epoch",
                           "Broker epoch from the last registration (-1: none).", registry=r)
        self.metadata_offset = Gauge("metakraft_broker_metadata_offset",
                                     "Last metadata log offset applied to the image.",
                                     registry=r)
        self.metadata_hw = Gauge("metakraft_broker_metadata_high_watermark",
                                 "Committed end offset the controllers last reported.",
                                 registry=r)
        self.metadata_lag = Gauge("metakraft_broker_metadata_lag_offsets",
                                  "Committed records not yet applied (high watermark - 1 - "
                                  "applied offset).", registry=r)
        self.reconciled_offset = Gauge("metakraft_broker_reconciled_offset",
                                       "Offset of the last image whose plan is on disk.",
                                       registry=r)
        self.replicas = Gauge("metakraft_broker_replicas", "Local replicas by role.", ["role"],
                              registry=r)
        self.reconcile_actions = Counter(
            "metakraft_broker_reconcile_actions",
            "Local replica changes applied, by action (leader, follower, delete).",
            ["action"], registry=r)
        self.metadata_reloads = Counter(
            "metakraft_broker_metadata_reloads",
            "Times the controllers' committed history turned out cut below what this broker "
            "had applied, so it dropped its metadata log and reloaded the leader's snapshot.",
            registry=r)
        self.reconcile_time = Histogram(
            "metakraft_broker_reconcile_duration_seconds",
            "Time to apply one reconcile plan to the local state, by kind (full, delta).",
            ["kind"], registry=r, buckets=LATENCY_BUCKETS_S)

        # The data plane (broker_agent/replica).
        self.produce_requests = Counter(
            "metakraft_broker_produce_requests",
            "Produce requests answered, by acks and outcome (NONE or the DataError name).",
            ["acks", "result"], registry=r)
        self.produced_records = Counter(
            "metakraft_broker_produced_records", "Records appended as partition leader.",
            registry=r)
        self.produce_time = Histogram(
            "metakraft_broker_produce_duration_seconds",
            "Produce request time at the leader (append, then the wait acks asks for).",
            ["acks"], registry=r, buckets=LATENCY_BUCKETS_S)
        self.fetch_requests = Counter(
            "metakraft_broker_fetch_requests",
            "Fetch requests answered as leader, by kind (consumer, follower).", ["kind"],
            registry=r)
        self.isr_changes = Counter(
            "metakraft_broker_isr_changes",
            "ISR changes this broker reported as leader and the controller accepted, by "
            "kind (shrink, expand).", ["kind"], registry=r)
        self.fenced_leader_refusals = Counter(
            "metakraft_broker_fenced_leader_epoch_refusals",
            "Produce requests refused with FENCED_LEADER_EPOCH (clients with old metadata).",
            registry=r)
        self.led_partitions = Gauge("metakraft_broker_leader_partitions",
                                    "Partitions this broker leads.", registry=r)
        self.under_min_isr = Gauge(
            "metakraft_broker_under_min_isr_partitions",
            "Led partitions whose ISR is smaller than min.insync.replicas (acks=all refused).",
            registry=r)
        self.at_min_isr = Gauge(
            "metakraft_broker_at_min_isr_partitions",
            "Led partitions whose ISR is exactly min.insync.replicas (one more loss refuses "
            "acks=all).", registry=r)
        self.max_replica_lag = Gauge(
            "metakraft_broker_max_follower_lag_records",
            "Largest lag, in records, of an in-sync follower behind this leader's log end.",
            registry=r)

        # Zeros for the usual label values, so a rate() has a series from the start.
        for acks in ("0", "1", "all"):
            self.produce_requests.labels(acks=acks, result="DATA_ERROR_NONE")
            self.produce_time.labels(acks=acks)
        for kind in ("consumer", "follower"):
            self.fetch_requests.labels(kind=kind)
        for kind in ("shrink", "expand"):
            self.isr_changes.labels(kind=kind)

    def data_plane(self, led: int, under_min_isr: int, at_min_isr: int,
                   max_lag: int) -> None:
        self.led_partitions.set(led)
        self.under_min_isr.set(under_min_isr)
        self.at_min_isr.set(at_min_isr)
        self.max_replica_lag.set(max_lag)

    def refresh(self, state: LifecycleState, broker_epoch: int, applied_offset: int,
                high_watermark: int, reconciled_offset: int,
                replicas: Iterable[LocalReplica]) -> None:
        for each in LifecycleState:
            self.state.labels(state=each.name.lower()).set(1 if each is state else 0)
        self.fenced.set(0 if state is LifecycleState.RUNNING else 1)
        self.epoch.set(broker_epoch)
        self.metadata_offset.set(applied_offset)
        self.metadata_hw.set(high_watermark)
        self.metadata_lag.set(max(0, high_watermark - 1 - applied_offset))
        self.reconciled_offset.set(reconciled_offset)
        counts = dict.fromkeys(ReplicaRole, 0)
        for replica in replicas:
            counts[replica.role] += 1
        for role, count in counts.items():
            self.replicas.labels(role=role.value).set(count)

    def reconciled(self, kind: str, leaders: int, followers: int, deletes: int,
                   seconds: float) -> None:
        self.reconcile_actions.labels(action="leader").inc(leaders)
        self.reconcile_actions.labels(action="follower").inc(followers)
        self.reconcile_actions.labels(action="delete").inc(deletes)
        self.reconcile_time.labels(kind=kind).observe(seconds)
