"""Disaster-recovery benchmark: `metakraft storage restore` from a directory tier and
from an S3-compatible server, and what a window audit reads against a full one.

    .venv/bin/python bench/restore_bench.py records [--records 1000000]
    .venv/bin/python bench/restore_bench.py image   [--partitions 1000000]
    .venv/bin/python bench/restore_bench.py window  [--records 1000000 --hours 24]

records: a generated log (bench/audit_bench.py's busy-cluster mix, real batches and
  CRCs, 8 MiB segments) is copied to each tier as the copier does (hashed manifests
  on the chain), then restored to the tier's end: the plan, every object read and
  checked (CRC-32C, SHA-256, batch CRCs, the hash chain), the replay, and the
  restored snapshot written and fsynced. Prints seconds, MB/s and records/s.
image: a snapshot of --partitions partitions (100 per topic, 3 replicas) in each
  tier; restored the same way (the work is loading it and writing it back).
window: the same log spread over --hours of append times, a tiered snapshot an hour
  before its end; the bytes `metakraft audit --since <an hour before the end>` reads
  (the seed snapshot and the byte ranges of the objects holding the window) against
  a full audit's (every object), from the same planner the audit uses.
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

from bench.audit_bench import write_log
from bench.controller_bench import machine
from controller.logformat import SnapshotId
from controller.metadata.features import FeatureControlManager
from controller.metadata.levels import LATEST_METADATA_VERSION
from controller.quorum_controller.restore import (
    RestorePlan,
    plan_restore,
    rebuild,
    write_data_dir,
)
from controller.records import (
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    encode_record,
    make_record,
)
from controller.storage.meta_properties import DataDir, random_cluster_id
from controller.storage.segment import parse_segment_file_name
from controller.storage.snapshot_file import SnapshotWriter
from controller.tier.history import (
    byte_range,
    claim_tier,
    first_offset_after,
    list_tier,
    plan_history,
)
from controller.tier.objects import segment_manifest, snapshot_manifest
from controller.tier.remote import RemoteStorage, open_store

CLUSTER_ID = random_cluster_id()
SEGMENT_BYTES = 8 * 1024 * 1024


def tier_log(store: RemoteStorage, log_dir: Path, *, closed_only: bool = False) -> int:
    """Copy a log directory's segments to `store` as the copier does, on the hash
    chain, after what the tier holds already; `closed_only`: not the newest
    segment (the one still appended to). Returns the bytes copied."""
    claim_tier(store, CLUSTER_ID)
    held = list_tier(store, CLUSTER_ID).segments
    prev, copied = (held[-1].sha256() if held else ""), 0
    tier_end = held[-1].end_offset if held else 0
    segments = sorted((b, p) for p in log_dir.iterdir()
                      if (b := parse_segment_file_name(p.name)) is not None)
    for base, p in segments[:-1] if closed_only else segments:
        if base < tier_end:
            continue
        data = p.read_bytes()
        m = segment_manifest(CLUSTER_ID, uuid.uuid4().hex, base, data, copier_id=1,
                             copier_epoch=1, prev_manifest_sha256=prev)
        store.put(m.data_key, data)
        store.put(m.manifest_key, m.encode())
        prev, copied = m.sha256(), copied + len(data)
    return copied


def tier_snapshot(store: RemoteStorage, path: Path, end_offset: int, time_ms: int) -> int:
    data = path.read_bytes()
    m = snapshot_manifest(CLUSTER_ID, uuid.uuid4().hex, end_offset, 1, data, time_ms,
                          copier_id=1, copier_epoch=1, hashed=True)
    store.put(m.data_key, data)
    store.put(m.manifest_key, m.encode())
    return len(data)


def restore_once(url: str, out: Path) -> tuple[RestorePlan, float, int]:
    """Plan, rebuild and write a restored data dir; (plan, seconds, records after the
    snapshot)."""
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    store = open_store(url)
    plan = plan_restore(store)
    restored = rebuild(store, plan)
    write_data_dir(restored, data_dir=str(out), node_id=1, cluster_id=random_cluster_id(),
                   old_cluster_id=plan.old_cluster_id, voters=None)
    return plan, time.monotonic() - started, restored.records


def with_tiers(root: Path, fill: object) -> None:
    """Run `fill(name, url)` for a directory tier and an S3 tier (moto on loopback)."""
    from tests.support.s3_server import CREDENTIALS, S3Server

    os.environ.update(CREDENTIALS)
    server = S3Server(root / "moto.log").start()
    try:
        server.create_bucket("bench")
        for name, url in (("directory", (root / "tier").as_uri()),
                          ("s3 (moto, loopback)", server.url("bench", "tier"))):
            fill(name, url)  # type: ignore[operator]
    finally:
        server.stop()


def run_records(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="restore-bench-", dir=args.dir))
    try:
        print(f"# {machine()}")
        data_dir = root / "source"
        seconds = write_log(data_dir, args.records, segment_bytes=SEGMENT_BYTES)
        print(f"# log: {args.records:,} records written in {seconds:.1f} s", flush=True)
        print("tier                     MB read  seconds     MB/s   records/s")

        def fill(name: str, url: str) -> None:
            tier_log(open_store(url), data_dir / "metadata")
            plan, seconds, records = restore_once(url, root / "restored")
            mb = plan.read_bytes / 1e6
            print(f"{name:22s} {mb:9.1f} {seconds:8.1f} {mb / seconds:8.1f} "
                  f"{records / seconds:11,.0f}", flush=True)

        with_tiers(root, fill)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_image(directory: Path, partitions: int) -> tuple[Path, int]:
    """A snapshot file of `partitions` partitions (100 per topic) and 3 brokers."""
    rng = random.Random(3)
    end = partitions + partitions // 100 + 100
    writer = SnapshotWriter(directory, SnapshotId(end, 1), 1_700_000_000_000)
    writer.append([encode_record(r)
                   for r in FeatureControlManager.bootstrap_records(LATEST_METADATA_VERSION)])
    writer.append([encode_record(make_record(RegisterBrokerRecord(
        broker_id=b, incarnation_id=str(uuid.uuid4()), broker_epoch=b))) for b in range(3)])
    for t in range(partitions // 100):
        tid = str(uuid.UUID(int=rng.getrandbits(128)))
        chunk = [encode_record(make_record(TopicRecord(name=f"topic-{t}", topic_id=tid)))]
        chunk += [encode_record(make_record(PartitionRecord(
            topic_id=tid, partition_id=p, replicas=[0, 1, 2], isr=[0, 1, 2], leader=p % 3,
            leader_epoch=1, partition_epoch=1))) for p in range(100)]
        writer.append(chunk)
    return writer.freeze(), end


def run_image(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="restore-bench-", dir=args.dir))
    try:
        print(f"# {machine()}")
        started = time.monotonic()
        path, end = write_image(root / "image", args.partitions)
        print(f"# snapshot: {args.partitions:,} partitions, {path.stat().st_size / 1e6:.0f} MB, "
              f"written in {time.monotonic() - started:.1f} s", flush=True)
        print("tier                     MB read  seconds     MB/s   partitions/s")

        def fill(name: str, url: str) -> None:
            store = open_store(url)
            claim_tier(store, CLUSTER_ID)
            tier_snapshot(store, path, end, 1_700_000_000_000)
            plan, seconds, _ = restore_once(url, root / "restored")
            mb = plan.read_bytes / 1e6
            print(f"{name:22s} {mb:9.1f} {seconds:8.1f} {mb / seconds:8.1f} "
                  f"{args.partitions / seconds:14,.0f}", flush=True)

        with_tiers(root, fill)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_window(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="restore-bench-", dir=args.dir))
    try:
        print(f"# {machine()}")
        data_dir = root / "source"
        # About 100 records a batch: spread the batches over --hours.
        interval_ms = int(args.hours * 3_600_000 / (args.records / 100))
        write_log(data_dir, args.records, segment_bytes=SEGMENT_BYTES,
                  batch_interval_ms=interval_ms)
        url = (root / "tier").as_uri()
        store = open_store(url)
        tier_log(store, data_dir / "metadata")
        segments = list_tier(store).segments
        end_ms = max(t for m in segments for t, _ in m.time_index)
        since_ms = end_ms - 3_600_000
        point = first_offset_after(segments, since_ms - 1)
        assert point is not None
        # A tiered snapshot where the copier would have put one: at the end of the
        # object before the hour (a restore of that offset writes it).
        seed_end = max((m.end_offset for m in segments if m.end_offset <= point), default=0)
        if seed_end == 0:
            raise SystemExit("the last hour starts in the first object: give more --records")
        plan = plan_restore(store, to_offset=seed_end - 1)
        restored = rebuild(store, plan)
        snap = write_data_dir(restored, data_dir=str(root / "seed"), node_id=1,
                              cluster_id=CLUSTER_ID, old_cluster_id=CLUSTER_ID, voters=None)
        seed_path = DataDir(root / "seed").snapshot_dir / snap.file_name
        seed_bytes = tier_snapshot(store, seed_path, seed_end, since_ms)
        full = sum(m.size_bytes for m in segments)
        window = seed_bytes + sum(byte_range(p.manifest, p.start, p.end)[1]
                                  for p in plan_history(segments, [], start=seed_end)
                                  if p.manifest is not None)
        span_h = (end_ms - min(m.start_time_ms for m in segments)) / 3_600_000
        print(f"# log: {args.records:,} records over {span_h:.1f} h in {len(segments)} "
              f"objects, {full / 1e6:.0f} MB; the last hour starts at offset {point}, the "
              f"seed snapshot ends at {seed_end} ({seed_bytes / 1e6:.1f} MB)")
        print(f"full audit reads          {full / 1e6:9.1f} MB")
        print(f"audit --since an hour ago {window / 1e6:9.1f} MB  ({window / full:.1%} of full)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    for name in ("records", "image", "window"):
        p = sub.add_parser(name)
        p.add_argument("--dir", default=None, help="where to put the temporary files")
        if name == "image":
            p.add_argument("--partitions", type=int, default=1_000_000)
        else:
            p.add_argument("--records", type=int, default=1_000_000)
        if name == "window":
            p.add_argument("--hours", type=float, default=24.0)
    args = parser.parse_args()
    {"records": run_records, "image": run_image, "window": run_window}[args.mode](args)


if __name__ == "__main__":
    main()
