"""What the client guarantees cost, and what a hung leader costs a client.

    .venv/bin/python bench/guarantees_bench.py paths [--seconds 8] [--rounds 2] [--clients 16]
    .venv/bin/python bench/guarantees_bench.py failover [--pauses 20]

`paths`: one 3-controller cluster of real processes (fsync on, 12 fake brokers, 200
topics). In interleaved rounds, closed-loop clients (threads over 2 processes) run:
- linearizable reads (the default: ReadIndex on the active controller),
- stale reads (any controller, its own committed state),
- small writes (a 1-record config change) with a request id (remembered in the
  replicated table of recent writes: one more record per write), and
- the same writes without a request id (not remembered),
and print reads or writes per second, p50 / p99 latency and the controllers' CPU.

`failover`: a 3-controller cluster with default settings and one client writing in a
closed loop (default AdminClient: 1 s per attempt, 30 s per call). Every few seconds
the active controller is paused with SIGSTOP for 6 s, then resumed; the figure is
the time from each SIGSTOP to the acknowledgement of the first write the client sent
after it (p50, p99, max): the write the pause caught must get through first, so this
counts one write more than the outage.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from controller_bench import BROKERS, machine, proc_cpu_s

from controller.api.client import AdminClient
from controller.api.seam import ReadConsistency
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    CreatableTopic,
    OpType,
    ResourceType,
)

TOPICS = 200
MODES = ("linearizable read", "stale read", "write, remembered", "write, no request id")

# (operations in the window, latencies in s, first errors)
Report = tuple[int, list[float], list[str]]


class _ForgetfulClient(AdminClient):
    """Sends writes without a request id: the controllers do not remember them."""

    def _new_request_id(self) -> str:
        return ""


def _worker(bootstrap: list[str], mode: str, threads: int, start_at: float, stop_at: float,
            out: mp.Queue[object]) -> None:
    latencies: list[float] = []
    errors: list[str] = []
    done = [0]
    lock = threading.Lock()

    def run(tid: int) -> None:
        kind = _ForgetfulClient if mode == MODES[3] else AdminClient
        consistency = ReadConsistency.STALE if mode == MODES[1] else \
            ReadConsistency.LINEARIZABLE
        # Stale readers spread over the controllers; the rest find the leader.
        order = bootstrap[tid % len(bootstrap):] + bootstrap[:tid % len(bootstrap)]
        client = kind(order, timeout_ms=30_000, consistency=consistency)
        client.describe_cluster()
        n = 0
        while time.time() < stop_at:
            topic = f"g{(tid * 7 + n) % TOPICS}"
            n += 1
            t0 = time.time()
            try:
                if mode in MODES[:2]:
                    client.describe_topics([topic])
                else:
                    results = client.incremental_alter_configs([AlterConfigsResource(
                        ConfigResource(ResourceType.TOPIC, topic),
                        (AlterConfigOp("retention.ms", OpType.SET, str(1000 + n)),))])
                    if not results[0].error.ok:
                        raise RuntimeError(str(results[0].error))
            except Exception as exc:  # reported, not raised: a bench counts failures
                with lock:
                    errors.append(repr(exc))
                continue
            t1 = time.time()
            if t0 >= start_at and t1 <= stop_at:
                with lock:
                    done[0] += 1
                    latencies.append(t1 - t0)
        client.close()

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out.put((done[0], latencies, errors[:3]))


def _measure(cluster: object, mode: str, args: argparse.Namespace) -> str:
    from tests.support.controller_processes import ControllerCluster

    assert isinstance(cluster, ControllerCluster)
    ctx = mp.get_context("spawn")
    out: mp.Queue[object] = ctx.Queue()
    pids = [n.proc.pid for n in cluster.nodes.values() if n.proc is not None]
    start_at = time.time() + 3.0 + args.warmup
    stop_at = start_at + args.seconds
    procs = [ctx.Process(target=_worker, args=(cluster.bootstrap, mode, args.clients // 2,
                                               start_at, stop_at, out)) for _ in range(2)]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start_at - time.time()))
    cpu0 = [proc_cpu_s(p) for p in pids]
    time.sleep(max(0.0, stop_at - time.time()))
    cpu = sum(proc_cpu_s(p) - c for p, c in zip(pids, cpu0, strict=True))
    reports = [cast(Report, out.get(timeout=120)) for _ in procs]
    for p in procs:
        p.join()
    lat = sorted(x for r in reports for x in r[1])
    count = sum(r[0] for r in reports)
    p50 = statistics.median(lat) * 1e3 if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3 if lat else float("nan")
    errors = [e for r in reports for e in r[2]]
    per_op_ms = cpu / count * 1e3 if count else float("nan")
    return (f"{mode:22s} {count / args.seconds:9.0f} {p50:7.1f} {p99:7.1f} {cpu:10.1f} "
            f"{per_op_ms:12.3f}  {len(errors)}{' ' + errors[0] if errors else ''}")


def run_paths(args: argparse.Namespace) -> None:
    from tests.support.controller_processes import ControllerCluster
    from tests.support.polling import wait_until

    root = Path(tempfile.mkdtemp(prefix="guarantees-bench-"))
    cluster = ControllerCluster(root, 3)
    try:
        cluster.start()
        cluster.register_brokers(list(range(1, BROKERS + 1)), timeout_s=30)
        wait_until(cluster.active_node, 10, "an active controller")
        with AdminClient(cluster.bootstrap, timeout_ms=30_000) as admin:
            for start in range(0, TOPICS, 50):
                admin.create_topics([CreatableTopic(f"g{i}", 1, 3)
                                     for i in range(start, start + 50)])
        print(f"# {machine()}")
        print(f"# 3 controllers, {BROKERS} brokers, {TOPICS} topics, {args.clients} "
              f"closed-loop clients, {args.seconds}s windows, {args.rounds} interleaved rounds")
        print("mode                     ops/s  p50 ms  p99 ms  ctrl cpu s  cpu ms/op  errors")
        for _ in range(args.rounds):
            for mode in MODES:
                print(_measure(cluster, mode, args), flush=True)
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


def run_failover(args: argparse.Namespace) -> None:
    from tests.support.controller_processes import ControllerCluster
    from tests.support.polling import wait_until

    root = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    cluster = ControllerCluster(root, 3)
    acked: list[tuple[float, float]] = []  # (sent, acknowledged)
    stop = threading.Event()
    lock = threading.Lock()

    def writer() -> None:
        with AdminClient(cluster.bootstrap) as admin:  # the defaults
            n = 0
            while not stop.is_set():
                n += 1
                sent = time.monotonic()
                admin.create_topics([CreatableTopic(f"f{n}", 1, 3)])
                with lock:
                    acked.append((sent, time.monotonic()))

    gaps: list[float] = []
    try:
        cluster.start()
        cluster.register_brokers([1, 2, 3], timeout_s=30)
        wait_until(cluster.active_node, 10, "an active controller")
        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(2.0)
        for _ in range(args.pauses):
            leader = wait_until(cluster.active_node, 30, "an active controller")
            paused_at = time.monotonic()
            leader.signal(signal.SIGSTOP)
            # The first write sent after the pause (the closed loop sends it once the
            # write caught by the pause is through): conservative by one write.
            after = wait_until(lambda since=paused_at: next(  # type: ignore[misc]
                (a for s, a in acked if s > since), None), 30, "a write acknowledged after it")
            gaps.append(after - paused_at)
            time.sleep(max(0.0, paused_at + 6.0 - time.monotonic()))
            leader.signal(signal.SIGCONT)
            time.sleep(2.0)
        stop.set()
        thread.join(60)
    finally:
        stop.set()
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
    gaps.sort()
    print(f"# {machine()}")
    print(f"# {args.pauses} SIGSTOPs of the active controller (6 s each), default settings")
    print(f"SIGSTOP -> next acknowledged write: p50 {statistics.median(gaps):.2f} s, "
          f"p99 {gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))]:.2f} s, max {gaps[-1]:.2f} s")
    print("# each:", " ".join(f"{g:.2f}" for g in gaps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    paths = sub.add_parser("paths")
    paths.add_argument("--seconds", type=float, default=8.0)
    paths.add_argument("--warmup", type=float, default=1.0)
    paths.add_argument("--rounds", type=int, default=2)
    paths.add_argument("--clients", type=int, default=16)
    failover = sub.add_parser("failover")
    failover.add_argument("--pauses", type=int, default=20)
    args = parser.parse_args()
    if args.command == "paths":
        run_paths(args)
    else:
        run_failover(args)


if __name__ == "__main__":
    main()
