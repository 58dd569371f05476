"""Who may produce and consume: the data service over mutual TLS with the authorizer
on, deciding from the ACLs of the broker's metadata image (as a broker daemon does)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica import data_pb2_grpc as dpb_grpc
from broker_agent.replica.config import DataPlaneConfig
from controller import rpc
from controller.records.domain import PartitionRegistration
from controller.security.acl import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from controller.security.authorizer import AuthorizerConfig
from controller.security.tls import TlsCredentials
from tests.support.data_plane import TOPIC, Broker, image_of, publish
from tests.support.pki import TestPki
from tests.unit.broker_agent.test_replica_manager import batch_of

ALICE = "User:alice"


def allow(principal: str, operation: Operation, on_topic: bool = True) -> AclBinding:
    if on_topic:
        return AclBinding(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, principal, "*",
                          operation, Permission.ALLOW)
    return AclBinding(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, PatternType.LITERAL,
                      principal, "*", operation, Permission.ALLOW)


def test_produce_and_fetch_need_their_acls(tmp_path: Path) -> None:
    pki = TestPki(tmp_path / "pki")

    async def main() -> None:
        config = DataPlaneConfig(replica_fetch_wait_ms=100)
        authorizer = AuthorizerConfig(super_users=frozenset({"User:admin"}))
        brokers = [Broker(b, tmp_path / f"b{b}", config, pki.credentials(f"broker-{b}"),
                          authorizer) for b in (1, 2)]
        for broker in brokers:
            await broker.start()
        try:
            part = PartitionRegistration((1, 2), (1, 2), leader=1)
            followers_may = [allow(f"User:broker-{b}", Operation.CLUSTER_ACTION, False)
                             for b in (1, 2)]
            await publish(brokers, image_of(brokers, {0: part}, offset=1, acls=followers_may))
            alice = pki.credentials("alice")
            denied = await asyncio.to_thread(calls, brokers[0].address, alice, False)
            assert denied == {"produce": "TOPIC_AUTHORIZATION_FAILED",
                              "fetch": "TOPIC_AUTHORIZATION_FAILED",
                              "offsets": "TOPIC_AUTHORIZATION_FAILED",
                              "follower": "TOPIC_AUTHORIZATION_FAILED"}
            assert brokers[0].manager.partitions[("T-orders", 0)].log_end_offset == 0
            await publish(brokers, image_of(brokers, {0: part}, offset=2, acls=[
                *followers_may, allow(ALICE, Operation.WRITE), allow(ALICE, Operation.READ)]))
            allowed = await asyncio.to_thread(calls, brokers[0].address, alice, True)
            # READ implies DESCRIBE (Kafka's rule); a follower's fetch stays refused.
            assert allowed == {"produce": "DATA_ERROR_NONE", "fetch": "DATA_ERROR_NONE",
                               "offsets": "DATA_ERROR_NONE",
                               "follower": "TOPIC_AUTHORIZATION_FAILED"}
            admin = await asyncio.to_thread(calls, brokers[0].address,
                                            pki.credentials("admin"), False)
            assert admin["produce"] == "DATA_ERROR_NONE"  # a super user
            # CLUSTER_ACTION is not enough to fetch as broker 2: the certificate must
            # name broker 2 (tls.broker_id_pattern), as at the controllers.
            await publish(brokers, image_of(brokers, {0: part}, offset=3, acls=[
                *followers_may, allow(ALICE, Operation.CLUSTER_ACTION, False)]))
            posing = await asyncio.to_thread(calls, brokers[0].address, alice, False)
            assert posing["follower"] == "TOPIC_AUTHORIZATION_FAILED"
            assert posing["produce"] == "TOPIC_AUTHORIZATION_FAILED"
        finally:
            for broker in brokers:
                await broker.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def calls(address: str, tls: TlsCredentials, expect_records: bool) -> dict[str, str]:
    """Each kind of call as `tls`'s principal: the DataError names it got."""
    channel = rpc.create_sync_channel(address, tls=tls)
    try:
        stub = dpb_grpc.PartitionDataStub(channel)
        produced = stub.Produce(dpb.ProduceRequest(topic=TOPIC, partition=0, acks=-1,
                                                   batch=batch_of("x"), producer_id=-1,
                                                   timeout_ms=30_000), timeout=40)
        fetched = stub.Fetch(dpb.FetchRequest(replica_id=-1, partitions=[
            dpb.FetchPartition(topic=TOPIC, partition=0, fetch_offset=0)]), timeout=10)
        if expect_records:
            assert fetched.partitions[0].records
        offsets = stub.ListOffsets(dpb.ListOffsetsRequest(topic=TOPIC, partition=0), timeout=10)
        follower = stub.Fetch(dpb.FetchRequest(replica_id=2, partitions=[
            dpb.FetchPartition(topic_id="T-orders", partition=0, fetch_offset=0)]), timeout=10)
        name = dpb.DataError.Name
        return {"produce": name(produced.error), "fetch": name(fetched.partitions[0].error),
                "offsets": name(offsets.error), "follower": name(follower.error)}
    finally:
        channel.close()
