"""The data plane with real processes: 3 controllers and 3 brokers on loopback, records
produced with acks=all and consumed back, through leader kills and a zombie leader.

Whatever happens, an acknowledged record is read back exactly once, in order, and
the replicas' logs are prefixes of one another up to the high watermark.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from click.testing import CliRunner

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica import data_pb2_grpc as dpb_grpc
from broker_agent.replica.client import Consumer, DataClientError, Producer
from broker_agent.replica.records import (
    DataRecord,
    encode_produce_batch,
    encode_record,
)
from controller import rpc
from controller.api.client import AdminClient
from controller.cli.main import cli
from controller.logformat.batch import EMPTY_ORIGIN, RecordBatch, encode_batch
from controller.metadata import CreatableTopic, TopicPartition
from controller.metadata.configs import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    OpType,
    ResourceType,
)
from controller.storage.segment import parse_segment_file_name
from tests.support.broker_processes import BrokerCluster, running_cluster
from tests.support.partition_logs import create, leader_of, stored_values
from tests.support.polling import wait_until
from tests.support.tiered_cluster import scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BROKERS = (1, 2, 3)
SESSION_TIMEOUT_MS = 2_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("data-plane"), brokers=BROKERS,
                         session_timeout_ms=SESSION_TIMEOUT_MS, metrics=True) as c:
        yield c


@pytest.fixture()
def admin(cluster: BrokerCluster) -> Iterator[AdminClient]:
    with cluster.admin() as client:
        yield client


def test_produce_and_consume_with_the_cli(cluster: BrokerCluster, admin: AdminClient) -> None:
    create(admin, "cli-topic", partitions=3)
    bootstrap = ",".join(cluster.bootstrap)
    runner = CliRunner()
    lines = "".join(f"k{i}:v{i}\n" for i in range(30))
    produced = runner.invoke(cli, ["produce", "--bootstrap", bootstrap, "--topic", "cli-topic",
                                   "--key-separator", ":", "--output", "json"], input=lines)
    assert produced.exit_code == 0, produced.output
    batches = [json.loads(line) for line in produced.output.splitlines()]
    assert sum(b["records"] for b in batches) == 30
    consumed = runner.invoke(cli, ["consume", "--bootstrap", bootstrap, "--topic", "cli-topic",
                                   "--from-beginning", "--output", "json"])
    assert consumed.exit_code == 0, consumed.output
    rows = [json.loads(line) for line in consumed.output.splitlines()]
    assert sorted((r["key"], r["value"]) for r in rows) == \
        sorted((f"k{i}", f"v{i}") for i in range(30))
    # Keys keep their partition: the same key twice lands in the same log.
    by_key = {r["key"]: r["partition"] for r in rows}
    again = runner.invoke(cli, ["produce", "--bootstrap", bootstrap, "--topic", "cli-topic",
                                "--key-separator", ":", "--value", "k7:again",
                                "--output", "json"])
    assert json.loads(again.output)["partition"] == by_key["k7"]
    # A partition that does not exist: a clear error, exit 1.
    missing = runner.invoke(cli, ["consume", "--bootstrap", bootstrap, "--topic", "nope",
                                  "--partition", "0", "--from-beginning"])
    assert missing.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.output


def test_no_acknowledged_record_is_lost_when_partition_leaders_are_killed(
        cluster: BrokerCluster, admin: AdminClient) -> None:
    """Three idempotent acks=all producers, one per partition, while partition 0's
    leader is killed with -9 twice and another broker is paused (SIGSTOP) past its
    session once: every acknowledged record is read back once, in order, and every
    replica's files agree below the high watermark."""
    partitions = 3
    create(admin, "orders", partitions=partitions)
    acked: dict[int, list[str]] = {p: [] for p in range(partitions)}
    failures: list[str] = []
    stop = threading.Event()

    def produce(partition: int) -> None:
        with cluster.admin() as own_admin, Producer(own_admin, timeout_ms=30_000) as producer:
            n = 0
            while not stop.is_set():
                batch = [DataRecord(None, f"p{partition}-{n + i}".encode()) for i in range(5)]
                try:
                    producer.send("orders", batch, partition=partition)
                except DataClientError as exc:
                    failures.append(str(exc))
                    return
                acked[partition].extend(r.value.decode() for r in batch)
                n += 5

    def more(count: int, what: str) -> None:
        start = len(acked[0])
        wait_until(lambda: len(acked[0]) >= start + count or failures, 30, what)
        assert not failures, failures

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(partitions)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(2):
            more(50, "records acknowledged")
            leader, epoch = leader_of(admin, "orders")
            cluster.brokers[leader].kill()
            wait_until(lambda e=epoch: leader_of(admin, "orders")[1] > e, 20, "a new leader")
            more(50, "records acknowledged by the new leader")
            cluster.brokers[leader].start()
            cluster.wait_running([leader], timeout_s=30)
        # A follower of partition 0 paused past its session: fenced, out of the ISRs.
        paused = next(b for b in BROKERS if b != leader_of(admin, "orders")[0])
        cluster.brokers[paused].signal(signal.SIGSTOP)
        try:
            wait_until(lambda: paused not in admin.describe_topics(["orders"])[0]
                       .partitions[0].registration.isr, 20, "the paused broker fenced")
            more(50, "records acknowledged without the paused broker")
        finally:
            cluster.brokers[paused].signal(signal.SIGCONT)
        cluster.wait_running([paused], timeout_s=30)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not failures, failures
    assert len(acked[0]) >= 250
    for partition in range(partitions):
        with Consumer(admin) as consumer:
            read = [r.record.value.decode() for r in consumer.read("orders", partition, 0)]
            high_watermark = consumer.offsets("orders", partition).high_watermark
        # Every acknowledged record, once, in the order acknowledged (the producers are
        # idempotent: a batch retried across the failover is not written twice).
        assert read[:len(acked[partition])] == acked[partition], \
            f"partition {partition}: acknowledged records lost, reordered or duplicated"
        assert len(read) == high_watermark
        # The replicas' logs agree up to the high watermark once they caught up.
        wait_until(lambda p=partition, r=read, hw=high_watermark: all(
            stored_values(cluster, b, "orders", p)[:hw] == r[:hw] for b in BROKERS), 30,
            f"every replica of partition {partition} holds its committed records")


