"""In-process data-plane harness: `ReplicaManager`s with real gRPC servers on
loopback, driven by hand-made metadata images (no controller, no Raft).

For the manager's and client's unit tests; the real processes are tested in
tests/integration/test_data_plane.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from broker_agent.image import MetadataImage, topic_image
from broker_agent.pmap import PersistentMap
from broker_agent.reconciler import BecomeFollower, BecomeLeader, desired_replica
from broker_agent.replica.config import DataPlaneConfig
from broker_agent.replica.manager import ReplicaManager
from broker_agent.replica.service import add_data_service
from controller import rpc
from controller.records.domain import BrokerRegistration, Listener, PartitionRegistration
from controller.records.metadata_pb2 import CONFIG_RESOURCE_TYPE_TOPIC

TOPIC, TOPIC_ID = "orders", "T-orders"


class Broker:
    def __init__(self, broker_id: int, root: Path, config: DataPlaneConfig) -> None:
        self.broker_id = broker_id
        self.root = root
        self.config = config
        self.manager = ReplicaManager(broker_id, root, config)
        self.server = rpc.create_server()
        add_data_service(self.server, self.manager)
        self.port = rpc.bind(self.server, "127.0.0.1:0", None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        await self.manager.start()
        await self.server.start()

    async def stop(self) -> None:
        await self.manager.stop()
        await self.server.stop(grace=None)


def image_of(brokers: Sequence[Broker], partitions: dict[int, PartitionRegistration],
             offset: int = 1, configs: dict[str, str] | None = None) -> MetadataImage:
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
                         PersistentMap())


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
