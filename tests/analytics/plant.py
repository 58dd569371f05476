"""Plant records in a copy of a log, with the real record and batch encoders (valid CRCs),
or damage it (`damage_crc`).

The planted batch goes into a new segment file after the last one, written with
`encode_batch` directly rather than through `SegmentedLog.append`: the log refuses
some of the damage we want to plant (a Raft epoch going back), and the point is a
log that is well-formed on disk but wrong in meaning.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from controller.logformat.batch import BatchOrigin, RecordBatch, encode_batch
from controller.records import encode_record, make_record
from controller.records.registry import RecordPayload
from controller.storage.segment import parse_segment_file_name

PLANTER = BatchOrigin("mallory", "ipv4:10.6.6.6:666", "planted")


def copy_log(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def end_offset(log_dir: Path) -> int:
    from controller.logformat.batch import iter_batches

    last = max((p for p in (log_dir / "metadata").iterdir()
                if parse_segment_file_name(p.name) is not None), key=lambda p: p.name)
    batches = iter_batches(last.read_bytes())
    return batches[-1].next_offset


def record_count(log_dir: Path) -> int:
    """How many records the log's segment files hold, as the reader reads them."""
    from analytics.reader import plan_files, read_file

    return sum(b.num_rows for piece in plan_files(str(log_dir)) for b in read_file(piece))


def plant(log_dir: Path, payloads: list[RecordPayload], *, epoch: int = 2,
          time_ms: int = 1_700_000_100_000) -> int:
    """Append one batch of `payloads` in a new segment; returns its base offset."""
    base = end_offset(log_dir)
    batch = RecordBatch(base, epoch, time_ms, False, PLANTER,
                        tuple(encode_record(make_record(p)) for p in payloads))
    (log_dir / "metadata" / f"{base:020d}.log").write_bytes(encode_batch(batch))
    return base


def damage_crc(log_dir: Path, segment: int = 1) -> tuple[Path, int]:
    """Flip a byte inside the first batch of the `segment`-th segment file, so its
    CRC no longer matches; returns the file and that batch's base offset."""
    from controller.logformat.batch import iter_batches, peek_batch_header

    seg = sorted((log_dir / "metadata").glob("*.log"))[segment]
    data = bytearray(seg.read_bytes())
    first = iter_batches(bytes(data))[0]
    # Inside the first batch's body, which the CRC covers (a no-op batch is 49 bytes).
    data[peek_batch_header(bytes(data), 0).size_bytes - 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    return seg, first.base_offset