def raw_produce(address: str, topic: str, value: str, epoch: int) -> dpb.ProduceResponse:
    channel = rpc.create_sync_channel(address)
    try:
        batch = encode_produce_batch([DataRecord(None, value.encode())])
        answer: dpb.ProduceResponse = dpb_grpc.PartitionDataStub(channel).Produce(
            dpb.ProduceRequest(topic=topic, partition=0, acks=-1, batch=batch,
                               producer_id=-1, leader_epoch=epoch, timeout_ms=3_000),
            timeout=10)
        return answer
    finally:
        channel.close()


def test_a_zombie_leader_acknowledges_nothing_and_drops_its_tail(
        cluster: BrokerCluster, admin: AdminClient) -> None:
    create(admin, "zombie-topic")
    with Producer(admin) as producer:
        producer.send("zombie-topic", [DataRecord(None, b"before")], partition=0)
    zombie, epoch = leader_of(admin, "zombie-topic")
    process = cluster.brokers[zombie]
    assert process.address is not None
    process.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: leader_of(admin, "zombie-topic")[1] > epoch, 20,
                   "a leader elected while the old one is paused")
        with Producer(admin) as producer:
            producer.send("zombie-topic", [DataRecord(None, b"after")], partition=0)
    finally:
        process.signal(signal.SIGCONT)
    # The zombie, resumed, is sent a write at its old epoch before it hears of the
    # new one (or after: either way it must not be acknowledged).
    answer = raw_produce(process.address, "zombie-topic", "zombie", epoch)
    assert answer.error != dpb.DATA_ERROR_NONE, "a zombie leader acknowledged a write"
    cluster.wait_running([zombie], timeout_s=30)
    with Consumer(admin) as consumer:
        committed = [r.record.value.decode() for r in consumer.read("zombie-topic", 0, 0)]
    assert committed == ["before", "after"]
    wait_until(lambda: stored_values(cluster, zombie, "zombie-topic") == committed, 30,
               "the zombie truncated its tail and copied the new leader's log")


