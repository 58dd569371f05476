"""Embedding the broker agent with another data plane: a `ReplicaBackend` of its own.

The example is what a system with its own storage would write (docs/architecture.md,
"Embedding the broker agent"): it keeps, per partition it hosts, whether it leads and
at which epoch, and refuses writes it does not lead. The agent drives it from the
committed metadata exactly as it drives the built-in partition logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from broker_agent.agent import BrokerAgent
from broker_agent.backend import ReplicaBackend, ReplicaReport
from broker_agent.delta import ImageChanges
from broker_agent.image import MetadataImage, PartitionKey
from broker_agent.local_state import LocalPartitionStore
from broker_agent.reconciler import (
    BecomeFollower,
    BecomeLeader,
    DeleteReplica,
    Instruction,
    LocalReplica,
    ReplicaRole,
)
from controller.records.domain import PartitionRegistration
from tests.support.data_plane import TOPIC_ID, image_of


class LeaseTable:
    """A toy data plane: who may write which partition, as of which leader epoch."""

    def __init__(self) -> None:
        self.leading: dict[PartitionKey, int] = {}
        self.following: dict[PartitionKey, int] = {}
        self.calls: list[str] = []

    def apply(self, instructions: Sequence[Instruction], image: MetadataImage) -> None:
        self.calls.append(f"apply {len(instructions)} @{image.offset}")
        for instruction in instructions:
            if isinstance(instruction, DeleteReplica):
                key = (instruction.topic_id, instruction.partition)
                self.leading.pop(key, None)
                self.following.pop(key, None)
            elif isinstance(instruction, BecomeLeader):
                r = instruction.replica
                self.following.pop((r.topic_id, r.partition), None)
                self.leading[(r.topic_id, r.partition)] = r.leader_epoch
            elif isinstance(instruction, BecomeFollower):
                r = instruction.replica
                self.leading.pop((r.topic_id, r.partition), None)
                self.following[(r.topic_id, r.partition)] = r.leader

    def apply_full(self, replicas: Sequence[LocalReplica], image: MetadataImage) -> None:
        self.calls.append(f"full {len(replicas)} @{image.offset}")
        self.leading.clear()
        self.following.clear()
        self.apply([BecomeLeader(r) if r.role is ReplicaRole.LEADER else BecomeFollower(r)
                    for r in replicas], image)

    def reports(self) -> list[ReplicaReport]:
        return [ReplicaReport("t", key[0], key[1], ReplicaRole.LEADER, epoch, 0, 0, 0)
                for key, epoch in self.leading.items()]

    def may_write(self, key: PartitionKey, epoch: int) -> bool:
        return self.leading.get(key) == epoch


def test_the_agent_drives_a_backend_of_another_system(tmp_path: Path) -> None:
    backend = LeaseTable()
    seam: ReplicaBackend = backend  # what the agent needs, checked by the type checker
    agent = BrokerAgent(1, LocalPartitionStore(tmp_path), backend=seam)
    try:
        first = image_of([], {0: PartitionRegistration((1, 2), (1, 2), leader=1, leader_epoch=4),
                              1: PartitionRegistration((2, 1), (2, 1), leader=2)}, offset=10)
        agent.publish_full(first)
        agent.flush(10)
        assert backend.may_write((TOPIC_ID, 0), 4)
        assert backend.following == {(TOPIC_ID, 1): 2}
        # Leadership of partition 0 moves to broker 2 (epoch 5): this broker follows.
        second = image_of([], {0: PartitionRegistration((1, 2), (2,), leader=2, leader_epoch=5,
                                                        partition_epoch=1),
                               1: PartitionRegistration((2, 1), (2, 1), leader=2)}, offset=11)
        agent.publish_delta(first, second, ImageChanges(frozenset({(TOPIC_ID, 0)}),
                                                        frozenset(), False))
        agent.flush(10)
        assert not backend.may_write((TOPIC_ID, 0), 4)
        assert backend.following == {(TOPIC_ID, 0): 2, (TOPIC_ID, 1): 2}
        assert backend.calls == ["full 2 @10", "apply 2 @10", "apply 1 @11"]
        assert agent.failure is None and agent.reconciled_offset == 11
    finally:
        agent.close()


def test_a_failing_backend_stops_the_agent_rather_than_diverge(tmp_path: Path) -> None:
    class Broken(LeaseTable):
        def apply_full(self, replicas: Sequence[LocalReplica], image: MetadataImage) -> None:
            raise OSError("disk gone")

    agent = BrokerAgent(1, LocalPartitionStore(tmp_path), backend=Broken())
    try:
        agent.publish_full(image_of([], {0: PartitionRegistration((1,), (1,), leader=1)}))
        agent.flush(10)
        assert isinstance(agent.failure, OSError)
        assert agent.reconciled_offset == -1
    finally:
        agent.close()
