"""Broker propagation benchmark (issue 6).

    .venv/bin/python bench/propagation_bench.py delta [--topics 100000] [--changes 2000]
    .venv/bin/python bench/propagation_bench.py catchup [--partitions 200000]
    .venv/bin/python bench/propagation_bench.py propagation [--brokers 10] [--changes 100]

`delta` (in process): an image of T topics (3 partitions each, RF 3 over 10
brokers), then C one-partition changes (a leader move), each through
`MetadataDelta` → next image → `plan_delta` for one broker. Figures: p50/p99/max
per change.

`catchup` (in process): a snapshot file of P partitions (RF 3 over 10 brokers) is
written with the controller's `SnapshotWriter`; then timed the way a broker loads
it: read + decode + bulk image build (`read_snapshot_image`), `plan_full` for one
broker (~30% of the partitions are local), and writing that broker's local state
(one atomic, fsynced state.json per replica) for a sample of replicas, extrapolated.

`propagation` (real processes): 3 controllers and N broker agents on loopback
(tests/support/broker_processes.py). One topic with N partitions, replicated on
every broker (RF = N), so every change reaches every broker. Each change reorders
one partition's replicas (one PartitionChange record, committed at once, no
leader change: every broker reconciles a new partition epoch). Measured per
change: from just before the request is sent (an upper bound of the commit
instant) and from its acknowledgement (after the commit: a lower bound) to the
last broker's `event=reconciled` (wall clock, same machine).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_agent.delta import MetadataDelta
from broker_agent.image import MetadataImage, topic_image
from broker_agent.loader import read_snapshot_image
from broker_agent.local_state import LocalPartitionStore
from broker_agent.pmap import PersistentMap
from broker_agent.reconciler import BecomeLeader, plan_delta, plan_full
from controller.records import encode_record, make_record
from controller.records import metadata_pb2 as pb
from controller.records.domain import PartitionRegistration
from controller.storage.snapshot_file import SnapshotId, SnapshotWriter

BROKERS = 10


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _replicas(i: int) -> tuple[int, int, int]:
    return (i % BROKERS + 1, (i + 1) % BROKERS + 1, (i + 2) % BROKERS + 1)


def machine() -> str:
    load = os.getloadavg()
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
            f"Python {platform.python_version()}, load avg {load[0]:.2f}/{load[1]:.2f}")


def bench_delta(topics: int, changes: int) -> None:
    started = time.perf_counter()
    tmap = {}
    for t in range(topics):
        parts = [(p, PartitionRegistration(_replicas(t + p), _replicas(t + p),
                                           leader=_replicas(t + p)[0])) for p in range(3)]
        tmap[f"T{t}"] = topic_image(f"t{t}", f"T{t}", parts)
    image = MetadataImage(0, PersistentMap.from_mapping(tmap),
                          PersistentMap.from_mapping({f"t{t}": f"T{t}" for t in range(topics)}),
                          PersistentMap(), PersistentMap(), PersistentMap())
    print(f"image of {topics} topics / {3 * topics} partitions built in "
          f"{time.perf_counter() - started:.1f} s")
    costs_ms: list[float] = []
    for k in range(changes):
        t = (k * 7919) % topics
        part = image.topics[f"T{t}"].partitions[0]
        new_leader = part.replicas[(part.replicas.index(part.leader) + 1) % 3]
        record = pb.PartitionChangeRecord(topic_id=f"T{t}", partition_id=0, leader=new_leader)
        wrapped = make_record(record)
        begin = time.perf_counter_ns()
        delta = MetadataDelta(image)
        delta.replay(wrapped, image.offset + 1)
        new_image, ch = delta.apply()
        plan_delta(image, new_image, ch.changed_partitions, ch.removed_topics, new_leader)
        costs_ms.append((time.perf_counter_ns() - begin) / 1e6)
        image = new_image
    print(f"one-partition delta + plan at {topics} topics, {changes} changes: "
          f"p50 {_pct(costs_ms, 0.5):.3f} ms, p99 {_pct(costs_ms, 0.99):.3f} ms, "
          f"max {max(costs_ms):.3f} ms")


def bench_catchup(partitions: int, sample: int) -> None:
    per_topic = 10
    topics = partitions // per_topic
    with tempfile.TemporaryDirectory() as tmp:
        sid = SnapshotId(partitions + topics + 1, 1)
        started = time.perf_counter()
        writer = SnapshotWriter(Path(tmp) / "snap", sid)

        def records() -> object:
            for t in range(topics):
                tid = f"{t:08d}-0000-0000-0000-000000000000"
                yield encode_record(make_record(pb.TopicRecord(name=f"topic-{t}", topic_id=tid)))
                for p in range(per_topic):
                    reps = _replicas(t + p)
                    yield encode_record(make_record(pb.PartitionRecord(
                        topic_id=tid, partition_id=p, replicas=reps, isr=reps, leader=reps[0],
                        leader_epoch=3, partition_epoch=7)))

        writer.append(records())  # type: ignore[arg-type]
        path = writer.freeze()
        size = path.stat().st_size
        print(f"snapshot: {partitions} partitions, {size / 1e6:.1f} MB, written in "
              f"{time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        image = read_snapshot_image(path, sid.end_offset)
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        plan = plan_full({}, image, 1)
        plan_s = time.perf_counter() - started
        local = len(plan.instructions)
        store = LocalPartitionStore(Path(tmp) / "broker")
        started = time.perf_counter()
        store.apply_all(plan.instructions[:sample])
        write_s = (time.perf_counter() - started) / min(sample, local) * local
        assert all(isinstance(i, BecomeLeader) or True for i in plan.instructions)
        scale = 1_000_000 / partitions
        print(f"load (read+decode+build image): {load_s:.2f} s; plan_full: {plan_s:.2f} s "
              f"({local} local replicas); local state writes: {write_s:.1f} s extrapolated "
              f"from {sample}")
        print(f"extrapolated to 1M partitions (linear): load {load_s * scale:.1f} s, "
              f"plan {plan_s * scale:.1f} s, writes {write_s * scale:.0f} s")


_RECONCILED = re.compile(r"event=reconciled .*?wall_ms=(\d+)")


def bench_propagation(brokers: int, changes: int) -> None:
    from controller.metadata import CreatableTopic, ReassignmentRequest
    from tests.support.broker_processes import BrokerCluster, wait_for

    with tempfile.TemporaryDirectory() as tmp:
        cluster = BrokerCluster(Path(tmp), brokers=range(1, brokers + 1),
                                session_timeout_ms=5_000, heartbeat_interval_ms=500)
        try:
            cluster.start()
            cluster.wait_running(timeout_s=90)
            ids = tuple(range(1, brokers + 1))
            with cluster.admin() as admin:
                result = admin.create_topics([CreatableTopic(
                    "prop", assignments=tuple(ids[i:] + ids[:i] for i in range(brokers)))])
                assert result[0].error.ok, result
                time.sleep(2.0)
                sends: list[tuple[int, int, int]] = []  # (send wall ms, ack wall ms, epoch)
                for k in range(changes):
                    p = k % brokers
                    reg = admin.describe_topics(["prop"])[0].partitions[p].registration
                    # Rotate the followers (keep the leader first): no leader change.
                    reps = reg.replicas
                    target = (reps[0], *reps[2:], reps[1])
                    t_send = time.time_ns() // 1_000_000
                    out = admin.alter_partition_reassignments(
                        [ReassignmentRequest("prop", p, target)])
                    t_ack = time.time_ns() // 1_000_000
                    assert out[0].error.ok, out
                    epoch = reg.partition_epoch + 1

                    def everyone(p: int = p, epoch: int = epoch) -> bool:
                        for b in cluster.brokers.values():
                            state = b.local_state().get(f"prop-{p}")
                            if state is None or state["partition_epoch"] < epoch:
                                return False
                        return True

                    wait_for(everyone, 20, f"change {k} everywhere", 0.01)
                    sends.append((t_send, t_ack, epoch))
                    time.sleep(0.05)
            from_send: list[float] = []
            from_ack: list[float] = []
            lines = {b: [int(m.group(1)) for m in _RECONCILED.finditer(broker.log_text())]
                     for b, broker in cluster.brokers.items()}
            for t_send, t_ack, _ in sends:
                last = max(min(w for w in walls if w >= t_send) for walls in lines.values())
                from_send.append(last - t_send)
                from_ack.append(max(0, last - t_ack))
            print(f"{brokers} brokers, {changes} changes: send -> all reconciled p50 "
                  f"{_pct(from_send, 0.5):.0f} ms, p99 {_pct(from_send, 0.99):.0f} ms, max "
                  f"{max(from_send):.0f} ms; ack -> all reconciled p50 "
                  f"{_pct(from_ack, 0.5):.0f} ms, p99 {_pct(from_ack, 0.99):.0f} ms "
                  f"(mean {statistics.mean(from_ack):.1f})")
        finally:
            cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    d = sub.add_parser("delta")
    d.add_argument("--topics", type=int, default=100_000)
    d.add_argument("--changes", type=int, default=2_000)
    c = sub.add_parser("catchup")
    c.add_argument("--partitions", type=int, default=200_000)
    c.add_argument("--sample", type=int, default=2_000)
    p = sub.add_parser("propagation")
    p.add_argument("--brokers", type=int, default=10)
    p.add_argument("--changes", type=int, default=100)
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}")
    if args.what == "delta":
        bench_delta(args.topics, args.changes)
    elif args.what == "catchup":
        bench_catchup(args.partitions, args.sample)
    else:
        bench_propagation(args.brokers, args.changes)


if __name__ == "__main__":
    main()
