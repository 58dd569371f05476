"""Prometheus metrics of one controller, on its own registry (several controllers
can live in one test process). Every metric is documented in docs/operations.md
("Metrics"); a test checks the two lists agree.

Values are set on the controller's loop (the timeline is not thread-safe); the
HTTP exporter thread only reads the metric objects, which are thread-safe. Gauges
of the Raft node are read from the driver's status on every controller tick; those
of the metadata state (brokers, topics, partitions) at the committed offset, about
once a second. Counters that the driver or the snapshotter keep as plain numbers are
advanced by the difference since the last tick.
"""

from __future__ import annotations

import attrs
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

from controller.metadata import MetadataState
from controller.metrics_common import LATENCY_BUCKETS_S, serve_metrics, standard_registry
from controller.quorum.contracts import DriverStatus

_ELECTION_BUCKETS_S = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
RAFT_STATES = ("leader", "candidate", "prospective", "follower", "resigned", "observer")


@attrs.frozen
class StateCounts:
    active_brokers: int
    fenced_brokers: int
    topics: int
    partitions: int
    offline_partitions: int
    under_replicated_partitions: int
    preferred_imbalance: int

    @classmethod
    def read(cls, state: MetadataState, epoch: int) -> StateCounts:
        brokers = state.cluster.brokers(epoch)
        fenced = sum(1 for b in brokers if b.fenced)
        replication = state.replication
        return cls(len(brokers) - fenced, fenced, len(replication.list_topics(epoch)),
                   replication.total_partition_count(epoch),
                   replication.offline_partition_count(epoch),
                   replication.under_replicated_partition_count(epoch),
                   replication.preferred_imbalance_count(epoch))


class _Delta:
    """Advance a Counter to a running total kept elsewhere as a plain number."""

    def __init__(self, counter: Counter) -> None:
        self.counter, self.seen = counter, 0.0

    def to(self, total: float) -> None:
        if total > self.seen:
            self.counter.inc(total - self.seen)
        self.seen = max(self.seen, total)


