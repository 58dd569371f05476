"""The built-in data plane in one process: managers with real gRPC servers and
real partition logs, metadata handed over by hand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.config import DataPlaneConfig
from broker_agent.replica.records import DataRecord, encode_record
from controller.logformat.batch import EMPTY_ORIGIN, RecordBatch, encode_batch
from controller.records.domain import PartitionRegistration
from tests.support.data_plane import TOPIC, Broker, image_of, publish


def batch_of(*values: str) -> bytes:
    return encode_batch(RecordBatch(0, 0, 0, False, EMPTY_ORIGIN,
                                    tuple(encode_record(DataRecord(None, v.encode()))
                                          for v in values)))


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
