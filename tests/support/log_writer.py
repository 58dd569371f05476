"""Crash-test writer: appends and flushes batches to a log until killed.

Usage: python tests/support/log_writer.py LOG_DIR EPOCH SEED

Every record's bytes are a function of its offset (`record_bytes`), so the test
can check any surviving record without knowing what the writer did. After each
flush it prints `FLUSHED <end_offset>` (line-buffered): a claim that every
record below that offset is durable. It prints `READY <end_offset>` after opening.
"""

from __future__ import annotations

import hashlib
import random
import sys

from controller.logformat.batch import BatchOrigin
from controller.storage.log import LogConfig, SegmentedLog

# Age-based rolling on append times (the writer's own counter) makes segments
# roll every ~64 batches without writing 8 MiB.
CONFIG = LogConfig(segment_ms=64, index_interval_bytes=256)


def record_bytes(offset: int) -> bytes:
    digest = hashlib.sha256(offset.to_bytes(8, "big")).digest()
    return (digest * 4)[: 20 + offset % 90]


def main() -> None:
    directory, epoch, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    log = SegmentedLog.open(directory, CONFIG)
    print(f"READY {log.end_offset}", flush=True)
    tick = 0
    while True:
        for _ in range(rng.randint(1, 8)):
            start = log.end_offset
            count = rng.randint(1, 40)
            tick += 1
            log.append_records(epoch, tick, [record_bytes(o) for o in range(start, start + count)],
                               BatchOrigin("writer", "local", f"{epoch}-{tick}"))
        print(f"FLUSHED {log.flush()}", flush=True)


if __name__ == "__main__":
    main()
