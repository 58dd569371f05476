"""A tiny in-memory "controller" for manager tests: generate, replay at increasing
offsets, snapshot the registry at each batch's last offset, keep the log."""

from __future__ import annotations

import random
from typing import Any, TypeVar

from controller.metadata import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ControllerResult,
    CreatableTopic,
    FeatureControlManager,
    MetadataState,
)
from controller.metadata.levels import LATEST_METADATA_VERSION, Feature
from controller.records import MetadataRecord, decode_record, encode_record
from controller.records.domain import Listener

R = TypeVar("R")

CLUSTER_ID = "test-cluster"
SESSION_MS = 9_000


def new_state(seed: int = 0) -> MetadataState:
    return MetadataState(
        cluster_id=CLUSTER_ID, rng=random.Random(seed), session_timeout_ms=SESSION_MS
    )


# The last level whose ISR grows back on heartbeats (tests of that rule pin it).
HEARTBEAT_ISR_LEVEL = Feature.REPLICA_REPORTED_ISR.level - 1


class Harness:
    def __init__(self, seed: int = 0, *, bootstrap: bool = True,
                 metadata_version: int = LATEST_METADATA_VERSION) -> None:
        self.state = new_state(seed)
        self.log: list[MetadataRecord] = []
        self.next_offset = 0
        self.now_ms = 0
        # The image after the last replay: generation must not have changed it.
        self._image = self.state.to_image()
        if bootstrap:
            self.apply(ControllerResult(
                FeatureControlManager.bootstrap_records(metadata_version), None))

    # -- the write path -----------------------------------------------------------------

    def apply(self, result: ControllerResult[R]) -> R:
        assert self.state.to_image() == self._image, "generating records changed the state"
        if result.given_bytes is not None:
            # Bytes a manager wrote itself are exactly the records' encoding.
            assert list(result.given_bytes) == [encode_record(r) for r in result.records]
        for record in result.records:
            # Every record must survive the wire format.
            record = decode_record(encode_record(record))
            self.state.replay(record, self.next_offset)
            self.log.append(record)
            self.next_offset += 1
        if result.records:
            self.state.registry.create_snapshot(self.next_offset - 1)
        self._image = self.state.to_image()
        return result.response

    def resync(self) -> None:
        """After changing the state outside ``apply`` (a revert)."""
        self._image = self.state.to_image()

    @property
    def committed(self) -> int:
        return self.next_offset - 1

    # -- brokers -----------------------------------------------------------------------

    def register(
        self, broker_id: int, *, rack: str | None = None, incarnation: str | None = None
    ) -> int:
        request = BrokerRegistrationRequest(
            broker_id=broker_id,
            incarnation_id=incarnation or f"inc-{broker_id}-{self.next_offset}",
            cluster_id=CLUSTER_ID,
            listeners=(Listener("PLAINTEXT", "localhost", 9000 + broker_id, "PLAINTEXT"),),
            rack=rack,
        )
        reply = self.apply(
            self.state.cluster.register_broker(
                request, next_offset=self.next_offset, now_ms=self.now_ms
            )
        )
        assert reply.error.ok, reply.error
        return reply.broker_epoch

    def heartbeat(self, broker_id: int, **kwargs: Any) -> Any:
        broker = self.state.cluster.broker(broker_id)
        assert broker is not None
        kwargs.setdefault("metadata_offset", self.committed)
        kwargs.setdefault("broker_epoch", broker.broker_epoch)
        request = BrokerHeartbeatRequest(broker_id=broker_id, **kwargs)
        return self.apply(self.state.cluster.process_heartbeat(request, now_ms=self.now_ms))

    def add_brokers(self, ids: list[int], racks: dict[int, str] | None = None) -> None:
        for broker_id in ids:
            self.register(broker_id, rack=(racks or {}).get(broker_id))
        for broker_id in ids:
            reply = self.heartbeat(broker_id)
            assert reply.error.ok and not reply.is_fenced, reply

    def create(
        self, name: str, partitions: int | None = None, rf: int | None = None, **kwargs: Any
    ) -> Any:
        # With explicit assignments the counts must be left to them (-1).
        default = -1 if kwargs.get("assignments") else 1
        partitions = default if partitions is None else partitions
        rf = default if rf is None else rf
        result = self.state.replication.create_topics(
            [CreatableTopic(name, partitions, rf, **kwargs)]
        )
        (response,) = self.apply(result)
        assert response.error.ok, response.error
        return response

    # -- checks ------------------------------------------------------------------------

    def part(self, topic: str, partition: int = 0) -> Any:
        tid = self.state.replication.topic_id(topic)
        assert tid is not None
        return self.state.replication.partition(tid, partition)

    def check(self) -> None:
        """Invariants hold, indexes agree, and the log and the snapshot both rebuild
        an equal state in a fresh MetadataState."""
        assert self.state.check_invariants() == []
        self.state.replication.check_indexes()
        image = self.state.to_image()
        replayed = new_state(99)
        replayed.replay_batch(self.log, 0)
        assert replayed.to_image() == image
        from_snapshot = new_state(98)
        for record in self.state.snapshot_records():
            from_snapshot.replay(record, self.committed)
        assert from_snapshot.to_image() == image
        assert from_snapshot.snapshot_records() == self.state.snapshot_records()
        # The controller's replay: from the bytes (the PartitionRecord fast path).
        from_bytes = new_state(97)
        from_bytes.replay_encoded([encode_record(r) for r in self.log], 0)
        assert from_bytes.to_image() == image
        from_bytes.replication.check_indexes()
        loaded = new_state(96)
        loaded.replay_encoded([encode_record(r) for r in self.state.snapshot_records()],
                              self.committed, step=0)
        assert loaded.to_image() == image
        loaded.replication.check_indexes()