class ControllerMetrics:
    def __init__(self, node_id: int, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else standard_registry()
        r = self.registry
        self.node_id = node_id
        # ------------------------------------------------------------- controller
        self.active = Gauge("metakraft_controller_active",
                            "1 on the active controller, else 0 (sum over the quorum: 1).",
                            registry=r)
        self.queue_time = Histogram(
            "metakraft_controller_event_queue_time_seconds",
            "From queueing a request to the controller running it, by request type.",
            ["method"], registry=r, buckets=LATENCY_BUCKETS_S)
        self.processing_time = Histogram(
            "metakraft_controller_event_queue_processing_time_seconds",
            "Time the controller's loop spent running a request, by request type.",
            ["method"], registry=r, buckets=LATENCY_BUCKETS_S)
        self.queue_depth = Gauge("metakraft_controller_event_queue_depth",
                                 "Requests queued or parked for the controller.", registry=r)
        self.waiting = Gauge("metakraft_controller_purgatory_size",
                             "Answers waiting for their batch to commit.", registry=r)
        self.last_applied = Gauge("metakraft_controller_last_applied_offset",
                                  "Last offset replayed into the state (-1: none).", registry=r)
        self.last_committed = Gauge("metakraft_controller_last_committed_offset",
                                    "Last committed offset (-1: none).", registry=r)
        self.last_applied_time = Gauge(
            "metakraft_controller_last_applied_record_timestamp_seconds",
            "Append time (Unix seconds) of the last committed batch replayed (0: none).",
            registry=r)
        self.last_applied_lag = Gauge(
            "metakraft_controller_last_applied_record_lag_seconds",
            "Now minus the append time of the last committed batch replayed.", registry=r)
        self.leader_changes = Counter("metakraft_controller_leader_changes",
                                      "Leaders this node has seen take over.", registry=r)
        self.brokers = Gauge("metakraft_controller_brokers", "Registered brokers by state.",
                             ["state"], registry=r)
        self.topics = Gauge("metakraft_controller_topics", "Topics.", registry=r)
        self.partitions = Gauge("metakraft_controller_partitions", "Partitions.", registry=r)
        self.offline_partitions = Gauge("metakraft_controller_offline_partitions",
                                        "Partitions without a leader.", registry=r)
        self.under_replicated = Gauge(
            "metakraft_controller_under_replicated_partitions",
            "Partitions with a replica out of the ISR.", registry=r)
        self.preferred_imbalance = Gauge(
            "metakraft_controller_preferred_replica_imbalance",
            "Partitions led by another replica than their preferred (first) one.", registry=r)
        self.timed_out_heartbeats = _Delta(Counter(
            "metakraft_controller_timed_out_broker_heartbeats",
            "Brokers fenced because their session timed out (no heartbeat).", registry=r))
        self.snapshots = _Delta(Counter(
            "metakraft_controller_snapshots_written",
            "Snapshots this controller wrote since it started.", registry=r))
        # ------------------------------------------------------------------- raft
        self.raft_state = Gauge("metakraft_raft_state",
                                "1 for this node's current Raft state, 0 for the others.",
                                ["state"], registry=r)
        self.raft_epoch = Gauge("metakraft_raft_epoch", "Current Raft epoch.", registry=r)
        self.raft_leader = Gauge("metakraft_raft_leader_id",
                                 "Leader of the current epoch (-1: unknown).", registry=r)
        self.raft_hw = Gauge("metakraft_raft_high_watermark",
                             "Committed end offset this node knows.", registry=r)
        self.raft_end = Gauge("metakraft_raft_log_end_offset",
                              "End offset of this node's log (committed or not).", registry=r)
        self.raft_start = Gauge("metakraft_raft_log_start_offset",
                                "First offset of the log (the newest snapshot's end).",
                                registry=r)
        self.raft_flushed = Gauge("metakraft_raft_log_flushed_offset",
                                  "End offset of what this node has fsynced.", registry=r)
        self.raft_voters = Gauge("metakraft_raft_voters", "Voters in this node's latest set.",
                                 registry=r)
        self.raft_log_repair = Gauge(
            "metakraft_raft_log_repair_pending",
            "1 while this node repairs a damaged log (it neither votes nor runs until it "
            "re-fetched the lost records), else 0.", registry=r)
        self.raft_replica_lag = Gauge(
            "metakraft_raft_replica_lag_offsets",
            "On the leader: its log end minus each replica's fetched end.", ["replica"],
            registry=r)
        self.commit_latency = Histogram(
            "metakraft_raft_commit_latency_seconds",
            "From appending a request's batch on the leader to its commit.",
            registry=r, buckets=LATENCY_BUCKETS_S)
        self.election_latency = Histogram(
            "metakraft_raft_election_latency_seconds",
            "From losing the leader to knowing the next one (as seen by this node).",
            registry=r, buckets=_ELECTION_BUCKETS_S)
        self.fetches_served = _Delta(Counter(
            "metakraft_raft_fetch_requests_served",
            "Fetch requests this node answered as leader.", registry=r))
        self.records_fetched = _Delta(Counter(
            "metakraft_raft_fetched_records",
            "Records this node stored from fetch answers (as a follower or observer).",
            registry=r))
        self.flushes = _Delta(Counter("metakraft_raft_log_flushes",
                                      "fsyncs of the log (one per group commit).", registry=r))
        self.flush_time = _Delta(Counter("metakraft_raft_log_flush_seconds",
                                         "Time spent in log fsyncs.", registry=r))
        self.ticks = _Delta(Counter(
            "metakraft_raft_ticks",
            "Timer turns of the Raft node (taken when a timer is due: a few a second "
            "when idle).", registry=r))
        self._lag_replicas: set[str] = set()

    def set_counts(self, counts: StateCounts) -> None:
        self.brokers.labels(state="active").set(counts.active_brokers)
        self.brokers.labels(state="fenced").set(counts.fenced_brokers)
        self.topics.set(counts.topics)
        self.partitions.set(counts.partitions)
        self.offline_partitions.set(counts.offline_partitions)
        self.under_replicated.set(counts.under_replicated_partitions)
        self.preferred_imbalance.set(counts.preferred_imbalance)

    def set_raft(self, status: DriverStatus) -> None:
        for state in RAFT_STATES:
            self.raft_state.labels(state=state).set(1 if status.role == state else 0)
        self.raft_epoch.set(status.epoch)
        self.raft_leader.set(-1 if status.leader_id is None else status.leader_id)
        self.raft_hw.set(status.high_watermark)
        self.raft_end.set(status.end_offset)
        self.raft_start.set(status.log_start_offset)
        self.raft_flushed.set(status.flushed_offset)
        self.raft_voters.set(len(status.voters))
        self.raft_log_repair.set(0 if status.repair_to_offset is None else 1)
        self.fetches_served.to(status.fetches_served)
        self.records_fetched.to(status.records_fetched)
        self.flushes.to(status.flushes)
        self.flush_time.to(status.flush_seconds)
        self.ticks.to(status.ticks)
        lagging = set()
        for replica in status.replicas:
            if replica.replica_id == status.node_id:
                continue
            name = str(replica.replica_id)
            lagging.add(name)
            fetched = max(replica.log_end_offset, 0)
            self.raft_replica_lag.labels(replica=name).set(max(0, status.end_offset - fetched))
        for gone in self._lag_replicas - lagging:
            self.raft_replica_lag.remove(gone)  # not leading, or the replica left
        self._lag_replicas = lagging

    def serve(self, address: str, port: int) -> int:
        return serve_metrics(self.registry, address, port)
