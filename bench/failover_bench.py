"""Broker failure at scale: how fast the controller moves a lost broker's leaderships,
and whether it keeps answering meanwhile.

    .venv/bin/python bench/failover_bench.py [--partitions 1000000] [--brokers 12]

Three `metakraft controller` processes on loopback (the tests' launcher; the log
fsyncs every flush) and `--brokers` brokers registered over the BrokerLifecycle gRPC
service, kept alive by this script's heartbeats (every 500 ms, a broker's default)
with a `--session-ms` session (9 s, Kafka's default); each broker heartbeats on
its own thread. `--partitions` partitions (topics of 100, RF 3) are
created through the Admin API. Then, with one client writing small config changes
in a closed loop the whole time:

1. kill -9: broker 1's heartbeats stop (what the controller sees of a killed
   broker). Measured from the log: the fence record's append time -> the last batch
   that moves a leadership, and -> the last partition change; and how long after the
   last heartbeat the fence came (the session timeout plus the tick).
2. controlled shutdown: broker 2 heartbeats with want_shutdown until the controller
   answers should_shut_down. Measured: its shutdown record -> the last leadership
   moved, and the time until the broker was told it may stop.

Other requests meanwhile: the latencies of the client's writes in each phase (p50,
p99, max). Snapshots are off (a 1 GiB interval) so the log still holds every batch
of the phases when it is read at the end; brokers are heartbeat loops, not agents,
so broker-side reconciliation is not part of these figures.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.api import broker_pb2_grpc as bpb_grpc
from controller.api.broker_convert import heartbeat_request_to_pb, registration_request_to_pb
from controller.api.client import AdminClient
from controller.metadata import BrokerHeartbeatRequest, BrokerRegistrationRequest, CreatableTopic
from controller.metadata.configs import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    OpType,
    ResourceType,
)
from controller.records import decode_record
from controller.records.domain import Listener
from tests.support.controller_processes import ControllerCluster
from tests.support.polling import wait_until

HEARTBEAT_S = 0.5
PARTITIONS_PER_TOPIC = 100


class Brokers:
    """Registered brokers kept alive by one heartbeat thread; a broker can be made
    silent (killed) or asked to shut down."""

    def __init__(self, cluster: ControllerCluster, ids: list[int]) -> None:
        self.cluster = cluster
        self.epochs: dict[int, int] = {}
        self.silent: set[int] = set()
        self.shutting: dict[int, float | None] = {}  # id -> when told it may stop
        self.last_beat_s: dict[int, float] = {}
        self.unfenced: set[int] = set()
        self._stop = threading.Event()
        for bid in ids:
            request = registration_request_to_pb(BrokerRegistrationRequest(
                bid, f"incarnation-{bid}", cluster.cluster_id, rack=f"rack-{bid % 3}",
                listeners=(Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),)))
            reply = wait_until(lambda r=request: self._call("RegisterBroker", r, []), 30,
                               "registration")
            self.epochs[bid] = reply.broker_epoch
        self._threads = [threading.Thread(target=self._run, args=(bid,), daemon=True)
                         for bid in ids]
        for thread in self._threads:
            thread.start()

    def _call(self, method: str, request: object,
              stubs: list[bpb_grpc.BrokerLifecycleStub]) -> object:
        """Call the active controller (`stubs`: the caller's cached stub, if any)."""
        for _ in range(2):
            if not stubs:
                active = self.cluster.active_node()
                if active is None:
                    return None
                stubs.append(bpb_grpc.BrokerLifecycleStub(grpc.insecure_channel(active.address)))
            try:
                return getattr(stubs[0], method)(request, timeout=2)
            except grpc.RpcError:
                stubs.clear()
        return None

    def _run(self, bid: int) -> None:
        """One broker's heartbeats, on its own thread (as each broker has its own)."""
        stubs: list[bpb_grpc.BrokerLifecycleStub] = []
        while not self._stop.is_set():
            started = time.monotonic()
            if bid not in self.silent:
                want_shutdown = bid in self.shutting
                reply = self._call("BrokerHeartbeat", heartbeat_request_to_pb(
                    BrokerHeartbeatRequest(bid, self.epochs[bid], 1 << 40,
                                           want_shutdown=want_shutdown),
                    self.cluster.cluster_id), stubs)
                if reply is not None:
                    self.last_beat_s[bid] = time.time()
                    if not reply.is_fenced:  # type: ignore[attr-defined]
                        self.unfenced.add(bid)
                    if want_shutdown and reply.should_shut_down \
                            and self.shutting[bid] is None:  # type: ignore[attr-defined]
                        self.shutting[bid] = time.time()
            self._stop.wait(max(0.0, HEARTBEAT_S - (time.monotonic() - started)))

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


class ClosedLoop:
    """One closed-loop client on a thread: `write(n)` again and again (it returns an
    error text, or "" when the write succeeded); latencies with their end times."""

    def __init__(self, write: Callable[[int], str], close: Callable[[], None]) -> None:
        self.samples: list[tuple[float, float]] = []  # (end time, seconds)
        self.errors: list[str] = []
        self._write = write
        self._close = close
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            t0 = time.time()
            try:
                error = self._write(n)
            except Exception as e:
                error = repr(e)
            if error:
                self.errors.append(error)
            t1 = time.time()
            self.samples.append((t1, t1 - t0))

    def window(self, start_s: float, end_s: float) -> str:
        lat = sorted(s for t, s in self.samples if start_s <= t <= end_s)
        if not lat:
            return "no writes"
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        return (f"{len(lat)} writes, p50 {statistics.median(lat) * 1e3:.1f} ms, "
                f"p99 {p99 * 1e3:.1f} ms, max {lat[-1] * 1e3:.1f} ms")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._close()


class Load(ClosedLoop):
    """One closed-loop client changing a topic config."""

    def __init__(self, bootstrap: list[str]) -> None:
        client = AdminClient(bootstrap, timeout_ms=30_000)
        client.create_topics([CreatableTopic("load", 1, 3)])

        def write(n: int) -> str:
            results = client.incremental_alter_configs([AlterConfigsResource(
                ConfigResource(ResourceType.TOPIC, "load"),
                (AlterConfigOp("retention.ms", OpType.SET, str(86_400_000 + n)),))])
            return "" if all(r.error.ok for r in results) else str(results[0].error)

        super().__init__(write, client.close)


def create_partitions(bootstrap: list[str], partitions: int, threads: int) -> float:
    topics = partitions // PARTITIONS_PER_TOPIC
    per_request = 10
    started = time.time()
    chunks = [list(range(i, min(topics, i + per_request))) for i in range(0, topics, per_request)]

    def work(mine: list[list[int]]) -> None:
        client = AdminClient(bootstrap, timeout_ms=120_000)
        for chunk in mine:
            results = client.create_topics(
                [CreatableTopic(f"t{i:06d}", PARTITIONS_PER_TOPIC, 3) for i in chunk])
            bad = [r for r in results if not r.error.ok]
            assert not bad, bad[0]
        client.close()

    workers = [threading.Thread(target=work, args=(chunks[i::threads],)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.time() - started


def analyse(cluster: ControllerCluster, node_id: int) -> dict[str, dict[str, float]]:
    """From node `node_id`'s log: for the fence of broker 1 and the controlled shutdown
    of broker 2, the partition changes from that broker's record until the next phase's
    (or the end): how many, how many moved a leadership, and when the last of each was
    appended (seconds after the broker's record)."""
    phases: dict[str, dict[str, float]] = {}
    current: dict[str, float] | None = None
    for batch in cluster.nodes[node_id].read_log():
        if batch.is_control:
            continue
        for raw in batch.records:
            record = decode_record(raw)
            which = record.WhichOneof("record")
            if which == "broker_registration_change":
                change = record.broker_registration_change
                name = ("fence" if change.broker_id == 1 and change.fenced == 1 else
                        "shutdown" if change.broker_id == 2 and change.in_controlled_shutdown == 1
                        else None)
                if name is not None and name not in phases:
                    current = phases[name] = {"start_ms": batch.append_time_ms, "leaders": 0,
                                              "changes": 0, "leaders_s": 0.0, "changes_s": 0.0,
                                              "first_s": 0.0, "leaders_100k_s": -1.0}
            elif which == "partition_change" and current is not None:
                since_s = (batch.append_time_ms - current["start_ms"]) / 1e3
                if not current["changes"]:
                    current["first_s"] = since_s
                current["changes"] += 1
                current["changes_s"] = since_s
                if record.partition_change.HasField("leader"):
                    current["leaders"] += 1
                    current["leaders_s"] = since_s
                    if current["leaders"] == 100_000:  # the target's count
                        current["leaders_100k_s"] = since_s
    assert set(phases) == {"fence", "shutdown"}, sorted(phases)
    return phases


def _hundred_thousandth(phase: dict[str, float]) -> str:
    at_s = phase["leaders_100k_s"]
    return "" if at_s < 0 else f"; the 100,000th leadership moved {at_s:.2f}s after the record"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--brokers", type=int, default=12)
    parser.add_argument("--session-ms", type=int, default=9_000,
                        help="broker session timeout (Kafka's default: 9 s)")
    parser.add_argument("--create-threads", type=int, default=4)
    parser.add_argument("--settle-s", type=float, default=20.0,
                        help="time each phase is given after its event")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="failover-bench-", dir=args.dir))
    cluster = ControllerCluster(root, 3, session_timeout_ms=args.session_ms,
                                snapshot_interval_bytes=1 << 30)
    brokers = load = None
    try:
        cluster.start()
        wait_until(cluster.active_node, 30, "an active controller")
        brokers = Brokers(cluster, list(range(1, args.brokers + 1)))
        wait_until(lambda: len(brokers.unfenced) == args.brokers, 30, "every broker unfenced")
        took = create_partitions(cluster.bootstrap, args.partitions, args.create_threads)
        print(f"# {args.partitions} partitions (RF 3, topics of {PARTITIONS_PER_TOPIC}) on "
              f"{args.brokers} brokers created in {took:.1f}s; session {args.session_ms} ms",
              flush=True)
        active = cluster.active_node()
        assert active is not None
        load = Load(cluster.bootstrap)
        time.sleep(3)
        before = (time.time() - 3, time.time())

        # 1. kill -9 of broker 1 (its heartbeats stop).
        brokers.silent.add(1)
        killed_s = time.time()
        last_beat_s = brokers.last_beat_s.get(1, killed_s)
        time.sleep(args.settle_s)
        fence_window = (killed_s, time.time())

        # 2. controlled shutdown of broker 2.
        brokers.shutting[2] = None
        asked_s = time.time()
        wait_until(lambda: brokers.shutting[2] is not None, 120, "broker 2 allowed to stop")
        allowed_s = brokers.shutting[2]
        assert allowed_s is not None
        time.sleep(max(0.0, asked_s + args.settle_s - time.time()))
        shutdown_window = (asked_s, time.time())
        load.close()
        brokers.close()
        print(f"load before:            {load.window(*before)}")
        print(f"load during the fence:  {load.window(*fence_window)}")
        print(f"load during shutdown:   {load.window(*shutdown_window)}")
        print(f"load errors: {len(load.errors)} {load.errors[:1]}")
        cluster.close()
        phases = analyse(cluster, active.node_id)
        fence = phases["fence"]
        print(f"kill -9: fenced {fence['start_ms'] / 1e3 - last_beat_s:.2f}s after its last "
              f"heartbeat; {fence['leaders']:.0f} leaderships moved in {fence['leaders_s']:.2f}s "
              f"after the fence record (the first {fence['first_s']:.2f}s after it), all "
              f"{fence['changes']:.0f} partition changes in {fence['changes_s']:.2f}s"
              f"{_hundred_thousandth(fence)}")
        activations = sum(f.read_text().count("controller_active") for f in root.glob("c*.log"))
        print(f"controller activations in the whole run: {activations} (1: no failover)")
        shut = phases["shutdown"]
        print(f"controlled shutdown: {shut['leaders']:.0f} leaderships moved in "
              f"{shut['leaders_s']:.2f}s after the shutdown record (the first "
              f"{shut['first_s']:.2f}s after it), all "
              f"{shut['changes']:.0f} changes in {shut['changes_s']:.2f}s; the broker was "
              f"told it may stop {allowed_s - asked_s:.2f}s after it asked"
              f"{_hundred_thousandth(shut)}")
    finally:
        if load is not None:
            load.close()
        if brokers is not None:
            brokers.close()
        cluster.close()
        if args.keep:
            print(f"# kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
