"""Remote tier benchmark: copy throughput, write throughput with tiering on vs off,
and the audit read from the tier vs from a local log directory.

    .venv/bin/python bench/tier_bench.py copy   [--records 2000000]
    .venv/bin/python bench/tier_bench.py writes [--seconds 15 --clients 16 --rounds 2]
    .venv/bin/python bench/tier_bench.py audit  [--records 10000000 --cores 2]

copy: a generated log (bench/audit_bench.py's busy-cluster mix, real batches and
  CRCs, 8 MiB segments) is copied segment by segment the way the controller's
  copier does it (manifest: CRC-32C, offset/time indexes, epoch slice; data put,
  then manifest put) to a directory tier (real files, fsync) and to an
  S3-compatible server on loopback (moto's server mode, started here). Prints
  MB/s and records/s for each.
writes: 3 real controller processes, 12 registered brokers; clients create
  1-partition topics in a closed loop for --seconds; rounds alternate tiering off
  (no [tier]) and on (a directory tier, 2 s segments, 1 MiB snapshots, local
  retention 0, so copies and local deletion run during the window). Prints
  topics/s and p50/p99 per round and the on/off ratio (target: >= 0.95).
audit: the full `metakraft audit` (analytics.report.run_audit) of a generated log,
  read (a) from its local log directory and (b) from a directory tier holding all
  but its last segment, plus a local log directory holding that last segment; in
  one run, same Spark settings. Prints both times and the ratio (target <= 1.2).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.audit_bench import write_log
from bench.controller_bench import BROKERS, _client_proc, machine
from controller.storage.meta_properties import DataDir, format_data_dir, random_cluster_id
from controller.storage.segment import parse_segment_file_name
from controller.tier.history import claim_tier
from controller.tier.objects import segment_manifest
from controller.tier.remote import RemoteStorage, open_store

CLUSTER_ID = random_cluster_id()


def make_log(root: Path, records: int, segment_bytes: int) -> Path:
    """A formatted data dir holding a generated log of `records` records."""
    data_dir = root / "node"
    format_data_dir(data_dir, CLUSTER_ID, 1)
    seconds = write_log(data_dir, records, segment_bytes=segment_bytes)
    size = sum(p.stat().st_size for p in DataDir(data_dir).log_dir.glob("*.log"))
    print(f"# log: {records:,} records, {size / 2**20:.0f} MiB in "
          f"{len(list(DataDir(data_dir).log_dir.glob('*.log')))} segments, "
          f"written in {seconds:.1f} s", flush=True)
    return data_dir


def segments(data_dir: Path) -> list[tuple[int, Path]]:
    return sorted((b, p) for p in DataDir(data_dir).log_dir.iterdir()
                  if (b := parse_segment_file_name(p.name)) is not None)


def copy_segments(store: RemoteStorage, data_dir: Path, upto: int | None = None
                  ) -> tuple[int, int, float]:
    """Copy the segments (all, or the first `upto`) as the copier does; returns
    (bytes, records, seconds)."""
    claim_tier(store, CLUSTER_ID)
    total_bytes = total_records = 0
    started = time.monotonic()
    chosen = segments(data_dir)[:upto]
    for base, path in chosen:
        data = path.read_bytes()
        manifest = segment_manifest(CLUSTER_ID, uuid.uuid4().hex, base, data)
        store.put(manifest.data_key, data)
        store.put(manifest.manifest_key, manifest.encode())
        total_bytes += len(data)
        total_records += manifest.end_offset - manifest.start_offset
    return total_bytes, total_records, time.monotonic() - started


def run_copy(args: argparse.Namespace) -> None:
    from tests.support.s3_server import CREDENTIALS, S3Server

    root = Path(tempfile.mkdtemp(prefix="tier-bench-", dir=args.dir))
    server = None
    try:
        print(f"# {machine()}")
        data_dir = make_log(root, args.records, 8 * 1024 * 1024)
        os.environ.update(CREDENTIALS)
        server = S3Server(root / "moto.log").start()
        server.create_bucket("bench")
        tiers = {"directory": (root / "tier").as_uri(), "s3 (moto, loopback)":
                 server.url("bench", "tier")}
        print("tier                   MB/s   records/s   objects")
        for name, url in tiers.items():
            nbytes, nrecords, seconds = copy_segments(open_store(url), data_dir)
            print(f"{name:20s} {nbytes / 2**20 / seconds:7.1f} {nrecords / seconds:11,.0f} "
                  f"{len(segments(data_dir)):9d}", flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _round(root: Path, mode: str, args: argparse.Namespace) -> tuple[float, float, float]:
    from tests.support.controller_processes import ControllerCluster
    from tests.support.polling import wait_until
    from tests.support.tiered_cluster import tier_config

    tier_root = Path(args.tier_dir) / root.name if args.tier_dir else root / "tier"
    tiered = mode == "on"
    # No metrics exporter in any mode: its once-a-second walk of every topic costs
    # more than the tier does.
    extra = {"on": tier_config(tier_root.as_uri(), segment_ms=args.segment_ms, metrics=False),
             "roll": f"[log]\nsegment_ms = {args.segment_ms}\n", "off": ""}[mode]
    cluster = ControllerCluster(root, 3, snapshot_interval_bytes=1 << 20, extra_config=extra)
    try:
        cluster.start()
        cluster.register_brokers(list(range(1, BROKERS + 1)), timeout_s=30)
        wait_until(cluster.active_node, 10, "an active controller")
        ctx = mp.get_context("spawn")
        out: Any = ctx.Queue()
        start_at = time.time() + 4.0 + args.warmup
        stop_at = start_at + args.seconds
        procs = min(4, args.clients)
        per = [args.clients // procs + (1 if i < args.clients % procs else 0)
               for i in range(procs)]
        workers = [ctx.Process(target=_client_proc, args=(
            cluster.bootstrap, per[i], 1, 1, f"p{i}", start_at, stop_at, out))
            for i in range(procs)]
        for w in workers:
            w.start()
        results = [out.get(timeout=120 + args.seconds) for _ in workers]
        for w in workers:
            w.join()
        copied = sum(n.log_text().count("event=tier_object_copied") for n in
                     cluster.nodes.values())
        deleted = sum(n.log_text().count("event=local_segments_deleted") for n in
                      cluster.nodes.values())
        if tiered:
            print(f"#   tier: {copied} objects copied, {deleted} local deletions", flush=True)
            assert copied > 0, "no copy ran during the window"
    finally:
        cluster.close()
    lat = sorted(x for r in results for x in r[1])
    rate = sum(r[0] for r in results) / args.seconds
    return rate, statistics.median(lat) * 1e3, lat[int(0.99 * (len(lat) - 1))] * 1e3


def run_writes(args: argparse.Namespace) -> None:
    print(f"# {machine()}")
    print(f"# {args.clients} clients creating 1-partition topics, {args.seconds}s measured "
          f"per round after {args.warmup}s warm-up, {BROKERS} brokers, 3 controllers")
    print(f"# modes: off = no [tier]; roll = no [tier], segment_ms {args.segment_ms}; "
          f"on = [tier] (directory), segment_ms {args.segment_ms}")
    print("round mode  topics/s  p50 ms  p99 ms")
    modes = args.modes.split(",")
    rates: dict[str, list[float]] = {m: [] for m in modes}
    p99s: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(args.rounds):
        for mode in modes if i % 2 == 0 else reversed(modes):
            root = Path(tempfile.mkdtemp(prefix="tier-writes-", dir=args.dir))
            try:
                rate, p50, p99 = _round(root, mode, args)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            rates[mode].append(rate)
            p99s[mode].append(p99)
            print(f"{i:5d} {mode:4s} {rate:9.0f} {p50:7.1f} {p99:7.1f}", flush=True)
    means = {m: statistics.mean(r) for m, r in rates.items()}
    print("mean: " + ", ".join(f"{m} {v:.0f}/s (p99 {statistics.mean(p99s[m]):.0f} ms)"
                               for m, v in means.items()))
    if "on" in means and "off" in means:
        print(f"on/off {means['on'] / means['off']:.3f} (target >= 0.95)")


def run_audit_bench(args: argparse.Namespace) -> None:
    import analytics
    from analytics.report import audit_session, run_audit

    # Spark's Python workers must run this interpreter (it has pyarrow and this package).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(tempfile.mkdtemp(prefix="tier-audit-", dir=args.dir))
    try:
        print(f"# {machine()}")
        data_dir = make_log(root, args.records, 32 * 1024 * 1024)
        segs = segments(data_dir)
        tier_url = (root / "tier").as_uri()
        nbytes, nrecords, seconds = copy_segments(open_store(tier_url), data_dir,
                                                  upto=len(segs) - 1)
        print(f"# tier: {len(segs) - 1} objects, {nrecords:,} records, "
              f"{nbytes / 2**20:.0f} MiB (copied in {seconds:.1f} s)")
        # The trimmed local log: only the last segment remains.
        trimmed = root / "trimmed"
        format_data_dir(trimmed, CLUSTER_ID, 1)
        DataDir(trimmed).log_dir.mkdir(exist_ok=True)
        shutil.copy(segs[-1][1], DataDir(trimmed).log_dir / segs[-1][1].name)
        spark = audit_session(f"local[{args.cores}]", "tier-bench", args.driver_memory)
        analytics.register(spark)
        times: dict[str, list[float]] = {"local": [], "tier": []}
        # Alternating, so neither side always runs cold.
        order = [s for i in range(args.rounds)
                 for s in (("local", "tier") if i % 2 == 0 else ("tier", "local"))]
        for i, source in enumerate(order):
            t = time.monotonic()
            if source == "local":
                violations = run_audit(spark, str(data_dir), root / f"r{i}", lambda _m: None)
            else:
                violations = run_audit(spark, str(trimmed), root / f"r{i}", lambda _m: None,
                                       tier=tier_url)
            took = time.monotonic() - t
            times[source].append(took)
            print(f"{source:5s} audit: {took:6.1f} s  violations {sum(violations.values())}",
                  flush=True)
        spark.stop()
        local, tier = min(times["local"]), min(times["tier"])
        print(f"best of {args.rounds}: local {local:.1f} s, tier {tier:.1f} s, "
              f"tier/local {tier / local:.2f} (target <= 1.2)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    copy = sub.add_parser("copy")
    copy.add_argument("--records", type=int, default=2_000_000)
    copy.add_argument("--dir", default=None)
    writes = sub.add_parser("writes")
    writes.add_argument("--seconds", type=float, default=15.0)
    writes.add_argument("--warmup", type=float, default=2.0)
    writes.add_argument("--clients", type=int, default=16)
    writes.add_argument("--rounds", type=int, default=2)
    writes.add_argument("--dir", default=None)
    writes.add_argument("--tier-dir", default=None,
                        help="put the directory tier here (default: beside the data dirs)")
    writes.add_argument("--segment-ms", type=int, default=2000)
    writes.add_argument("--modes", default="off,on", help="of off, roll, on")
    audit = sub.add_parser("audit")
    audit.add_argument("--records", type=int, default=10_000_000)
    audit.add_argument("--cores", type=int, default=2)
    audit.add_argument("--rounds", type=int, default=1)
    audit.add_argument("--driver-memory", default="8g")
    audit.add_argument("--dir", default=None)
    args = parser.parse_args()
    {"copy": run_copy, "writes": run_writes, "audit": run_audit_bench}[args.cmd](args)


if __name__ == "__main__":
    main()
