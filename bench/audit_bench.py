"""Spark audit benchmark: scan and full audit of a large generated log, local[1] vs local[2].

    .venv/bin/python bench/audit_bench.py --records 10000000 [--dir DIR] [--keep]
    .venv/bin/python bench/audit_bench.py --incremental --records 10000000 [--grow-percent 1]

Writes `--records` valid records with the real encoders (controller.records +
SegmentedLog: real batches, CRCs, 32 MiB segments), then, for local[1] and local[2]
in the same run: (1) a full scan (every column materialised: sum of JSON lengths),
(2) the full audit (`analytics.report.run_audit`: every audit section, every
invariant, the plots). Prints records/s per core and the speed-up.

`--incremental`: the log's closed segments copied to a directory tier as the
copier does, then in one Spark session at local[2]: a full audit filling the row
cache, then per round the log grown by `--grow-percent` and its new segments
tiered, the re-audit from the cache beside a full audit of the grown log.

The log is a busy cluster's mix: mostly PartitionChange (ISR shrink/expand, leader
moves) over 2,000 topics x 8 partitions, broker fencing/unfencing, no-ops, configs,
a few topic creations. Records come from a pool of 50,000 distinct encoded records
cycled through (generation time only; every record is still parsed by the scan).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.logformat.batch import BatchOrigin
from controller.records import (
    BrokerIdList,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    encode_record,
    make_record,
)
from controller.records import metadata_pb2 as pb
from controller.storage.log import LogConfig, SegmentedLog

BROKERS = 12
TOPICS = 2_000
PARTITIONS = 8


def _pool(rng: random.Random, topic_ids: list[str], replicas: dict[tuple[str, int], list[int]],
          size: int) -> list[bytes]:
    out: list[bytes] = []
    for _ in range(size):
        r = rng.random()
        tid = rng.choice(topic_ids)
        if r < 0.75:
            # Valid changes: the ISR keeps the first replica (the leader) and is within
            # the replicas, so the invariants hold and the audit reports nothing.
            part = rng.randrange(PARTITIONS)
            reps = replicas[(tid, part)]
            isr = [reps[0], *rng.sample(reps[1:], rng.randint(0, 2))]
            change = PartitionChangeRecord(topic_id=tid, partition_id=part,
                                           isr=BrokerIdList(ids=isr))
            if rng.random() < 0.3:
                change.leader = reps[0]
            out.append(encode_record(make_record(change)))
        elif r < 0.85:
            fence = rng.choice([pb.FENCE_CHANGE_FENCE, pb.FENCE_CHANGE_UNFENCE])
            out.append(encode_record(make_record(BrokerRegistrationChangeRecord(
                broker_id=rng.randrange(BROKERS), broker_epoch=rng.randrange(BROKERS),
                fenced=fence))))
        elif r < 0.95:
            out.append(encode_record(make_record(NoOpRecord())))
        else:
            out.append(encode_record(make_record(ConfigRecord(
                resource_type=pb.CONFIG_RESOURCE_TYPE_TOPIC,
                resource_name=f"topic-{rng.randrange(TOPICS)}", name="retention.ms",
                value=str(rng.randrange(10**9))))))
    return out


def write_log(directory: Path, records: int, seed: int = 7,
              segment_bytes: int = 32 * 1024 * 1024, batch_interval_ms: int = 50) -> float:
    """Write a log of `records` records into `directory`, or extend the log already
    there (the same topics, the pool continued, later times) up to `records`."""
    rng = random.Random(seed)
    started = time.monotonic()
    log = SegmentedLog.open(directory / "metadata", LogConfig(segment_bytes=segment_bytes))
    extending = log.end_offset > 0
    now = 1_700_000_000_000
    # A real beginning: brokers registered at their own offsets, topics and partitions.
    head = [make_record(RegisterBrokerRecord(broker_id=b, incarnation_id=str(uuid.uuid4()),
                                             broker_epoch=b, fenced=True))
            for b in range(BROKERS)]
    if not extending:
        log.append_records(1, now, [encode_record(r) for r in head], BatchOrigin())
    topic_ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(TOPICS)]
    replicas: dict[tuple[str, int], list[int]] = {}
    for t, tid in enumerate(topic_ids):
        recs = [make_record(TopicRecord(name=f"topic-{t}", topic_id=tid))]
        for p in range(PARTITIONS):
            reps = replicas[(tid, p)] = rng.sample(range(BROKERS), 3)
            recs.append(make_record(PartitionRecord(topic_id=tid, partition_id=p, replicas=reps,
                                                    isr=reps, leader=reps[0])))
        if not extending:
            log.append_records(1, now, [encode_record(r) for r in recs],
                               BatchOrigin("admin", "ipv4:10.0.0.1:1", f"create-{t}"))
    pool = _pool(rng, topic_ids, replicas, 50_000)
    # Where the pool left off, and a time after every batch written (batches are at
    # most 200 records, one every batch_interval_ms).
    i = log.end_offset - BROKERS - TOPICS * (1 + PARTITIONS) if extending else 0
    if extending:
        now += batch_interval_ms * log.end_offset
    while log.end_offset < records:
        n = min(rng.randint(1, 200), records - log.end_offset)
        batch = [pool[(i + k) % len(pool)] for k in range(n)]
        i += n
        now += batch_interval_ms
        log.append_records(1, now, batch, BatchOrigin())
    log.flush()
    log.close()
    return time.monotonic() - started


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(log_dir: Path, cores: int, out: Path, *, scan_only: bool,
        driver_memory: str) -> tuple[float, float]:
    from pyspark.sql import functions as F

    import analytics
    from analytics.report import audit_session, run_audit

    master = f"local[{cores}]"
    # The JVM starts once per process: the first session's JVM settings hold.
    spark = audit_session(master, "audit-bench", driver_memory)
    analytics.register(spark)
    df = spark.read.format("metakraft").load(str(log_dir))
    df.agg(F.count("*")).collect()  # warm-up: Python workers, first-query cost
    t = time.monotonic()
    row = df.agg(F.count("*"), F.sum(F.length("record_json")), F.max("offset")).first()
    scan = time.monotonic() - t
    assert row is not None
    print(f"{master} scan: {row[0]:,} records in {scan:.1f} s "
          f"({row[0] / scan / cores:,.0f} records/s per core; {_load()})", flush=True)
    audit_s = float("nan")
    if not scan_only:
        t = time.monotonic()
        violations = run_audit(spark, str(log_dir), out,
                               lambda m: print(f"  [{time.monotonic() - t:6.1f}s] {m}",
                                               flush=True))
        audit_s = time.monotonic() - t
        print(f"{master} full audit: {audit_s:.1f} s; violations {violations}; {_load()}",
              flush=True)
    spark.stop()
    return scan, audit_s


def run_incremental(root: Path, records: int, grow_percent: float, driver_memory: str,
                    rounds: int) -> None:
    """The row cache: a tier of the log's closed segments (8 MiB objects, on the hash
    chain) + the local log, audited at local[2] in one Spark session: a full audit
    that fills the cache (`--full`), then per round the log grown by `grow_percent`
    and its new closed segments tiered, the re-audit from the cache, and a full
    audit of the grown log without the cache (the code before the cache)."""
    from analytics.report import audit_session, run_audit
    from bench.restore_bench import tier_log
    from controller.tier.remote import open_store

    log_dir, tier_dir = root / "log", root / "tier"
    for stale in (log_dir, tier_dir, root / "row-cache"):  # each run grows them
        shutil.rmtree(stale, ignore_errors=True)
    took = write_log(log_dir, records, segment_bytes=8 * 1024 * 1024)
    print(f"wrote {records:,} records in {took:.1f} s to {log_dir}", flush=True)
    store = open_store(tier_dir.as_uri())
    copied = tier_log(store, log_dir / "metadata", closed_only=True)
    print(f"tiered {copied / 2**20:.1f} MiB (the newest segment stays local)", flush=True)
    spark = audit_session("local[2]", "audit-bench", driver_memory)

    def audit(name: str, **kwargs: object) -> float:
        said: list[str] = []
        t = time.monotonic()
        violations = run_audit(spark, str(log_dir), root / "report", said.append,
                               tier=tier_dir.as_uri(), **kwargs)  # type: ignore[arg-type]
        took = time.monotonic() - t
        bad = {k: v for k, v in violations.items() if v}
        # The phases' own progress lines: "N records read: S s", "... derived: S s".
        phases = [m.rsplit(": ", 1)[-1] for m in said
                  if m.endswith(" s") and ("records read" in m or "states derived" in m)]
        # "partition states kept up to offset N ...: S s" (the states checkpoint written).
        kept = [m.rsplit(": ", 1)[-1] for m in said if "partition states kept" in m]
        print(f"  {name:<40} {took:6.1f} s  (read {phases[0]}, partition states "
              f"{phases[1]}{', kept in ' + kept[0] if kept else ''})  violations "
              f"{bad or 'none'}; {_load()}", flush=True)
        # The slowest sections and checks ("audit: TITLE: S s", "invariant: NAME: S s"),
        # four run at once, so their times overlap.
        timed = sorted(((float(m.rsplit(": ", 1)[-1][:-2]), m.rsplit(": ", 1)[0]) for m in said
                        if m.startswith(("audit: ", "invariant: ", "check: "))), reverse=True)
        print("    slowest: " + "; ".join(f"{n} {t:.1f} s" for t, n in timed[:6]), flush=True)
        return took

    cache = root / "row-cache"
    audit("full audit filling the cache (--full)", cache_dir=cache, use_cache=False)
    end = records
    for r in range(1, rounds + 1):
        end = int(end * (1 + grow_percent / 100))
        took = write_log(log_dir, end, segment_bytes=8 * 1024 * 1024)
        copied = tier_log(store, log_dir / "metadata", closed_only=True)
        print(f"round {r}: grown to {end:,} records (+{grow_percent}%) in {took:.1f} s; "
              f"{copied / 2**20:.1f} MiB newly tiered", flush=True)
        again = audit("re-audit from the cache", cache_dir=cache)
        full = audit("full audit, no cache (the code before the caches)")
        print(f"  re-audit / full audit: {again / full:.2f}", flush=True)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to write the log (reused if it already holds one)")
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument("--cores", default="1,2", help="local[N] runs, in order (default 1,2)")
    parser.add_argument("--scan-only", action="store_true", help="time the scan only")
    parser.add_argument("--driver-memory", default="8g",
                        help="Spark driver memory (local mode: holds the caches)")
    parser.add_argument("--incremental", action="store_true",
                        help="the row cache: full audits against re-audits of a tiered log "
                             "grown by --grow-percent (local[2])")
    parser.add_argument("--grow-percent", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = args.dir or Path(tempfile.mkdtemp(prefix="audit-bench-"))
    try:
        if args.incremental:
            run_incremental(root, args.records, args.grow_percent, args.driver_memory,
                            args.rounds)
            return
        if not (root / "metadata").is_dir():
            took = write_log(root, args.records)
            print(f"wrote {args.records:,} records in {took:.1f} s to {root}", flush=True)
        cores = [int(c) for c in args.cores.split(",")]
        results = {c: run(root, c, root / f"report-{c}", scan_only=args.scan_only,
                          driver_memory=args.driver_memory) for c in cores}
        if 1 in results and 2 in results:
            (s1, a1), (s2, a2) = results[1], results[2]
            print(f"speed-up local[2]/local[1]: scan {s1 / s2:.2f}x, audit {a1 / a2:.2f}x")
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
