"""The built-in data plane in one process: managers with real gRPC servers and
real partition logs, metadata handed over by hand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.config import DataPlaneConfig
from broker_agent.replica.records import (
    DataRecord,
    decode_values,
    encode_produce_batch,
)
from controller.records.domain import PartitionRegistration
from tests.support.data_plane import TOPIC, Broker, FakeController, image_of, publish


def batch_of(*values: str) -> bytes:
    return encode_produce_batch([DataRecord(None, v.encode()) for v in values])


def with_brokers(tmp_path: Path, body: Callable[[list[Broker]], Awaitable[None]],
                 count: int = 3) -> None:
    async def main() -> None:
        config = DataPlaneConfig(replica_fetch_wait_ms=200)
        started = [Broker(i, tmp_path / f"b{i}", config) for i in range(1, count + 1)]
        for broker in started:
            await broker.start()
        try:
            await asyncio.wait_for(body(started), 60)
        finally:
            for broker in started:
                await broker.stop()

    asyncio.run(main())


async def wait_until(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def test_acks_all_waits_for_every_in_sync_replica(tmp_path: Path) -> None:
    with_brokers(tmp_path, acks_all_waits_for_every_in_sync_replica)


async def acks_all_waits_for_every_in_sync_replica(brokers: list[Broker]) -> None:
    part = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1, leader_epoch=3)
    await publish(brokers, image_of(brokers, {0: part}))
    leader = brokers[0].manager
    answer = await asyncio.wait_for(leader.produce(dpb.ProduceRequest(
        topic=TOPIC, partition=0, acks=-1, batch=batch_of("a", "b"), producer_id=-1,
        timeout_ms=10_000), "User:test", "ipv4:127.0.0.1:1"), 15)
    assert answer.error == dpb.DATA_ERROR_NONE, answer.message
    assert answer.base_offset == 0
    for broker in brokers:
        replica = broker.manager.partitions[("T-orders", 0)]
        # Acknowledged means durable on every in-sync replica.
        assert replica.log_end_offset == 2 and replica.flushed_offset == 2
        assert replica.log is not None and replica.log.last_epoch == 3
    assert leader.partitions[("T-orders", 0)].high_watermark == 2


def produce(broker: Broker, *values: str, acks: int = -1, epoch: int | None = None,
            producer: tuple[int, int] | None = None) -> Awaitable[dpb.ProduceResponse]:
    request = dpb.ProduceRequest(topic=TOPIC, partition=0, acks=acks, batch=batch_of(*values),
                                 producer_id=-1 if producer is None else producer[0],
                                 base_sequence=0 if producer is None else producer[1],
                                 timeout_ms=10_000)
    if epoch is not None:
        request.leader_epoch = epoch
    return broker.manager.produce(request, "User:test", "ipv4:127.0.0.1:1")


def log_values(broker: Broker) -> list[str]:
    replica = broker.manager.partitions[("T-orders", 0)]
    if replica.log is None:
        return []
    return [v.decode() for v in decode_values(b"".join(replica.log.read(0)))]


def test_refusals_name_the_leader_and_change_nothing(tmp_path: Path) -> None:
    async def body(brokers: list[Broker]) -> None:
        part = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1, leader_epoch=3)
        await publish(brokers, image_of(brokers, {0: part}))
        follower = await produce(brokers[1], "x")
        assert follower.error == dpb.NOT_LEADER_OR_FOLLOWER
        assert (follower.leader_id, follower.leader_address, follower.leader_epoch) == \
            (1, brokers[0].address, 3)
        stale = await produce(brokers[0], "x", epoch=2)
        assert stale.error == dpb.FENCED_LEADER_EPOCH
        assert brokers[0].manager.refusals_fenced == 1
        ahead = await produce(brokers[0], "x", epoch=4)
        assert ahead.error == dpb.UNKNOWN_LEADER_EPOCH
        bad_acks = await produce(brokers[0], "x", acks=2)
        assert bad_acks.error == dpb.INVALID_RECORD
        unknown = await brokers[0].manager.produce(dpb.ProduceRequest(
            topic="nope", partition=0, acks=1, batch=batch_of("x"), producer_id=-1),
            "", "")
        assert unknown.error == dpb.UNKNOWN_TOPIC_OR_PARTITION
        negative = await brokers[0].manager.produce(dpb.ProduceRequest(
            topic=TOPIC, partition=-1, acks=1, batch=batch_of("x"), producer_id=-1), "", "")
        assert negative.error == dpb.UNKNOWN_TOPIC_OR_PARTITION
        corrupt = await brokers[0].manager.produce(dpb.ProduceRequest(
            topic=TOPIC, partition=0, acks=1, batch=batch_of("x")[:-2], producer_id=-1), "", "")
        assert corrupt.error == dpb.CORRUPT_MESSAGE
        assert all(log_values(b) == [] for b in brokers)

    with_brokers(tmp_path, body)


def test_min_insync_replicas_refuses_acks_all_and_nothing_else(tmp_path: Path) -> None:
    async def body(brokers: list[Broker]) -> None:
        part = PartitionRegistration((1, 2, 3), (1,), leader=1, leader_epoch=0)
        image = image_of(brokers, {0: part}, configs={"min.insync.replicas": "2"})
        await publish(brokers, image)
        refused = await produce(brokers[0], "x")
        assert refused.error == dpb.NOT_ENOUGH_REPLICAS, refused.message
        assert log_values(brokers[0]) == []
        one = await produce(brokers[0], "y", acks=1)
        assert one.error == dpb.DATA_ERROR_NONE and one.base_offset == 0
        assert brokers[0].manager.partitions[("T-orders", 0)].flushed_offset == 1

    with_brokers(tmp_path, body)


def test_a_new_leader_takes_over_and_the_old_one_drops_its_unreplicated_tail(
        tmp_path: Path) -> None:
    async def body(brokers: list[Broker]) -> None:
        one, two, three = brokers
        part = PartitionRegistration((1, 2, 3), (1, 2, 3), leader=1, leader_epoch=1)
        await publish(brokers, image_of(brokers, {0: part}))
        acked = await produce(one, "a", "b")
        assert acked.error == dpb.DATA_ERROR_NONE
        # Broker 1 is cut off (the others stop hearing from it): it alone gets a write
        # it cannot acknowledge with acks=all, but acks=1 stores it locally.
        await publish([two, three], image_of(brokers, {0: PartitionRegistration(
            (1, 2, 3), (2, 3), leader=2, leader_epoch=2)}, offset=2))
        zombie = await produce(one, "zombie", acks=1)
        assert zombie.error == dpb.DATA_ERROR_NONE
        assert (await produce(two, "c")).error == dpb.DATA_ERROR_NONE
        # Broker 1 learns of epoch 2 and follows: its tail goes, the leader's comes.
        await publish([one], image_of(brokers, {0: PartitionRegistration(
            (1, 2, 3), (2, 3), leader=2, leader_epoch=2)}, offset=2))
        await wait_until(lambda: log_values(one) == ["a", "b", "c"])
        assert log_values(two) == log_values(three) == ["a", "b", "c"]
        # A produce to the old leader is refused with the new leader's address.
        late = await produce(one, "late")
        assert late.error == dpb.NOT_LEADER_OR_FOLLOWER
        assert late.leader_address == two.address

    with_brokers(tmp_path, body)


def test_a_consumer_long_polls_until_records_commit(tmp_path: Path) -> None:
    async def body(brokers: list[Broker]) -> None:
        part = PartitionRegistration((1, 2), (1, 2), leader=1, leader_epoch=0)
        await publish(brokers, image_of(brokers, {0: part}))
        poll = asyncio.create_task(brokers[0].manager.fetch(dpb.FetchRequest(
            replica_id=-1, max_wait_ms=10_000,
            partitions=[dpb.FetchPartition(topic=TOPIC, partition=0, fetch_offset=0)])))
        await asyncio.sleep(0.1)
        assert not poll.done()
        assert (await produce(brokers[0], "a")).error == dpb.DATA_ERROR_NONE
        answer = (await asyncio.wait_for(poll, 10)).partitions[0]
        assert answer.high_watermark == 1 and answer.records

    with_brokers(tmp_path, body, count=2)


def test_acks_zero_and_one(tmp_path: Path) -> None:
    async def body(brokers: list[Broker]) -> None:
        part = PartitionRegistration((1,), (1,), leader=1, leader_epoch=0)
        await publish(brokers, image_of(brokers, {0: part}))
        zero = await produce(brokers[0], "a", acks=0)
        assert zero.error == dpb.DATA_ERROR_NONE and zero.base_offset == -1
        one = await produce(brokers[0], "b", acks=1)
        assert one.base_offset == 1
        assert brokers[0].manager.partitions[("T-orders", 0)].flushed_offset == 2

    with_brokers(tmp_path, body, count=1)


def test_a_silent_follower_leaves_the_isr_and_rejoins_once_caught_up(tmp_path: Path) -> None:
    """Broker 3 stops fetching: acks=all waits until the leader reported the smaller
    ISR and it committed (the HW ignores 3 only then). Back and caught up, the
    leader reports it in sync again."""
    async def body(brokers: list[Broker]) -> None:
        one, _two, three = brokers
        for broker in brokers:
            broker.manager.config = attrs.evolve(broker.manager.config,
                                                 replica_lag_time_max_ms=300,
                                                 isr_check_interval_ms=50)
        controller = FakeController(brokers, PartitionRegistration(
            (1, 2, 3), (1, 2, 3), leader=1, leader_epoch=1))
        await controller.publish()
        assert (await produce(one, "a")).error == dpb.DATA_ERROR_NONE
        await three.stop()
        # Acknowledged once the ISR without 3 is committed (3 never got "b").
        answer = await produce(one, "b")
        assert answer.error == dpb.DATA_ERROR_NONE, answer.message
        assert controller.reports[0] == (1, 2)
        assert controller.part.isr == (1, 2)
        # Back with its log: it catches up, then the leader reports it.
        restarted = Broker(3, three.root, three.config)
        restarted.manager.config = three.manager.config
        restarted.manager.isr.sender = three.manager.isr.sender
        brokers[2] = restarted
        controller.brokers[2] = restarted
        await restarted.start()
        await controller.publish()
        # The report is counted once the controller's answer is back.
        await wait_until(lambda: controller.part.isr == (1, 2, 3)
                         and one.manager.isr.expands == 1)
        assert log_values(restarted) == ["a", "b"]
        assert one.manager.isr.shrinks == 1

    with_brokers(tmp_path, body)
