"""Watch benchmark: watchers of the live log on a real quorum, and a watch replaying
a large history from the tier.

    .venv/bin/python bench/watch_bench.py live [--watchers 100] [--clients 16] [--seconds 10]
    .venv/bin/python bench/watch_bench.py replay [--records 10000000] [--dir D]

`live`: three `metakraft controller` processes on loopback (fsync on), 12 brokers
registered. Two measured windows of `--seconds` each, in the same run: 16
closed-loop writers (CreateTopics of one 1-partition topic, `controller_bench`'s
client processes) without watchers, then with `--watchers` watches on the active
controller (all changes, from the start of the window: the heaviest place to put
them), run by 4 watcher processes on grpc.aio. Figures: writes/s both ways (the
ratio is what watchers cost the writers), commit -> delivered latency p50/p99
(the watcher's receive time minus the batch's append time: one clock, one
machine, so an upper bound of the time from commit), events delivered per second,
and the active controller's CPU per delivered event (CPU with watchers minus CPU
without, per event; the writes are not the same count, so the writes' own CPU is
scaled by the write ratio first).

`replay` (in process): a log of `--records` records (the audit bench's busy-cluster
mix, `audit_bench.write_log`) is copied into a directory tier as the tier copier
does (one object a segment, real manifests); then one watch from offset 0 of every
change, through the real `WatchService` loop, `HistoryReader` and `TierSource`
(no local log below the tier's end), into a counting context: events/s, and CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from controller_bench import BROKERS, machine, measure, proc_cpu_s

from controller.api import admin_pb2 as apb
from controller.api import admin_pb2_grpc as apb_grpc

WATCHER_PROCS = 4


# ------------------------------------------------------------------------- live


def _watcher_proc(address: str, watchers: int, start_at: float, stop_at: float,
                  out: mp.Queue[object]) -> None:
    """`watchers` watches of everything from now on one controller; reports (events
    in the window, latencies ms, errors)."""
    import grpc.aio

    async def run() -> tuple[int, list[float], list[str]]:
        latencies: list[float] = []
        errors: list[str] = []
        count = [0]
        async with grpc.aio.insecure_channel(address) as channel:
            stub = apb_grpc.AdminStub(channel)

            async def one() -> None:
                call = stub.Watch(apb.WatchRequest())
                try:
                    async for response in call:
                        now_ms = time.time() * 1e3
                        if now_ms / 1e3 > stop_at:
                            break
                        if now_ms / 1e3 >= start_at:
                            count[0] += len(response.events)
                            latencies.extend(now_ms - e.append_time_ms for e in response.events)
                except grpc.aio.AioRpcError as exc:
                    errors.append(f"{exc.code().name}: {exc.details()}")
                finally:
                    call.cancel()

            await asyncio.gather(*(one() for _ in range(watchers)))
        return count[0], latencies, errors[:3]

    events, latencies, errors = asyncio.run(run())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((events, latencies, errors, usage.ru_utime + usage.ru_stime))


def run_live(args: argparse.Namespace) -> None:
    from tests.support.controller_processes import ControllerCluster
    from tests.support.polling import wait_until

    root = Path(tempfile.mkdtemp(prefix="watch-bench-", dir=args.dir))
    cluster = ControllerCluster(root, 3)
    try:
        cluster.start()
        cluster.register_brokers(list(range(1, BROKERS + 1)), timeout_s=30)
        active = wait_until(cluster.active_node, 10, "an active controller")
        assert active.proc is not None
        watched_node = active if args.on == "active" else next(
            n for n in cluster.nodes.values() if n is not active)
        print(f"# {machine()}")
        print(f"# {args.clients} writers (1-partition CreateTopics), {args.seconds}s windows "
              f"after {args.warmup}s warm-up; {args.watchers} watchers on the {args.on} controller")
        args.procs, args.topics_per_request = 4, 1
        assert watched_node.proc is not None
        pid = watched_node.proc.pid
        cpu0 = proc_cpu_s(pid)
        bare = measure(cluster, args.clients, 1, args, "bare")
        cpu_bare = proc_cpu_s(pid) - cpu0
        ctx = mp.get_context("spawn")
        out: mp.Queue[object] = ctx.Queue()
        start_at = time.time() + args.startup + args.warmup
        stop_at = start_at + args.seconds
        per = args.watchers // WATCHER_PROCS
        procs = [ctx.Process(target=_watcher_proc, args=(
            watched_node.address, per + (1 if i < args.watchers % WATCHER_PROCS else 0),
            start_at, stop_at, out)) for i in range(WATCHER_PROCS)]
        for p in procs:
            p.start()
        cpu1 = proc_cpu_s(pid)
        watched = measure(cluster, args.clients, 1, args, "watched")
        cpu_watched = proc_cpu_s(pid) - cpu1
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(30)
        events = sum(r[0] for r in results)  # type: ignore[index]
        lat = sorted(x for r in results for x in r[1])  # type: ignore[index]
        errors = [e for r in results for e in r[2]]  # type: ignore[index]
        print(f"writes/s without watchers {bare.topics_per_s:.0f}, with "
              f"{args.watchers}: {watched.topics_per_s:.0f} "
              f"({watched.topics_per_s / bare.topics_per_s:.2f}x)")
        if lat:
            print(f"commit -> delivered: p50 {statistics.median(lat):.1f} ms, p99 "
                  f"{lat[int(0.99 * (len(lat) - 1))]:.1f} ms over {len(lat)} events "
                  f"({events / args.seconds:.0f} events/s delivered)")
        # The watched controller's CPU over each whole run (warm-up and start-up too):
        # the writes' share scaled to the watched run's writes, the rest is the watchers'.
        write_share = cpu_bare * watched.topics_per_s / max(bare.topics_per_s, 1e-9)
        if events:
            print(f"{args.on} controller CPU: {cpu_bare:.1f}s bare, {cpu_watched:.1f}s "
                  f"watched; per delivered event ~{(cpu_watched - write_share) / events * 1e6:.0f}"
                  " us")
        clients_cpu = sum(r[3] for r in results)  # type: ignore[index]
        print(f"watcher processes' CPU: {clients_cpu:.1f}s (the writers' clients: "
              f"{watched.client_cpu_s:.1f}s); the machine has {os.cpu_count()} cores for all")
        if errors:
            print(f"watch errors: {errors}")
    finally:
        cluster.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------- replay


class CountingContext:
    def __init__(self) -> None:
        self.events = 0
        self.next_offset = 0

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def auth_context(self) -> dict[str, Any]:
        return {}

    async def write(self, raw: bytes) -> None:
        response = apb.WatchResponse.FromString(raw)
        self.events += len(response.events)
        self.next_offset = response.next_offset

    async def abort(self, code: Any, details: str = "", trailing_metadata: Any = ()) -> NoReturn:
        raise RuntimeError(f"{code}: {details}")


class NoLocalLog:
    """A controller whose local log starts at the end of the tier (all trimmed)."""

    def __init__(self, end: int) -> None:
        self.end = end

    def local_start_offset(self) -> int:
        return self.end

    def read_committed_batches(self, from_offset: int, to_offset: int,
                               max_bytes: int) -> list[Any]:
        return []


def tier_from_log(log_dir: Path, tier_dir: Path, cluster_id: str) -> int:
    """Copy every segment of `log_dir` into a directory tier as the copier does;
    returns the end offset."""
    from controller.storage.segment import parse_segment_file_name
    from controller.tier.history import claim_tier
    from controller.tier.objects import segment_manifest
    from controller.tier.remote import open_store

    store = open_store(tier_dir.as_uri())
    claim_tier(store, cluster_id)
    bases = sorted((b, p) for p in (log_dir / "metadata").iterdir()
                   if (b := parse_segment_file_name(p.name)) is not None)
    end = 0
    for base, path in bases:
        data = path.read_bytes()
        if not data:
            continue
        manifest = segment_manifest(cluster_id, uuid.uuid4().hex, base, data, copier_id=1,
                                    copier_epoch=1)
        store.put(manifest.data_key, data)
        store.put(manifest.manifest_key, manifest.encode())
        end = manifest.end_offset
    return end


def run_replay(args: argparse.Namespace) -> None:
    from audit_bench import write_log

    from controller.security.access import OPEN
    from controller.tier.remote import open_store
    from controller.watch.history import HistoryReader, TierSource
    from controller.watch.hub import WatchHub
    from controller.watch.service import WatchService

    root = Path(tempfile.mkdtemp(prefix="watch-replay-", dir=args.dir))
    try:
        print(f"# {machine()}")
        took = write_log(root / "log", args.records)
        cluster_id = "watch-bench-cluster"
        end = tier_from_log(root / "log", root / "tier", cluster_id)
        print(f"# {end} records written in {took:.0f}s and copied into a directory tier")
        hub = WatchHub()
        hub.advance(end)

        class Node:
            is_active = True

            def topic_name(self, _topic_id: str) -> str | None:
                return None

        tier = TierSource(open_store((root / "tier").as_uri()), cluster_id)
        service = WatchService(hub, HistoryReader(NoLocalLog(end), tier), Node(), OPEN)
        context = CountingContext()

        async def replay() -> None:
            task = asyncio.create_task(service.serve(
                apb.WatchRequest(from_offset=0).SerializeToString(), context))
            while context.next_offset < end:
                await asyncio.sleep(0.05)
            task.cancel()

        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        asyncio.run(replay())
        wall = time.perf_counter() - t0
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
        print(f"replayed {context.events} events (offsets 0..{end}) in {tier.objects_read} ranged "
              f"tier reads in {wall:.1f}s: {context.events / wall:,.0f} events/s, "
              f"{cpu / max(context.events, 1) * 1e6:.1f} us CPU an event")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    live = sub.add_parser("live")
    live.add_argument("--watchers", type=int, default=100)
    live.add_argument("--clients", type=int, default=16)
    live.add_argument("--seconds", type=float, default=10.0)
    live.add_argument("--warmup", type=float, default=2.0)
    live.add_argument("--startup", type=float, default=3.0)
    live.add_argument("--on", choices=("active", "standby"), default="active",
                      help="Where the watchers watch.")
    replay = sub.add_parser("replay")
    replay.add_argument("--records", type=int, default=10_000_000)
    for p in (live, replay):
        p.add_argument("--dir", default=None)
        p.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    run_live(args) if args.command == "live" else run_replay(args)


if __name__ == "__main__":
    main()
