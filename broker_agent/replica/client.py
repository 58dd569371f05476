"""`Producer` and `Consumer`: a blocking client of the brokers' PartitionData service.

Both learn who leads a partition from the controllers (`AdminClient`:
describe_topics for the leader, describe_cluster for its address) and follow
leadership changes by themselves: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH and an unreachable broker refresh the metadata and retry
within the call's deadline.

The producer is idempotent by default: a random producer id and a sequence
number per partition, so a batch retried after a lost answer (a leader killed
after appending, a timeout) is written once, by whichever leader has it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import crc32c
import grpc

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica import data_pb2_grpc as dpb_grpc
from broker_agent.replica.records import DataRecord, decode_record, encode_produce_batch
from controller import rpc
from controller.api.client import AdminClient
from controller.logformat.batch import iter_batches
from controller.security.tls import TlsCredentials

ACKS_ALL = -1
# Answers that mean "ask the controllers who leads now, then retry".
_RETRIABLE = frozenset({dpb.NOT_LEADER_OR_FOLLOWER, dpb.FENCED_LEADER_EPOCH,
                        dpb.UNKNOWN_LEADER_EPOCH, dpb.REQUEST_TIMED_OUT,
                        dpb.NOT_ENOUGH_REPLICAS_AFTER_APPEND, dpb.UNKNOWN_TOPIC_OR_PARTITION})


class DataClientError(Exception):
    """A refusal the client does not retry (or ran out of time retrying)."""

    def __init__(self, code: int, message: str) -> None:
        name = dpb.DataError.Name(code) if code in dpb.DataError.values() else str(code)  # type: ignore[arg-type]
        super().__init__(f"{name}: {message}")
        self.code = code
        self.code_name = name


@attrs.frozen
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    record: DataRecord
    # The leader epoch that wrote it and when (the leader's clock).
    leader_epoch: int
    append_time_ms: int


@attrs.frozen
class LeaderInfo:
    broker_id: int
    address: str
    leader_epoch: int


class _Metadata:
    """Partition leaders as the controllers see them, refreshed on demand."""

    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin
        self._leaders: dict[tuple[str, int], LeaderInfo] = {}
        self._counts: dict[str, int] = {}

    def partition_count(self, topic: str) -> int:
        if topic not in self._counts:
            self.refresh(topic)
        return self._counts[topic]

    def leader(self, topic: str, partition: int) -> LeaderInfo:
        info = self._leaders.get((topic, partition))
        if info is None:
            self.refresh(topic)
            info = self._leaders.get((topic, partition))
        if info is None:
            raise DataClientError(dpb.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"{topic}-{partition} does not exist")
        return info

    def refresh(self, topic: str) -> None:
        described = self.admin.describe_topics([topic])[0]
        if not described.error.ok:
            raise DataClientError(dpb.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"topic {topic!r}: {described.error}")
        addresses = {}
        for broker in self.admin.describe_cluster().brokers:
            if broker.listeners:
                addresses[broker.broker_id] = \
                    f"{broker.listeners[0].host}:{broker.listeners[0].port}"
        self._counts[topic] = len(described.partitions)
        for p in described.partitions:
            reg = p.registration
            self._leaders[(topic, p.partition_id)] = LeaderInfo(
                reg.leader, addresses.get(reg.leader, ""), reg.leader_epoch)


class _Leaders:
    """Calls on a partition's leader: the metadata, one channel per broker, and the
    one retry loop both clients use (refresh the leaders and retry on a retriable
    answer or an unreachable broker, until the deadline)."""

    def __init__(self, admin: AdminClient, tls: TlsCredentials | None) -> None:
        self.metadata = _Metadata(admin)
        self._tls = tls
        self._channels: dict[str, grpc.Channel] = {}
        self.retries = 0

    def _stub(self, address: str) -> dpb_grpc.PartitionDataStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = rpc.create_sync_channel(address, tls=self._tls)
        return dpb_grpc.PartitionDataStub(channel)

    def call(self, topic: str, partition: int, timeout_ms: int,
             fn: Callable[[dpb_grpc.PartitionDataStub, LeaderInfo, float], Any]) -> Any:
        """`fn(stub, leader, seconds left)` on the leader until its answer (a message
        with `error` and `message`) carries no error; raises `DataClientError`."""
        deadline = time.monotonic() + timeout_ms / 1000
        attempt = 0
        while True:
            leader = self.metadata.leader(topic, partition)
            try:
                if not leader.address:
                    raise DataClientError(dpb.NOT_LEADER_OR_FOLLOWER,
                                          f"{topic}-{partition} has no leader")
                answer = fn(self._stub(leader.address), leader,
                            max(deadline - time.monotonic(), 0.001))
                if not answer.error:
                    return answer
                error = DataClientError(answer.error, answer.message)
            except grpc.RpcError as exc:
                error = DataClientError(dpb.NOT_LEADER_OR_FOLLOWER,
                                        f"broker {leader.broker_id} at {leader.address}: "
                                        f"{exc.code().name}")
            except DataClientError as exc:
                error = exc
            if error.code not in _RETRIABLE or time.monotonic() >= deadline:
                raise error
            attempt += 1
            self.retries += 1
            time.sleep(min(0.05 * 2 ** attempt, 1.0) * (0.5 + random.random() / 2))
            self.metadata.refresh(topic)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()


class Producer:
    """`send` appends records to one partition and returns the first one's offset."""

    def __init__(self, admin: AdminClient, *, tls: TlsCredentials | None = None,
                 acks: int = ACKS_ALL, idempotent: bool = True, timeout_ms: int = 30_000) -> None:
        if acks not in (0, 1, ACKS_ALL):
            raise ValueError("acks must be 0, 1 or -1 (all)")
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.producer_id = random.getrandbits(62) if idempotent else -1
        self._sequences: dict[tuple[str, int], int] = {}
        self._leaders = _Leaders(admin, tls)

    @property
    def retries(self) -> int:
        return self._leaders.retries

    def partition_for(self, topic: str, key: bytes | None) -> int:
        count = self._leaders.metadata.partition_count(topic)
        return 0 if key is None else crc32c.crc32c(key) % count

    def send(self, topic: str, records: Sequence[DataRecord], partition: int | None = None
             ) -> dpb.ProduceResponse:
        """Append `records` as one batch (all to `partition`, or to the partition of
        the first record's key); retried until acknowledged or `timeout_ms` passed."""
        if not records:
            raise ValueError("nothing to send")
        if partition is None:
            partition = self.partition_for(topic, records[0].key)
        batch = encode_produce_batch(records)
        sequence = self._sequences.get((topic, partition), 0)

        def produce(stub: dpb_grpc.PartitionDataStub, leader: LeaderInfo,
                    left_s: float) -> dpb.ProduceResponse:
            answer: dpb.ProduceResponse = stub.Produce(dpb.ProduceRequest(
                topic=topic, partition=partition, acks=self.acks,
                leader_epoch=leader.leader_epoch, batch=batch, producer_id=self.producer_id,
                base_sequence=sequence if self.producer_id >= 0 else 0,
                timeout_ms=max(int(left_s * 1000), 1)), timeout=left_s + 1.0)
            return answer

        answer: dpb.ProduceResponse = self._leaders.call(topic, partition, self.timeout_ms,
                                                         produce)
        self._sequences[(topic, partition)] = sequence + len(records)
        return answer

    def close(self) -> None:
        self._leaders.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Consumer:
    """Reads one partition at a time from its leader, below the high watermark."""

    def __init__(self, admin: AdminClient, *, tls: TlsCredentials | None = None,
                 timeout_ms: int = 30_000) -> None:
        self.timeout_ms = timeout_ms
        self._leaders = _Leaders(admin, tls)

    def partition_count(self, topic: str) -> int:
        return self._leaders.metadata.partition_count(topic)

    def offsets(self, topic: str, partition: int) -> dpb.ListOffsetsResponse:
        """(log start, high watermark, log end) at the leader."""
        answer: dpb.ListOffsetsResponse = self._leaders.call(
            topic, partition, self.timeout_ms, lambda stub, _leader, left_s: stub.ListOffsets(
                dpb.ListOffsetsRequest(topic=topic, partition=partition),
                timeout=min(left_s, 5.0) + 0.5))
        return answer

    def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 500,
              max_bytes: int = 1024 * 1024) -> tuple[list[ConsumedRecord], int]:
        """Records from `offset` (committed ones only) and the high watermark."""
        def call(stub: dpb_grpc.PartitionDataStub, leader: LeaderInfo,
                 _left_s: float) -> dpb.FetchedPartition:
            response: dpb.FetchResponse = stub.Fetch(dpb.FetchRequest(
                replica_id=-1, max_wait_ms=max_wait_ms, max_bytes=max_bytes,
                partitions=[dpb.FetchPartition(topic=topic, partition=partition,
                                               fetch_offset=offset,
                                               current_leader_epoch=leader.leader_epoch)]),
                timeout=max_wait_ms / 1000 + 5.0)
            return response.partitions[0]

        answer: dpb.FetchedPartition = self._leaders.call(topic, partition, self.timeout_ms,
                                                          call)
        out = []
        for batch in iter_batches(answer.records):
            for i, body in enumerate(batch.records):
                at = batch.base_offset + i
                if at >= offset:
                    out.append(ConsumedRecord(topic, partition, at, decode_record(body),
                                              batch.epoch, batch.append_time_ms))
        return out, answer.high_watermark

    def read(self, topic: str, partition: int, offset: int, *, follow: bool = False,
             max_wait_ms: int = 500) -> Iterator[ConsumedRecord]:
        """Every committed record from `offset` on; stops at the high watermark unless
        `follow`."""
        while True:
            records, high_watermark = self.fetch(topic, partition, offset,
                                                 max_wait_ms=max_wait_ms if follow else 0)
            yield from records
            if records:
                offset = records[-1].offset + 1
            elif not follow and offset >= high_watermark:
                return

    def close(self) -> None:
        self._leaders.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
