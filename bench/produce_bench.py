"""The data plane's speed: produce with acks=all on 3 brokers, replication factor 3.

    .venv/bin/python bench/produce_bench.py [--seconds 10] [--producers 1,16] [--kills 5]

Three `metakraft controller` and three `metakraft broker` processes on loopback
(the tests' launcher: real processes, fsync on every flush, plaintext), one topic
per phase. Every producer is the client library's idempotent `Producer` (sync
gRPC), each in its own process so the client's GIL is not the limit. Figures:

1. throughput: 100-byte records in batches of 100, acks=all, for `--seconds`, with
   1 and 16 producers (16 partitions, one per producer): records/s, MB/s, and the
   latency of each acknowledged batch (p50, p99);
2. end to end: one producer sending one record at a time with its wall-clock
   time, one consumer long-polling the same partition: receive time - send time
   (p50, p99; same machine, so the clocks agree);
3. failover: a producer writing in a closed loop, `--kills` times: kill -9 the
   partition leader's broker, time until the next acknowledged batch (then the
   broker is restarted and the next round waits until it is back in the ISR);
4. ISR expansion by AlterPartition: `--partitions` partitions (RF 3); a broker is
   killed, its ISRs shrink (fencing), it restarts, and its leaders report it back
   in sync: the time from its restart until every ISR holds it again;
5. the physical limit: fdatasync of a 4 KiB write on this disk, per second.

`--session-ms` sets the controllers' broker session timeout (2,000 by default, as
the tests; failover waits that long before the dead leader is fenced).

Not a test: it prints its figures (docs/benchmarks.md keeps them).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_agent.replica.client import Consumer, Producer
from broker_agent.replica.records import DataRecord
from controller.api.client import AdminClient
from controller.metadata import CreatableTopic
from tests.support.broker_processes import BrokerCluster
from tests.support.polling import wait_until

RECORD = b"x" * 100
BATCH = 100


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def create(admin: AdminClient, name: str, partitions: int) -> None:
    result = admin.create_topics([CreatableTopic(name, partitions, 3)])[0]
    assert result.error.ok, result.error
    with Consumer(admin, timeout_ms=30_000) as consumer:
        for p in range(partitions):
            consumer.offsets(name, p)


def _producer_process(bootstrap: list[str], topic: str, partition: int, seconds: float,
                      start_at: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    with AdminClient(bootstrap) as admin, Producer(admin) as producer:
        batch = [DataRecord(None, RECORD)] * BATCH
        producer.send(topic, batch[:1], partition=partition)  # leaders found, channel up
        while time.time() < start_at:
            time.sleep(0.001)
        latencies = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            producer.send(topic, batch, partition=partition)
            latencies.append((time.monotonic() - t0) * 1000)
        out.put(latencies)


def throughput(cluster: BrokerCluster, admin: AdminClient, producers: int,
               seconds: float) -> dict[str, float]:
    topic = f"throughput-{producers}"
    create(admin, topic, producers)
    # spawn, not fork: this process holds gRPC channels, which do not survive a fork.
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    start_at = time.time() + 3.0
    procs = [ctx.Process(target=_producer_process,
                        args=(cluster.bootstrap, topic, p, seconds, start_at, queue))
             for p in range(producers)]
    for proc in procs:
        proc.start()
    latencies: list[float] = []
    for _ in procs:
        latencies += queue.get(timeout=seconds + 120)
    for proc in procs:
        proc.join(30)
    records = len(latencies) * BATCH
    return {"producers": producers, "records_per_s": records / seconds,
            "mb_per_s": records * len(RECORD) / seconds / 1e6,
            "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99)}


def end_to_end(cluster: BrokerCluster, admin: AdminClient,
               count: int = 300) -> dict[str, float]:
    create(admin, "e2e", 1)
    seen: list[float] = []
    done = threading.Event()

    def consume() -> None:
        with AdminClient(cluster.bootstrap) as own, Consumer(own) as consumer:
            for record in consumer.read("e2e", 0, 0, follow=True, max_wait_ms=1000):
                sent = int.from_bytes(record.record.value, "big") / 1e9
                seen.append((time.time() - sent) * 1000)
                if len(seen) >= count:
                    done.set()
                    return

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    with Producer(admin) as producer:
        for _ in range(count):
            producer.send("e2e", [DataRecord(None, time.time_ns().to_bytes(8, "big"))], 0)
            time.sleep(0.005)
    done.wait(60)
    return {"records": len(seen), "p50_ms": pct(seen, 0.5), "p99_ms": pct(seen, 0.99)}


def failover(cluster: BrokerCluster, admin: AdminClient, kills: int) -> list[float]:
    create(admin, "failover", 1)
    acked_at: list[float] = []
    stop = threading.Event()

    def produce() -> None:
        with AdminClient(cluster.bootstrap) as own, Producer(own, timeout_ms=60_000) as producer:
            while not stop.is_set():
                producer.send("failover", [DataRecord(None, RECORD)] * 10, 0)
                acked_at.append(time.monotonic())

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    gaps = []
    try:
        for _ in range(kills):
            wait_until(lambda: len(acked_at) > 20, 30, "acks")
            reg = admin.describe_topics(["failover"])[0].partitions[0].registration
            leader = reg.leader
            killed_at = time.monotonic()
            cluster.brokers[leader].kill()
            wait_until(lambda k=killed_at: acked_at and acked_at[-1] > k, 60, "next ack")
            gaps.append((next(t for t in acked_at if t > killed_at) - killed_at) * 1000)
            cluster.brokers[leader].start()
            cluster.wait_running([leader], timeout_s=60)
            wait_until(lambda b=leader: b in admin.describe_topics(["failover"])[0]
                       .partitions[0].registration.isr, 60, "back in the ISR")
    finally:
        stop.set()
        thread.join(70)
    return gaps


def isr_expansion(cluster: BrokerCluster, admin: AdminClient, partitions: int) -> dict[str, float]:
    topic = "expand"
    result = admin.create_topics([CreatableTopic(topic, partitions, 3)])[0]
    assert result.error.ok, result.error

    def registrations() -> list:  # type: ignore[type-arg]
        return [p.registration for p in admin.describe_topics([topic])[0].partitions]

    wait_until(lambda: all(len(r.isr) == 3 for r in registrations()), 120, "full ISRs")
    victim = 3
    cluster.brokers[victim].kill()
    wait_until(lambda: all(victim not in r.isr for r in registrations()), 120, "ISRs shrunk")
    started = time.monotonic()
    cluster.brokers[victim].start()
    cluster.wait_running([victim], timeout_s=120)
    running_s = time.monotonic() - started
    wait_until(lambda: all(victim in r.isr for r in registrations()), 300, "ISRs expanded")
    return {"partitions": partitions, "running_s": running_s,
            "all_back_s": time.monotonic() - started}


def fsync_rate(directory: Path, seconds: float = 2.0) -> float:
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        n = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            os.write(fd, b"\0" * 4096)
            os.fdatasync(fd)
            n += 1
        return n / seconds
    finally:
        os.close(fd)
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--producers", default="1,16")
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--session-ms", type=int, default=2000)
    parser.add_argument("--skip", default="", help="phases to skip: throughput,e2e,"
                        "failover,expansion")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}")
    with tempfile.TemporaryDirectory(prefix="produce-bench-") as tmp:
        root = Path(tmp)
        print(f"fdatasync of 4 KiB writes on this disk: {fsync_rate(root):.0f}/s")
        cluster = BrokerCluster(root, brokers=(1, 2, 3), session_timeout_ms=args.session_ms)
        skip = set(args.skip.split(","))
        try:
            cluster.start()
            cluster.wait_running(timeout_s=60)
            with cluster.admin() as admin:
                for producers in (int(p) for p in args.producers.split(",")
                                  if "throughput" not in skip):
                    r = throughput(cluster, admin, producers, args.seconds)
                    print(f"acks=all, {producers} producer(s), batches of {BATCH} x 100 B: "
                          f"{r['records_per_s']:,.0f} records/s, {r['mb_per_s']:.2f} MB/s, "
                          f"batch latency p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms")
                if "e2e" not in skip:
                    e2e = end_to_end(cluster, admin)
                    print(f"end to end (produce -> consume, 1 record at a time): "
                          f"p50 {e2e['p50_ms']:.1f} ms, p99 {e2e['p99_ms']:.1f} ms "
                          f"({e2e['records']:.0f} records)")
                if "failover" not in skip:
                    gaps = failover(cluster, admin, args.kills)
                    print(f"partition leader kill -9 -> next acknowledged produce "
                          f"({len(gaps)} kills, session timeout {args.session_ms} ms): "
                          + ", ".join(f"{g:.0f}" for g in gaps)
                          + f" ms; median {statistics.median(gaps):.0f}, "
                          f"max {max(gaps):.0f}")
                if "expansion" not in skip:
                    x = isr_expansion(cluster, admin, args.partitions)
                    print(f"ISR expansion: broker 3 restarted with {x['partitions']:.0f} "
                          f"partitions (RF 3) to catch up: RUNNING after "
                          f"{x['running_s']:.1f} s, back in every ISR (AlterPartition) "
                          f"after {x['all_back_s']:.1f} s")
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
