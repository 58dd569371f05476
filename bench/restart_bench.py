"""A follower restarted at a million partitions (keys): how long until it has caught up.

    .venv/bin/python bench/restart_bench.py [--partitions 1000000] [--systems metakraft,etcd]
        [--rounds 1] [--down-s 5] [--settle-s 10]

Both systems run three server processes on loopback with their defaults (fsync on).
Each is filled with `--partitions` items while one client writes small changes in a
closed loop the whole time (the load that keeps going through the restart):

- metakraft: 12 brokers registered and heartbeating, topics of 100 partitions (RF 3)
  created by 4 threads, a config change per write as the load.
- etcd 3.4: keys of 100-byte values put by Txns of 100 (etcd's limit is 128 per
  Txn) from 8 concurrent clients, a 100-byte Put per write as the load.

Then, after `--settle-s` more seconds of load, a follower is killed (kill -9), left
down `--down-s` seconds, and started again. Measured: from its start until it has
applied everything the leader had committed when it was started (metakraft: the
follower's `applied_offset` (DescribeNode) reaches the leader's high watermark;
etcd: the member's `raftAppliedIndex` (Maintenance.Status) reaches the leader's
`raftIndex`, its committed index). Polled every 20 ms. For metakraft it also prints
what the follower loaded: its newest snapshot's end against the target (the share
of the log the snapshot covered) and how many records it replayed past it.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from failover_bench import Brokers, ClosedLoop, Load, create_partitions
from peer_bench import VALUE, EtcdCluster, ensure_packages, etcd_put, etcd_txn

from controller.api.client import AdminClient
from controller.storage import snapshot_file as sf
from controller.storage.meta_properties import DataDir
from tests.support.controller_processes import ControllerCluster
from tests.support.polling import wait_until

POLL_S = 0.02
BROKERS = 12


# -------------------------------------------------------------------- metakraft


def run_metakraft(root: Path, args: argparse.Namespace) -> float:
    cluster = ControllerCluster(root, 3)
    brokers = load = None
    try:
        cluster.start()
        wait_until(cluster.active_node, 30, "an active controller")
        brokers = Brokers(cluster, list(range(1, BROKERS + 1)))
        wait_until(lambda: len(brokers.unfenced) == BROKERS, 60, "every broker unfenced")
        load = Load(cluster.bootstrap)
        took = create_partitions(cluster.bootstrap, args.partitions, 4)
        print(f"  metakraft: {args.partitions:,} partitions created in {took:.1f} s", flush=True)
        time.sleep(args.settle_s)
        active = cluster.active_node()
        assert active is not None
        victim = next(n for n in cluster.nodes.values() if n is not active)
        victim.kill()
        killed_s = time.time()
        time.sleep(args.down_s)
        with AdminClient(cluster.bootstrap, timeout_ms=30_000) as admin:
            target = admin.describe_quorum().high_watermark
        snapshot = sf.latest_snapshot(DataDir(victim.data_dir).snapshot_dir)
        started, started_wall = time.monotonic(), time.time()
        victim.start()
        probe = AdminClient([victim.address], timeout_ms=2_000)

        def applied() -> bool:
            try:
                return probe.describe_node().applied_offset >= target
            except Exception:  # not serving yet
                return False

        wait_until(applied, 600, "the restarted follower caught up", interval_s=POLL_S)
        took_s = time.monotonic() - started
        probe.close()
        covered = 0 if snapshot is None else snapshot.end_offset
        phases = _phases(victim.log_path.read_text(), started_wall)
        print(f"  metakraft: follower {victim.node_id} caught up in {took_s:.2f} s "
              f"(target offset {target:,}; its newest snapshot ends at {covered:,}: "
              f"{100 * covered / max(1, target):.0f}% of the log, {target - covered:,} "
              f"records replayed past it); load meanwhile: "
              f"{load.window(killed_s, time.time())}", flush=True)
        print(f"  metakraft: after its start: {phases}", flush=True)
        written = re.findall(r"ts=(\S+) \S+ \S+ event=snapshot_written end_offset=(\d+)"
                             r".* ms=(\d+)", victim.log_path.read_text())
        print("  metakraft: its snapshots before the kill (written at, end offset, ms to "
              "write): " + "; ".join(f"{t[11:19]} {int(e):,} {int(ms):,}"
                                     for t, e, ms in written), flush=True)
        return took_s
    finally:
        if load is not None:
            load.close()
        if brokers is not None:
            brokers.close()
        cluster.close()


def _phases(log_text: str, started_wall: float) -> str:
    """When the restarted controller logged its start-up steps, in seconds after it
    was started: the snapshot loaded, Raft started, serving."""
    out = []
    for event in ("snapshot_loaded", "raft_started", "serving"):
        found = re.findall(rf"ts=(\S+) \S+ \S+ event={event}\b", log_text)
        if found:
            at = datetime.fromisoformat(found[-1].replace("Z", "+00:00")).timestamp()
            out.append(f"{event} +{at - started_wall:.2f} s")
    return ", ".join(out) or "(no start-up lines in its log)"


# -------------------------------------------------------------------- etcd


def _varints(message: bytes) -> dict[int, int]:
    """The top-level varint fields of a protobuf message (others skipped)."""
    out: dict[int, int] = {}
    i = 0
    while i < len(message):
        key, i = _varint(message, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            out[field], i = _varint(message, i)
        elif wire == 2:
            length, i = _varint(message, i)
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


class RestartableEtcd(EtcdCluster):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.argv: dict[str, list[str]] = {}

    def spawn(self, name: str, argv: list[str]) -> None:
        self.argv[name] = argv
        super().spawn(name, argv)

    def respawn(self, index: int) -> subprocess.Popen[bytes]:
        name = f"e{index}"
        with (self.root / f"{name}.out").open("ab") as out:
            proc = subprocess.Popen(self.argv[name], stdout=out, stderr=subprocess.STDOUT,
                                    cwd=self.root)
        self.procs[index] = proc
        return proc


def _status(channel_address: str) -> dict[int, int]:
    """etcd Maintenance.Status: 5 raftIndex (committed), 7 raftAppliedIndex."""
    import grpc

    with grpc.insecure_channel(channel_address) as channel:
        status = channel.unary_unary("/etcdserverpb.Maintenance/Status")
        return _varints(status(b"", timeout=1))


async def _etcd_fill(address: str, keys: int, clients: int) -> None:
    import grpc

    per_txn = 100
    txns = list(range(0, keys, per_txn))

    async def client(mine: list[int]) -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            txn = channel.unary_unary("/etcdserverpb.KV/Txn")
            for start in mine:
                await txn(etcd_txn([f"/p/{i:08d}".encode()
                                    for i in range(start, min(keys, start + per_txn))]))

    await asyncio.gather(*(client(txns[i::clients]) for i in range(clients)))


def etcd_load(address: str) -> ClosedLoop:
    """One closed-loop client putting 100-byte values under 1,000 keys."""
    import grpc

    channel = grpc.insecure_channel(address)
    put = channel.unary_unary("/etcdserverpb.KV/Put")

    def write(n: int) -> str:
        put(etcd_put(f"/load/{n % 1000}".encode()), timeout=10)
        return ""

    return ClosedLoop(write, channel.close)


def run_etcd(root: Path, args: argparse.Namespace) -> float:
    cluster = RestartableEtcd(root)
    load = None
    try:
        cluster.start()
        leader = cluster.leader()
        load = etcd_load(leader)
        t = time.monotonic()
        asyncio.run(_etcd_fill(leader, args.partitions, 8))
        print(f"  etcd: {args.partitions:,} keys put in {time.monotonic() - t:.1f} s "
              f"({len(VALUE)}-byte values)", flush=True)
        time.sleep(args.settle_s)
        leader = cluster.leader()
        index = next(i for i, a in enumerate(cluster.client) if a != leader)
        cluster.procs[index].kill()
        cluster.procs[index].wait(10)
        killed_s = time.time()
        time.sleep(args.down_s)
        target = _status(leader)[5]
        started = time.monotonic()
        cluster.respawn(index)

        def applied() -> bool:
            try:
                return _status(cluster.client[index]).get(7, 0) >= target
            except Exception:  # not serving yet
                return False

        wait_until(applied, 600, "the restarted member caught up", interval_s=POLL_S)
        took_s = time.monotonic() - started
        print(f"  etcd: member e{index} caught up in {took_s:.2f} s (target index "
              f"{target:,}); load meanwhile: "
              f"{load.window(killed_s, time.time())}", flush=True)
        return took_s
    finally:
        if load is not None:
            load.close()
        cluster.close()


# -------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--systems", default="metakraft,etcd")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--down-s", type=float, default=5.0)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    systems = args.systems.split(",")
    if "etcd" in systems:
        ensure_packages()
    runners = {"metakraft": run_metakraft, "etcd": run_etcd}
    results: dict[str, list[float]] = {s: [] for s in systems}
    for r in range(args.rounds):
        # The order rotates so drift in the machine does not favour one system.
        for system in systems[r % len(systems):] + systems[:r % len(systems)]:
            root = Path(tempfile.mkdtemp(prefix=f"restart-bench-{system}-", dir=args.dir))
            try:
                print(f"round {r + 1}: {system}", flush=True)
                results[system].append(runners[system](root, args))
            finally:
                shutil.rmtree(root, ignore_errors=True)
    for system, took in results.items():
        print(f"{system}: follower caught up in " + ", ".join(f"{t:.2f}" for t in took) + " s")


if __name__ == "__main__":
    main()
