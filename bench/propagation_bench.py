"""Broker propagation benchmark: how fast metadata changes reach the brokers.

    .venv/bin/python bench/propagation_bench.py delta [--topics 100000] [--changes 2000]
    .venv/bin/python bench/propagation_bench.py catchup [--partitions 1000000] [--dir D]
    .venv/bin/python bench/propagation_bench.py propagation [--brokers 10] [--changes 100]

`delta` (in process): an image of T topics (3 partitions each, RF 3 over 10
brokers), then C one-partition changes (a leader move), each through
`MetadataDelta` → next image → `plan_delta` for one broker. Figures: p50/p99/max
per change.

`catchup` (in process): a snapshot file of P partitions (default 1M; RF 3 over 10
brokers, so ~30% are local to a broker) is written with the controller's
`SnapshotWriter`; then one broker's catch-up into an empty data dir is timed end
to end (opening the snapshot file → local state durable), through the agent's own
path: read + verify + decode + bulk image build (`read_snapshot_image`) while the
agent prewrites the local replicas' temp files on its write threads, then the
full reconcile (`plan_full` + `LocalPartitionStore.apply_all`: a directory and an
atomic state.json per local replica, durable by grouped `syncfs`). Prints the
phases, CPU time, peak RSS and the load average, then what a restart with that
state intact costs (scan + plan, nothing to write). `--no-prewrite` writes only
after the decode; `--keep` leaves the data (see the note it prints on deletes).

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
import gc
import os
import platform
import re
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_agent.agent import BrokerAgent
from broker_agent.delta import MetadataDelta
from broker_agent.image import MetadataImage, topic_image
from broker_agent.local_state import WRITE_THREADS, LocalPartitionStore, syncfs
from broker_agent.pmap import PersistentMap
from broker_agent.reconciler import plan_delta, plan_full
from broker_agent.snapshot_load import read_snapshot_image
from controller.logformat import SnapshotId
from controller.records import encode_record, make_record
from controller.records import metadata_pb2 as pb
from controller.records.domain import PartitionRegistration
from controller.storage.snapshot_file import SnapshotWriter

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


def _write_snapshot(directory: Path, partitions: int, per_topic: int) -> tuple[Path, SnapshotId]:
    """A snapshot of `partitions` partitions (RF 3 over 10 brokers). Epochs and ISRs
    vary per partition, as in a cluster that has lived a while."""
    topics = partitions // per_topic
    sid = SnapshotId(partitions + topics + 1, 1)
    writer = SnapshotWriter(directory, sid)

    def records() -> Iterator[bytes]:
        for t in range(topics):
            tid = f"{t:08d}-{t % 65536:04x}-4000-8000-{t * 2654435761 % 2**48:012x}"
            yield encode_record(make_record(pb.TopicRecord(name=f"topic-{t}", topic_id=tid)))
            for p in range(per_topic):
                reps = _replicas(t + p)
                leader_epoch = (t * 7 + p) % 13
                yield encode_record(make_record(pb.PartitionRecord(
                    topic_id=tid, partition_id=p, replicas=reps,
                    isr=reps if (t + p) % 10 else reps[:2], leader=reps[0] if (t + p) % 7 else reps[1],
                    leader_epoch=leader_epoch,
                    partition_epoch=leader_epoch + (t * 31 + p) % 101)))

    writer.append(records())
    return writer.freeze(), sid


def _rusage() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def bench_catchup(partitions: int, directory: Path | None, threads: int, broker: int,
                  prewrite: bool, keep: bool) -> None:
    """One broker's catch-up from a snapshot into an empty data dir, end to end: from
    opening the snapshot file to its local state durable on disk."""
    per_topic = 10
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        started = time.perf_counter()
        path, sid = _write_snapshot(Path(tmp) / "snapshots", partitions, per_topic)
        size = path.stat().st_size
        print(f"snapshot: {partitions} partitions, {size / 1e6:.1f} MB, written in "
              f"{time.perf_counter() - started:.1f} s (not part of the catch-up)")
        store = LocalPartitionStore(Path(tmp) / "broker", write_threads=threads)
        agent = BrokerAgent(broker, store)
        gc.collect()
        load_before = os.getloadavg()[0]
        cpu0 = _rusage()
        t0 = time.perf_counter()
        # What the broker does (loader.on_snapshot_loaded, then the agent's worker):
        # decode the snapshot while prewriting the local replicas' state, then the
        # full plan against the data dir and its grouped, durable apply.
        image = read_snapshot_image(path, sid.end_offset, agent if prewrite else None)
        t1 = time.perf_counter()
        agent.publish_full(image)
        agent.flush()
        t2 = time.perf_counter()
        cpu1 = _rusage()
        assert agent.failure is None, agent.failure
        applied = store.last_apply_phases
        reconcile = t2 - t1
        phases = ", ".join(f"{k} {v:.2f} s" for k, v in applied.items())
        local = len(store.replicas)
        print(f"catch-up, broker {broker}, {local} local replicas ({threads} write threads, "
              f"prewrite {'on' if prewrite else 'off'}): TOTAL {t2 - t0:.2f} s = load "
              f"(read+verify+decode+build image{', prewrites' if prewrite else ''}) "
              f"{t1 - t0:.2f} s + full reconcile {reconcile:.2f} s (scan+plan_full "
              f"{reconcile - sum(applied.values()):.2f} s, {phases})")
        print(f"  cpu user {cpu1[0] - cpu0[0]:.1f} s, sys {cpu1[1] - cpu0[1]:.1f} s; "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
              f"load avg {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
        agent.close()
        # A restart with the data dir intact: the same image plans nothing.
        t4 = time.perf_counter()
        again = plan_full(LocalPartitionStore(Path(tmp) / "broker").load(), image, broker)
        print(f"restart with the state on disk: scan + plan_full {time.perf_counter() - t4:.2f} s, "
              f"{len(again.instructions)} instructions")
        assert again.empty
        t5 = time.perf_counter()
        if keep:
            kept = Path(tempfile.mkdtemp(dir=directory, prefix="kept-"))
            os.rename(tmp, kept / "run")
            os.mkdir(tmp)  # for TemporaryDirectory's cleanup
            print(f"kept in {kept} (delete it later: see below)")
    syncfs(Path(directory or tempfile.gettempdir()))
    print(f"cleanup (rm -r + syncfs) {time.perf_counter() - t5:.1f} s. Note: ext4 without a "
          "journal skips inodes freed in the last 1-6 minutes when it allocates, so a run "
          "soon after a large delete nearby is much slower (hence --keep)")


_RECONCILED = re.compile(r"event=reconciled .*?wall_ms=(\d+)")


def bench_propagation(brokers: int, changes: int) -> None:
    from controller.metadata import CreatableTopic, ReassignmentRequest
    from tests.support.broker_processes import BrokerCluster
    from tests.support.polling import wait_until

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

                    wait_until(everyone, 20, f"change {k} everywhere", 0.01)
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
    c.add_argument("--partitions", type=int, default=1_000_000)
    c.add_argument("--dir", type=Path, default=None,
                   help="where the scratch data dir goes (default: the temp dir)")
    c.add_argument("--threads", type=int, default=WRITE_THREADS,
                   help="local state write threads")
    c.add_argument("--broker", type=int, default=1)
    c.add_argument("--no-prewrite", dest="prewrite", action="store_false",
                   help="write the local state only after the whole snapshot is decoded")
    c.add_argument("--keep", action="store_true",
                   help="leave the data dir (moved under --dir) instead of deleting it")
    p = sub.add_parser("propagation")
    p.add_argument("--brokers", type=int, default=10)
    p.add_argument("--changes", type=int, default=100)
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}")
    if args.what == "delta":
        bench_delta(args.topics, args.changes)
    elif args.what == "catchup":
        bench_catchup(args.partitions, args.dir, args.threads, args.broker, args.prewrite,
                      args.keep)
    else:
        bench_propagation(args.brokers, args.changes)


if __name__ == "__main__":
    main()
