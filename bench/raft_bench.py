"""Raft quorum benchmark: commit throughput and latency, and failover time.

    .venv/bin/python bench/raft_bench.py [--dir /tmp] [--seconds 5] [--kills 10]

Three voter processes (tests.support.quorum_harness.node_main, default timeouts, fsync on
every flush) on loopback, each with its own data dir under `--dir`. The load
generator is this process: P concurrent proposers (grpc.aio tasks), each sending
one Propose of R records to the leader and the next as soon as it commits.
Records are encoded PartitionRecords (~60 bytes, controller.records).

- throughput: committed records/s over the measured window (after a warm-up);
- latency: one Propose call as the client sees it (leader append, replication,
  fsync on a majority, commit), p50 and p99;
- spurious elections: epoch changes during the load phases (should be none);
- failover: kill -9 of the leader, then time until a Propose commits on a new
  leader (the client tries every survivor every ~5 ms); the killed node is
  restarted and caught up before the next kill.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from controller.records import PartitionRecord, encode_record, make_record
from controller.rpc import create_channel
from tests.support.polling import wait_until
from tests.support.quorum_harness import harness_pb2 as hpb
from tests.support.quorum_harness import harness_pb2_grpc as hpb_grpc
from tests.support.raft_node_process import Quorum

PROPOSERS = (1, 16, 64)
RECORDS_PER_PROPOSAL = (1, 100)


def partition_records(n: int) -> list[bytes]:
    topic_id = str(uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0))
    return [encode_record(make_record(PartitionRecord(
        partition_id=i, topic_id=topic_id, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1 + i % 3,
        leader_epoch=7, partition_epoch=12))) for i in range(n)]


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


async def load(address: str, proposers: int, per_proposal: int, warmup_s: float,
               seconds: float) -> tuple[float, list[float], int]:
    """Returns (committed records/s, latencies in ms, errors) over the window."""
    records = partition_records(per_proposal)
    request = hpb.ProposeRequest(records=records)
    channel = create_channel(address)
    stub = hpb_grpc.QuorumHarnessStub(channel)
    loop = asyncio.get_running_loop()
    start = loop.time() + warmup_s
    end = start + seconds
    latencies: list[float] = []
    committed = 0
    errors = 0

    async def proposer() -> None:
        nonlocal committed, errors
        while True:
            t0 = loop.time()
            if t0 >= end:
                return
            try:
                resp = await stub.Propose(request, timeout=10)
            except grpc.aio.AioRpcError:
                errors += 1
                continue
            t1 = loop.time()
            if resp.error:
                errors += 1
            elif t0 >= start and t1 <= end:
                latencies.append((t1 - t0) * 1e3)
                committed += per_proposal

    await asyncio.gather(*(proposer() for _ in range(proposers)))
    await channel.close(grace=None)
    return committed / seconds, sorted(latencies), errors


def throughput(q: Quorum, warmup_s: float, seconds: float) -> list[str]:
    rows = []
    for per_proposal in RECORDS_PER_PROPOSAL:
        for proposers in PROPOSERS:
            leader = q.wait_for_leader(10)
            epoch = q.nodes[leader].status().epoch  # type: ignore[union-attr]
            rate, lat, errors = asyncio.run(load(q.nodes[leader].address, proposers,
                                                 per_proposal, warmup_s, seconds))
            after = q.nodes[leader].status()
            elections = (after.epoch - epoch) if after is not None else -1
            row = (f"| {proposers} | {per_proposal} | {rate:,.0f} | {percentile(lat, 0.5):.1f} "
                   f"| {percentile(lat, 0.99):.1f} | {len(lat)} | {errors} | {elections} |")
            print(row, flush=True)
            rows.append(row)
    return rows


def first_commit_after_kill(q: Quorum, old: int, old_epoch: int, limit_s: float) -> float:
    survivors = [q.nodes[i] for i in q.nodes if i != old]
    record = partition_records(1)
    t0 = time.monotonic()
    q.nodes[old].kill()
    while time.monotonic() - t0 < limit_s:
        for node in survivors:
            try:
                resp = node.propose(record, timeout_s=0.5)
            except grpc.RpcError:
                continue
            if not resp.error and resp.epoch > old_epoch:
                return time.monotonic() - t0
        time.sleep(0.005)
    raise AssertionError(f"no commit within {limit_s}s of killing node {old}")


def failover(q: Quorum, kills: int) -> list[float]:
    times = []
    for k in range(kills):
        leader = q.wait_for_leader(10)
        q.propose(partition_records(1))
        epoch = q.nodes[leader].status().epoch  # type: ignore[union-attr]
        took = first_commit_after_kill(q, leader, epoch, 15)
        times.append(took)
        print(f"kill {k + 1}: node {leader} (epoch {epoch}) -> commit after {took * 1e3:.0f} ms",
              flush=True)
        q.nodes[leader].start()
        new_leader = q.wait_for_leader(10)
        hw = q.nodes[new_leader].status().high_watermark  # type: ignore[union-attr]

        def caught_up(node_id: int = leader, target: int = hw) -> bool:
            s = q.nodes[node_id].status()
            return s is not None and s.high_watermark >= target

        wait_until(caught_up, 15, f"node {leader} to catch up")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="raft-bench-", dir=args.dir))
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, data under {root}")
    print(f"# load average before: {os.getloadavg()}")
    q = Quorum(root)
    try:
        q.start()
        q.wait_for_leader(15)
        print("| proposers | records/proposal | committed records/s | p50 ms | p99 ms "
              "| proposals | errors | elections |")
        print("|---|---|---|---|---|---|---|---|")
        throughput(q, args.warmup, args.seconds)
        times = sorted(failover(q, args.kills))
        ms = [t * 1e3 for t in times]
        print(f"failover over {len(ms)} kills: p50 {statistics.median(ms):.0f} ms, "
              f"p99 {percentile(ms, 0.99):.0f} ms, max {ms[-1]:.0f} ms, min {ms[0]:.0f} ms")
    finally:
        q.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
