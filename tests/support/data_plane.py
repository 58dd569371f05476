"""In-process data-plane harness: `ReplicaManager`s with real gRPC servers on
loopback, driven by hand-made metadata images (no controller, no Raft).

For the manager's and client's unit tests; the real processes are tested in
tests/integration/test_data_plane.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import attrs

from broker_agent.image import MetadataImage, topic_image
from broker_agent.pmap import PersistentMap
from broker_agent.reconciler import BecomeFollower, BecomeLeader, desired_replica
from broker_agent.replica.config import DataPlaneConfig
from broker_agent.replica.isr_reports import AlterPartitionSender
from broker_agent.replica.manager import ReplicaManager
from broker_agent.replica.service import add_data_service
from controller import rpc
from controller.api import broker_pb2 as bpb
from controller.records.domain import BrokerRegistration, Listener, PartitionRegistration
from controller.records.metadata_pb2 import CONFIG_RESOURCE_TYPE_TOPIC
from controller.security.access import Access
from controller.security.acl import AclBinding
from controller.security.authorizer import AuthorizerConfig, StandardAuthorizer
from controller.security.identity import UNBOUND, NodeIdentities
from controller.security.tls import TlsCredentials

TOPIC, TOPIC_ID = "orders", "T-orders"


class Broker:
    """One broker's data plane; with `tls` (its credentials) and `authorizer`, the
    service is mutual TLS and authorizes over the image's ACLs, as a daemon's is."""

    def __init__(self, broker_id: int, root: Path, config: DataPlaneConfig,
                 tls: TlsCredentials | None = None,
                 authorizer: AuthorizerConfig | None = None) -> None:
        self.broker_id = broker_id
        self.root = root
        self.config = config
        self.manager = ReplicaManager(broker_id, root, config, tls=tls,
                                      broker_epoch=lambda: 10 + broker_id)
        self.server = rpc.create_server()
        access = Access(authorizer=None if authorizer is None else
                        StandardAuthorizer(authorizer, self.manager),
                        identities=UNBOUND if tls is None else NodeIdentities())
        add_data_service(self.server, self.manager, access)
        self.port = rpc.bind(self.server, "127.0.0.1:0", tls)
        self.running = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        await self.manager.start()
        await self.server.start()
        self.running = True

    async def stop(self) -> None:
        if self.running:
            self.running = False
            await self.manager.stop()
            await self.server.stop(grace=None)


def image_of(brokers: Sequence[Broker], partitions: dict[int, PartitionRegistration],
             offset: int = 1, configs: dict[str, str] | None = None,
             acls: Sequence[AclBinding] = ()) -> MetadataImage:
    registrations = {b.broker_id: BrokerRegistration(
        b.broker_id, f"inc-{b.broker_id}", 10 + b.broker_id,
        (Listener("PLAINTEXT", "127.0.0.1", b.port, "PLAINTEXT"),), fenced=False)
        for b in brokers}
    return MetadataImage(offset,
                         PersistentMap.from_mapping({TOPIC_ID: topic_image(
                             TOPIC, TOPIC_ID, partitions.items())}),
                         PersistentMap.from_mapping({TOPIC: TOPIC_ID}),
                         PersistentMap.from_mapping(registrations),
                         PersistentMap.from_mapping(
                             {(int(CONFIG_RESOURCE_TYPE_TOPIC), TOPIC): configs or {}}),
                         PersistentMap(),
                         PersistentMap.from_mapping({f"acl-{i}": b for i, b in enumerate(acls)}),
                         offset)


async def publish(brokers: Sequence[Broker], image: MetadataImage) -> None:
    """Hand every broker its instructions for `image` (as the agent would), from a
    worker thread as the agent does."""
    for broker in brokers:
        instructions = []
        for topic, index, part in image.iter_partitions():
            want = desired_replica(topic, index, part, broker.broker_id)
            if want is not None:
                instructions.append(BecomeLeader(want) if part.leader == broker.broker_id
                                    else BecomeFollower(want))
        await asyncio.to_thread(broker.manager.apply, instructions, image)


class FakeController:
    """Answers the leaders' AlterPartition like the controller would (accepts a report
    at the current epochs and publishes the new ISR as the next image), so the
    brokers' side of ISR changes runs without Raft. Counts what it saw."""

    def __init__(self, brokers: Sequence[Broker], part: PartitionRegistration) -> None:
        self.brokers = list(brokers)
        self.part = part
        self.offset = 1
        self.reports: list[tuple[int, ...]] = []
        for broker in brokers:
            broker.manager.isr.sender = self._sender(broker.broker_id)

    def image(self) -> MetadataImage:
        return image_of(self.brokers, {0: self.part}, offset=self.offset)

    async def publish(self, brokers: Sequence[Broker] | None = None) -> None:
        await publish(self.brokers if brokers is None else brokers, self.image())

    def _sender(self, broker_id: int) -> AlterPartitionSender:
        async def send(request: bpb.AlterPartitionRequest) -> bpb.AlterPartitionResponse:
            out = bpb.AlterPartitionResponse(error=bpb.Error(code="NONE"))
            for item in request.items:
                isr = tuple(m.broker_id for m in item.new_isr)
                if broker_id != self.part.leader or \
                        item.leader_epoch != self.part.leader_epoch or \
                        item.partition_epoch != self.part.partition_epoch:
                    out.results.add(topic_id=item.topic_id, partition=item.partition,
                                    error=bpb.Error(code="INVALID_UPDATE_VERSION"))
                    continue
                self.reports.append(isr)
                self.part = attrs.evolve(self.part, isr=isr,
                                         partition_epoch=self.part.partition_epoch + 1)
                self.offset += 1
                out.results.add(topic_id=item.topic_id, partition=item.partition,
                                error=bpb.Error(code="NONE"))
            await self.publish([b for b in self.brokers if b.running])
            return out

        return send
