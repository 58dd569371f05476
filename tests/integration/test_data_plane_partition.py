"""A network partition between a partition leader and its followers, with real
processes: 3 controllers and 3 brokers on loopback, each broker's replication
listener (`[data] replication_listen`) behind a nemesis proxy it advertises, so
the followers' fetches to one broker can be black-holed while that broker still
reaches the controllers and its producers.

Kafka's behaviour is the contract: the cut-off leader keeps its session and its
leadership, shrinks the ISR to itself once its followers have lagged for
`replica_lag_time_max_ms` (AlterPartition), and then acknowledges acks=all writes
alone while min.insync.replicas is 1, or refuses them (NOT_ENOUGH_REPLICAS) while
it is 2; healed, the followers catch up and the leader adds them back. Through all
of it, several producers write with acks=all, and afterwards every acknowledged
record is read back exactly once, in each producer's order, and every replica's
log holds the same records up to the high watermark.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.client import Consumer, DataClientError, Producer
from broker_agent.replica.records import DataRecord
from controller.api.client import AdminClient
from controller.metadata.configs import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    OpType,
    ResourceType,
)
from tests.support.broker_processes import BrokerCluster, running_cluster
from tests.support.nemesis import Nemesis
from tests.support.partition_logs import create, leader_of, stored_values
from tests.support.polling import wait_until
from tests.support.ports import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BROKERS = (1, 2, 3)
REPLICA_LAG_TIME_MAX_MS = 1_500
PRODUCERS = 3
TOPIC = "cut-off"
# Where the followers' fetches come from, as the nemesis names the links.
FOLLOWERS = "followers"


@pytest.fixture(scope="module")
def net() -> Iterator[Nemesis]:
    nemesis = Nemesis(seed=35)
    yield nemesis
    nemesis.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, net: Nemesis) -> Iterator[BrokerCluster]:
    data = {}
    for broker, port in zip(BROKERS, free_ports(len(BROKERS)), strict=True):
        proxy = net.link(FOLLOWERS, f"b{broker}", f"127.0.0.1:{port}")
        data[broker] = (f'replication_listen = "127.0.0.1:{port}"\n'
                        f'replication_advertised = "{proxy}"\n'
                        f"replica_lag_time_max_ms = {REPLICA_LAG_TIME_MAX_MS}\n"
                        "isr_check_interval_ms = 200\nreplica_fetch_wait_ms = 200")
    with running_cluster(tmp_path_factory.mktemp("data-partition"), brokers=BROKERS,
                         session_timeout_ms=2_000, broker_data=data) as c:
        yield c


def isr(admin: AdminClient) -> tuple[int, ...]:
    return tuple(sorted(admin.describe_topics([TOPIC])[0].partitions[0].registration.isr))


def set_min_isr(admin: AdminClient, value: int) -> None:
    (result,) = admin.incremental_alter_configs([AlterConfigsResource(
        ConfigResource(ResourceType.TOPIC, TOPIC),
        (AlterConfigOp("min.insync.replicas", OpType.SET, str(value)),))])
    assert result.error.ok, result.error


class Producers:
    """`PRODUCERS` idempotent acks=all producers on partition 0, each writing its own
    numbered values; a batch refused with NOT_ENOUGH_REPLICAS is sent again (the same
    sequence) until it is acknowledged."""

    def __init__(self, cluster: BrokerCluster) -> None:
        self.cluster = cluster
        self.acked: dict[int, list[str]] = {i: [] for i in range(PRODUCERS)}
        self.refused = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(PRODUCERS)]

    def __enter__(self) -> Producers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def _run(self, index: int) -> None:
        with self.cluster.admin() as admin, Producer(admin, timeout_ms=30_000) as producer:
            n = 0
            while not self.stop.is_set():
                batch = [DataRecord(None, f"w{index}-{n + i}".encode()) for i in range(3)]
                try:
                    producer.send(TOPIC, batch, partition=0)
                except DataClientError as exc:
                    if exc.code != dpb.NOT_ENOUGH_REPLICAS:
                        self.failures.append(f"producer {index}: {exc}")
                        return
                    self.refused += 1
                    self.stop.wait(0.05)  # back off, then the same batch again
                    continue
                self.acked[index].extend(r.value.decode() for r in batch)
                n += 3

    @property
    def total(self) -> int:
        return sum(len(values) for values in self.acked.values())

    def more(self, count: int, what: str) -> None:
        start = self.total
        wait_until(lambda: self.total >= start + count or self.failures, 30, what)
        assert not self.failures, self.failures


def test_a_leader_cut_off_from_its_followers_loses_nothing(
        cluster: BrokerCluster, net: Nemesis) -> None:
    with cluster.admin() as admin:
        create(admin, TOPIC)
        leader, epoch = leader_of(admin, TOPIC)
        with Producers(cluster) as producers:
            producers.more(60, "records acknowledged before the cut")

            # min.insync.replicas 1: the leader alone goes on acknowledging.
            net.cut(FOLLOWERS, f"b{leader}")
            wait_until(lambda: isr(admin) == (leader,), 30,
                       "the cut-off leader shrank the ISR to itself")
            assert leader_of(admin, TOPIC) == (leader, epoch), \
                "it kept its session and its leadership"
            producers.more(60, "records acknowledged by the leader alone")
            net.heal()
            wait_until(lambda: isr(admin) == BROKERS, 30, "the followers back in the ISR")
            producers.more(30, "records acknowledged by the whole ISR")

            # min.insync.replicas 2: refused while the leader is alone.
            set_min_isr(admin, 2)
            net.cut(FOLLOWERS, f"b{leader}")
            wait_until(lambda: isr(admin) == (leader,), 30, "the ISR shrank again")
            refused = producers.refused
            wait_until(lambda: producers.refused > refused + 3 or producers.failures, 30,
                       "acks=all refused below min.insync.replicas")
            assert not producers.failures, producers.failures
            net.heal()
            wait_until(lambda: isr(admin) == BROKERS, 30, "the followers back again")
            producers.more(30, "records acknowledged once healed")
        assert not producers.failures, producers.failures

        with Consumer(admin) as consumer:
            read = [r.record.value.decode() for r in consumer.read(TOPIC, 0, 0)]
            high_watermark = consumer.offsets(TOPIC, 0).high_watermark
    assert len(read) == high_watermark
    # Exactly once: no value twice (the producers are idempotent), every acknowledged
    # one present, and each producer's in the order it was acknowledged.
    assert len(set(read)) == len(read), "a record was written twice"
    for index, acked in producers.acked.items():
        mine = [value for value in read if value.startswith(f"w{index}-")]
        assert mine[:len(acked)] == acked, f"producer {index}: acknowledged records lost " \
            "or reordered"
    # Every replica's log holds the same records up to the high watermark.
    wait_until(lambda: all(stored_values(cluster, b, TOPIC)[:high_watermark] == read
                           for b in BROKERS), 30, "every replica holds the committed records")