def test_malformed_produce_requests_get_clear_errors(cluster: BrokerCluster,
                                                     admin: AdminClient) -> None:
    create(admin, "strict")
    leader, epoch = leader_of(admin, "strict")
    address = cluster.brokers[leader].address
    assert address is not None
    channel = rpc.create_sync_channel(address)
    try:
        stub = dpb_grpc.PartitionDataStub(channel)
        good = encode_produce_batch([DataRecord(None, b"x")])
        cases = {
            "bad crc": (good[:-1] + bytes([good[-1] ^ 1]), dpb.CORRUPT_MESSAGE),
            "base offset": (encode_batch(RecordBatch(9, 0, 0, False, EMPTY_ORIGIN,
                                                     (encode_record(DataRecord(None, b"x")),))),
                            dpb.INVALID_RECORD),
            "not a record": (encode_batch(RecordBatch(0, 0, 0, False, EMPTY_ORIGIN, (b"z",))),
                             dpb.INVALID_RECORD),
        }
        for what, (batch, code) in cases.items():
            answer = stub.Produce(dpb.ProduceRequest(topic="strict", partition=0, acks=1,
                                                     batch=batch, producer_id=-1), timeout=10)
            assert answer.error == code, (what, answer)
        negative = stub.Produce(dpb.ProduceRequest(topic="strict", partition=-1, acks=1,
                                                   batch=good, producer_id=-1), timeout=10)
        assert negative.error == dpb.UNKNOWN_TOPIC_OR_PARTITION
        # Bytes that are not a request at all: INVALID_ARGUMENT, the broker carries on.
        raw = channel.unary_unary("/metakraft.data.v1.PartitionData/Produce",
                                  request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as undecodable:
            raw(b"\xff\xff\xff", timeout=10)
        assert undecodable.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        offsets = stub.ListOffsets(dpb.ListOffsetsRequest(topic="strict", partition=0),
                                   timeout=10)
        assert offsets.log_end_offset == 0, "a refused produce appended something"
        assert leader_of(admin, "strict") == (leader, epoch)
    finally:
        channel.close()


def test_a_restarted_follower_rejoins_the_isr_when_its_leader_reports_it(
        cluster: BrokerCluster, admin: AdminClient) -> None:
    """metadata.version 7: a returning broker is not put back in the ISR by its
    heartbeats; its leader reports it once it has copied the log (AlterPartition)."""
    create(admin, "rejoin")
    leader, _ = leader_of(admin, "rejoin")
    follower = next(b for b in BROKERS if b != leader)
    with Producer(admin) as producer:
        producer.send("rejoin", [DataRecord(None, f"a{i}".encode()) for i in range(20)], 0)
        cluster.brokers[follower].kill()
        wait_until(lambda: follower not in
                   admin.describe_topics(["rejoin"])[0].partitions[0].registration.isr,
                   20, "the killed follower leaves the ISR")
        producer.send("rejoin", [DataRecord(None, f"b{i}".encode()) for i in range(20)], 0)
    cluster.brokers[follower].start()
    cluster.wait_running([follower], timeout_s=30)
    wait_until(lambda: follower in
               admin.describe_topics(["rejoin"])[0].partitions[0].registration.isr,
               30, "the leader reports the returning follower in sync")
    expected = [f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)]
    assert stored_values(cluster, follower, "rejoin")[:40] == expected
    assert "event=isr_reported" in cluster.brokers[leader].log_path.read_text()


def test_min_insync_replicas_refuses_acks_all_and_the_metrics_say_so(
        cluster: BrokerCluster, admin: AdminClient) -> None:
    create(admin, "guarded")
    (altered,) = admin.incremental_alter_configs([AlterConfigsResource(
        ConfigResource(ResourceType.TOPIC, "guarded"),
        (AlterConfigOp("min.insync.replicas", OpType.SET, "3"),))])
    assert altered.error.ok, altered.error
    with Producer(admin) as producer:
        producer.send("guarded", [DataRecord(None, b"kept")], partition=0)
        leader, _ = leader_of(admin, "guarded")
        follower = next(b for b in BROKERS if b != leader)
        cluster.brokers[follower].kill()
        wait_until(lambda: len(admin.describe_topics(["guarded"])[0].partitions[0]
                               .registration.isr) == 2, 20, "the ISR shrinks to 2")
        with pytest.raises(DataClientError) as refused:
            producer.send("guarded", [DataRecord(None, b"refused")], partition=0)
        assert refused.value.code_name == "NOT_ENOUGH_REPLICAS"
    metrics = wait_until(lambda: (m := scrape(cluster.brokers[leader]))
                         .get("metakraft_broker_under_min_isr_partitions", 0) >= 1 and m,
                         10, "the leader's gauge")
    assert metrics['metakraft_broker_produce_requests_total{acks="all",result="DATA_ERROR_NONE"}'] >= 1
    assert metrics['metakraft_broker_produce_requests_total{acks="all",result="NOT_ENOUGH_REPLICAS"}'] >= 1
    assert metrics["metakraft_broker_leader_partitions"] >= 1
    with Consumer(admin) as consumer:
        assert [r.record.value for r in consumer.read("guarded", 0, 0)] == [b"kept"]
    described = CliRunner().invoke(cli, ["topics", "describe", "--bootstrap",
                                         ",".join(cluster.bootstrap),
                                         "--under-min-isr-partitions", "--output", "json"])
    assert described.exit_code == 0, described.output
    assert [(t["name"], [p["partition_id"] for p in t["partitions"]])
            for t in json.loads(described.output)] == [("guarded", [0])]
    cluster.brokers[follower].start()
    cluster.wait_running([follower], timeout_s=30)


