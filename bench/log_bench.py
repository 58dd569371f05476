"""Log storage benchmark: fdatasync rate, append+flush, decoded reads, recovery time.

    .venv/bin/python bench/log_bench.py [--dir /tmp] [--seconds 3] [--recovery-gib 1]

Everything runs in a fresh temp directory under `--dir` (default: the system
temp dir), which is removed at the end. The records are encoded
PartitionRecords of a 3-replica partition (controller.records), ~60 bytes each.
Reads and recovery run against a warm page cache (the files were just written;
dropping caches would disturb other jobs on the machine).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.logformat.batch import BatchOrigin, RecordBatch, encode_batch
from controller.records import PartitionRecord, encode_record, make_record
from controller.storage.log import LogConfig, SegmentedLog

MIB = 1024 * 1024


def partition_records(n: int) -> list[bytes]:
    topic_id = str(uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0))
    return [encode_record(make_record(PartitionRecord(
        partition_id=i, topic_id=topic_id, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1 + i % 3,
        leader_epoch=7, partition_epoch=12))) for i in range(n)]


def fdatasync_rate(directory: Path, seconds: float) -> float:
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    block = b"x" * 4096
    count = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        path.unlink()
    return count / (time.perf_counter() - start)


def append_flush(directory: Path, records_per_batch: int, seconds: float,
                 records: list[bytes], recovery_point: bool = True
                 ) -> tuple[float, float, float]:
    """(records/s, MB/s, flushes/s) appending one batch and flushing it, repeatedly;
    with the log's recovery point (as the controllers keep it) or without."""
    chunk = records[:records_per_batch]
    origin = BatchOrigin("User:bench", "127.0.0.1:1", "req")
    log_dir = directory / f"append-{records_per_batch}"
    point = directory / "recovery-point" if recovery_point else None
    total_records = total_bytes = flushes = 0
    with SegmentedLog.open(log_dir, recovery_point_path=point) as log:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            before = log.size_bytes
            log.append(RecordBatch(log.end_offset, 1, 0, False, origin, tuple(chunk)))
            log.flush()
            total_records += len(chunk)
            total_bytes += log.size_bytes - before
            flushes += 1
        elapsed = time.perf_counter() - start
    shutil.rmtree(log_dir)
    if point is not None:
        point.unlink()
    return total_records / elapsed, total_bytes / elapsed / 1e6, flushes / elapsed


def write_log(log_dir: Path, total_bytes: int, records: list[bytes],
              records_per_batch: int = 1000) -> tuple[int, float]:
    """Write ~total_bytes of batches, one flush at the end; (records, seconds)."""
    origin = BatchOrigin("User:bench", "127.0.0.1:1", "req")
    batch = tuple(records[:records_per_batch])
    start = time.perf_counter()
    with SegmentedLog.open(log_dir, LogConfig(segment_bytes=64 * MIB)) as log:
        while log.size_bytes < total_bytes:
            log.append(encode_batch(RecordBatch(log.end_offset, 1 + log.end_offset // 10**6, 0,
                                                False, origin, batch)))
        log.flush()
        return log.end_offset, time.perf_counter() - start


def read_throughput(log_dir: Path, fetch_bytes: int) -> tuple[float, float]:
    """(records/s, MB/s) reading the whole log as decoded batches, `fetch_bytes` at a time."""
    with SegmentedLog.open(log_dir) as log:
        offset = log.start_offset
        records = size = 0
        start = time.perf_counter()
        while offset < log.end_offset:
            batches = log.read_batches(offset, fetch_bytes)
            for batch in batches:
                records += batch.record_count
                size += sum(map(len, batch.records))
            offset = batches[-1].next_offset
        elapsed = time.perf_counter() - start
    return records / elapsed, size / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(),
                        help="where to create the temp directory (default: system temp dir)")
    parser.add_argument("--seconds", type=float, default=3.0, help="per append measurement")
    parser.add_argument("--recovery-gib", type=float, default=1.0,
                        help="size of the log for the recovery/read measurements")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir))
    records = partition_records(1000)
    avg_record = sum(map(len, records)) / len(records)
    try:
        print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
              f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f}")
        print(f"temp dir: {work} (device {os.stat(work).st_dev:#x})")
        print(f"record: encoded PartitionRecord (3 replicas), {avg_record:.0f} bytes on average")
        print(f"fdatasync (4 KiB append + fdatasync): {fdatasync_rate(work, args.seconds):,.0f}/s")
        print("append + flush (one flush per batch, recovery point kept as the controllers do):")
        for per_batch in (1, 10, 100, 1000):
            rate, mb_s, flushes = append_flush(work, per_batch, args.seconds, records)
            print(f"  {per_batch:>5} records/batch: {rate:>12,.0f} records/s  {mb_s:8.1f} MB/s"
                  f"  {flushes:8,.0f} flushes/s")
        # What the recovery point costs a flush (one more fdatasync, of a 64-byte
        # file): with and without, interleaved, 1-record batches.
        pairs = [(append_flush(work, 1, args.seconds / 2, records, True)[2],
                  append_flush(work, 1, args.seconds / 2, records, False)[2])
                 for _ in range(3)]
        print("recovery point cost, 1-record flushes/s with / without (3 interleaved pairs): "
              + ", ".join(f"{a:,.0f} / {b:,.0f} ({a / b:.2f}x)" for a, b in pairs))
        log_dir = work / "big"
        total = int(args.recovery_gib * 1024 * MIB)
        count, seconds = write_log(log_dir, total, records)
        size = sum(p.stat().st_size for p in log_dir.glob("*.log"))
        print(f"bulk write: {size / MIB:,.0f} MiB, {count:,} records in {seconds:.1f} s "
              f"({count / seconds:,.0f} records/s, one flush at the end)")
        for fetch in (MIB, 8 * MIB):
            rate, mb_s = read_throughput(log_dir, fetch)
            print(f"read + decode ({fetch // MIB} MiB fetches, warm cache): {rate:,.0f} records/s"
                  f"  {mb_s:,.1f} MB/s of record bytes")
        start = time.perf_counter()
        with SegmentedLog.open(log_dir) as log:
            reopened = time.perf_counter() - start
            assert log.end_offset == count
            segments = log.segment_count
        print(f"recovery (open: CRC scan of every segment, index rebuild check): "
              f"{size / MIB:,.0f} MiB in {segments} segments: {reopened:.2f} s "
              f"({size / MIB / reopened:,.0f} MiB/s, warm cache)")
        shutil.rmtree(log_dir)
        # Worst case for recovery: 1-record batches (per-batch Python work dominates).
        small_dir = work / "small"
        count, _ = write_log(small_dir, 64 * MIB, records, records_per_batch=1)
        start = time.perf_counter()
        with SegmentedLog.open(small_dir) as log:
            reopened = time.perf_counter() - start
            assert log.end_offset == count
        print(f"recovery, 1-record batches: 64 MiB ({count:,} batches) in {reopened:.2f} s "
              f"({count / reopened:,.0f} batches/s; 1 GiB would take ~{reopened * 16:.0f} s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
