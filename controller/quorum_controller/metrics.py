"""Prometheus metrics of one controller, on its own registry (several controllers
can live in one test process).

Values are set on the controller's loop (the timeline is not thread-safe); the
HTTP exporter thread only reads the metric objects, which are thread-safe. The
state gauges (brokers, topics, partitions) are read at the committed offset, about
once a second.
"""

from __future__ import annotations

import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from controller.metadata import MetadataState

_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
                      5.0)


@attrs.frozen
class StateCounts:
    active_brokers: int
    fenced_brokers: int
    topics: int
    partitions: int
    offline_partitions: int

    @classmethod
    def read(cls, state: MetadataState, epoch: int) -> StateCounts:
        brokers = state.cluster.brokers(epoch)
        fenced = sum(1 for b in brokers if b.fenced)
        replication = state.replication
        return cls(len(brokers) - fenced, fenced, len(replication.list_topics(epoch)),
                   replication.total_partition_count(epoch),
                   replication.offline_partition_count(epoch))


class ControllerMetrics:
    def __init__(self, node_id: int, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.node_id = node_id
        self.commit_latency = Histogram(
            "metakraft_controller_commit_latency_seconds",
            "From appending a request's batch to its commit (the answer leaves then).",
            registry=r, buckets=_LATENCY_BUCKETS_S)
        self.queue_time = Histogram(
            "metakraft_controller_event_queue_time_seconds",
            "From queueing a request to the controller running it.",
            registry=r, buckets=_LATENCY_BUCKETS_S)
        self.queue_depth = Gauge("metakraft_controller_event_queue_depth",
                                 "Requests queued or parked for the controller.", registry=r)
        self.waiting = Gauge("metakraft_controller_purgatory_size",
                             "Answers waiting for their batch to commit.", registry=r)
        self.last_applied = Gauge("metakraft_controller_last_applied_offset",
                                  "Last offset replayed into the state (-1: none).", registry=r)
        self.last_committed = Gauge("metakraft_controller_last_committed_offset",
                                    "Last committed offset (-1: none).", registry=r)
        self.leader_changes = Counter("metakraft_controller_leader_changes",
                                      "Leaders this node has seen take over.", registry=r)
        self.active = Gauge("metakraft_controller_active",
                            "1 on the active controller, else 0.", registry=r)
        self.brokers = Gauge("metakraft_controller_brokers", "Registered brokers by state.",
                             ["state"], registry=r)
        self.topics = Gauge("metakraft_controller_topics", "Topics.", registry=r)
        self.partitions = Gauge("metakraft_controller_partitions", "Partitions.", registry=r)
        self.offline_partitions = Gauge("metakraft_controller_offline_partitions",
                                        "Partitions without a leader.", registry=r)
        self.snapshots = Gauge("metakraft_controller_snapshots_written",
                               "Snapshots this controller wrote since it started.", registry=r)

    def set_counts(self, counts: StateCounts) -> None:
        self.brokers.labels(state="active").set(counts.active_brokers)
        self.brokers.labels(state="fenced").set(counts.fenced_brokers)
        self.topics.set(counts.topics)
        self.partitions.set(counts.partitions)
        self.offline_partitions.set(counts.offline_partitions)

    def serve(self, address: str, port: int) -> int:
        """Start the HTTP exporter (`/metrics`) in a thread; the bound port."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        return int(server.server_port)