def test_an_eligible_leader_replica_is_elected_not_an_out_of_date_one(
        cluster: BrokerCluster, admin: AdminClient) -> None:
    """KIP-966 with real processes. min ISR 2: broker X dies (out of date from then
    on); Y pauses, so the ISR shrinks to the leader L alone and Y becomes an eligible
    leader replica; acks=all is refused; L dies. X comes back and is not elected;
    Y comes back and is, with every acknowledged record."""
    result = admin.create_topics([CreatableTopic("elr", 1, 3,
                                                 configs=(("min.insync.replicas", "2"),))])[0]
    assert result.error.ok, result.error
    wait_until(lambda: leader_of(admin, "elr")[0] >= 0, 10, "a leader")

    def registration() -> Any:
        return admin.describe_topics(["elr"])[0].partitions[0].registration

    with Producer(admin, timeout_ms=20_000) as producer:
        producer.send("elr", [DataRecord(None, b"a")], partition=0)
        leader = registration().leader
        x, y = [b for b in registration().replicas if b != leader]
        cluster.brokers[x].kill()
        wait_until(lambda: set(registration().isr) == {leader, y}, 20, "X out of the ISR")
        producer.send("elr", [DataRecord(None, b"b")], partition=0)
        cluster.brokers[y].signal(signal.SIGSTOP)
        try:
            wait_until(lambda: (registration().isr, registration().elr) == ((leader,), (y,)),
                       20, "the ISR down to the leader, Y eligible")
            with pytest.raises(DataClientError) as refused:
                producer.send("elr", [DataRecord(None, b"refused")], partition=0)
            assert refused.value.code_name == "NOT_ENOUGH_REPLICAS"
            cluster.brokers[leader].kill()
            wait_until(lambda: registration().leader == -1, 20, "the partition offline")
            cluster.brokers[x].start()
            cluster.wait_running([x], timeout_s=30)
            assert registration().leader == -1, "an out-of-date replica was elected"
        finally:
            cluster.brokers[y].signal(signal.SIGCONT)
    wait_until(lambda: registration().leader == y, 30, "the eligible replica elected")
    assert registration().elr == (leader,)
    with Consumer(admin) as consumer:
        wait_until(lambda: [r.record.value for r in consumer.read("elr", 0, 0)] == [b"a", b"b"],
                   30, "every acknowledged record readable from the new leader")
    cluster.brokers[leader].start()
    cluster.wait_running([leader], timeout_s=30)


def test_a_damaged_and_torn_partition_log_is_cut_refetched_and_never_served(
        cluster: BrokerCluster, admin: AdminClient) -> None:
    """The preferred replica's segment gets a flipped byte in a record it had fsynced
    (and acknowledged) and a torn tail; it restarts, cuts both, fetches the records
    again, rejoins the ISR, is made leader again, and serves exactly what was
    committed."""
    create(admin, "torn")
    with Producer(admin) as producer:
        for i in range(3):
            producer.send("torn", [DataRecord(None, f"r{i}-{j}".encode()) for j in range(5)], 0)
    committed = [f"r{i}-{j}" for i in range(3) for j in range(5)]
    victim = admin.describe_topics(["torn"])[0].partitions[0].registration.replicas[0]
    wait_until(lambda: stored_values(cluster, victim, "torn") == committed, 20,
               "the preferred replica holds every record")
    assert cluster.brokers[victim].terminate() == 0  # clean: flushed, recovery point set
    directory = cluster.brokers[victim].data_dir / "partition-logs" / "torn-0"
    (segment,) = [p for p in directory.iterdir() if parse_segment_file_name(p.name) is not None]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the second batch: damage below the recovery point
    segment.write_bytes(bytes(data) + b"\x00\x00\x00\x00\x00\x17torn")
    cluster.brokers[victim].start()
    cluster.wait_running([victim], timeout_s=30)
    wait_until(lambda: stored_values(cluster, victim, "torn") == committed and victim in
               admin.describe_topics(["torn"])[0].partitions[0].registration.isr, 30,
               "the damaged replica re-fetched and rejoined the ISR")
    assert "event=partition_log_damaged" in cluster.brokers[victim].log_path.read_text()
    admin.elect_leaders([TopicPartition("torn", 0)])
    wait_until(lambda: leader_of(admin, "torn")[0] == victim, 20, "the preferred leader back")
    with Consumer(admin) as consumer:
        wait_until(lambda: [r.record.value.decode() for r in consumer.read("torn", 0, 0)]
                   == committed, 20, "the repaired leader serves what was committed")
