"""Snapshot files: atomic creation, verification, listing and pruning."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from controller.logformat import SnapshotId, parse_snapshot_file_name
from controller.logformat.batch import RecordBatch, encode_batch
from controller.records import (
    NoOpRecord,
    SnapshotFooterRecord,
    TopicRecord,
    encode_record,
    make_record,
)
from controller.storage.errors import SnapshotCorruptionError
from controller.storage.snapshot_file import (
    SnapshotReader,
    SnapshotWriter,
    head_records,
    latest_snapshot,
    list_snapshots,
    prune_snapshots,
    remove_partial_snapshots,
)


def records(n: int) -> list[bytes]:
    return [encode_record(make_record(TopicRecord(name=f"t{i}", topic_id=f"id-{i}")))
            for i in range(n)]


def write(directory: Path, sid: SnapshotId, recs: list[bytes], per_batch: int = 7) -> Path:
    with SnapshotWriter(directory, sid, 1234, records_per_batch=per_batch) as writer:
        writer.append(recs[: len(recs) // 2])
        writer.append(recs[len(recs) // 2:])
        return writer.freeze()


def test_name_format_and_parse() -> None:
    sid = SnapshotId(1234, 7)
    assert sid.file_name == "00000000000000001234-0000000007.checkpoint"
    assert parse_snapshot_file_name(sid.file_name) == sid
    for bad in ("x.checkpoint", "00000000000000001234.checkpoint",
                "00000000000000001234-0000000007.checkpoint.tmp"):
        assert parse_snapshot_file_name(bad) is None


@pytest.mark.parametrize("n", [0, 1, 50])
def test_round_trip(tmp_path: Path, n: int) -> None:
    recs = records(n)
    path = write(tmp_path, SnapshotId(100, 3), recs)
    assert os.listdir(tmp_path) == [path.name]
    reader = SnapshotReader.open(path)
    assert list(reader.records()) == recs
    assert reader.summary.record_count == n
    assert reader.summary.last_contained_offset == 99
    assert reader.summary.last_contained_epoch == 3
    assert reader.summary.last_contained_log_time_ms == 1234
    batches = list(reader.batches())
    assert batches[0].is_control and batches[-1].is_control
    assert reader.read_chunk(0, 1 << 20) == path.read_bytes()


def test_abort_and_unfrozen_writers_leave_nothing(tmp_path: Path) -> None:
    writer = SnapshotWriter(tmp_path, SnapshotId(10, 1))
    writer.append(records(3))
    writer.abort()
    with SnapshotWriter(tmp_path, SnapshotId(11, 1)) as w:
        w.append(records(3))
    assert os.listdir(tmp_path) == []
    assert list_snapshots(tmp_path) == []


def test_partial_temp_files_are_removed_and_never_listed(tmp_path: Path) -> None:
    writer = SnapshotWriter(tmp_path, SnapshotId(10, 1))
    writer.append(records(3))  # simulate a crash: the writer is never finished
    assert list_snapshots(tmp_path) == []
    removed = remove_partial_snapshots(tmp_path)
    assert [p.name for p in removed] == ["00000000000000000010-0000000001.checkpoint.tmp"]
    assert os.listdir(tmp_path) == []


def test_list_latest_prune(tmp_path: Path) -> None:
    ids = [SnapshotId(10, 1), SnapshotId(30, 2), SnapshotId(20, 2)]
    for sid in ids:
        write(tmp_path, sid, records(2))
    assert list_snapshots(tmp_path) == sorted(ids)
    assert latest_snapshot(tmp_path) == SnapshotId(30, 2)
    assert prune_snapshots(tmp_path, keep=2) == [SnapshotId(10, 1)]
    assert list_snapshots(tmp_path) == [SnapshotId(20, 2), SnapshotId(30, 2)]
    with pytest.raises(ValueError):
        prune_snapshots(tmp_path, keep=0)
    assert latest_snapshot(tmp_path / "missing") is None


@pytest.mark.parametrize("seed", range(40))
def test_any_damage_is_detected(tmp_path: Path, seed: int) -> None:
    path = write(tmp_path, SnapshotId(500, 4), records(40))
    data = bytearray(path.read_bytes())
    rng = random.Random(seed)
    kind = seed % 3
    if kind == 0:
        data[rng.randrange(len(data))] ^= rng.randint(1, 255)
    elif kind == 1:
        del data[rng.randrange(len(data)):]
    else:
        start = rng.randrange(len(data))
        data[start:] = bytes(len(data) - start)
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptionError, match=path.name):
        SnapshotReader.open(path)


def test_missing_or_wrong_footer_is_detected(tmp_path: Path) -> None:
    path = write(tmp_path, SnapshotId(9, 1), records(5), per_batch=100)
    batches = list(SnapshotReader.open(path).batches())
    last = batches[-1]
    # Drop the footer batch: every remaining batch still has a valid CRC.
    without_footer = b"".join(encode_batch(b) for b in batches[:-1])
    path.write_bytes(without_footer)
    with pytest.raises(SnapshotCorruptionError, match="footer"):
        SnapshotReader.open(path)
    # A footer whose count is wrong.
    wrong = RecordBatch(last.base_offset, 1, 1234, True, last.origin,
                        (encode_record(make_record(SnapshotFooterRecord(record_count=4))),))
    path.write_bytes(without_footer + encode_batch(wrong))
    with pytest.raises(SnapshotCorruptionError, match="footer says 4"):
        SnapshotReader.open(path)
    # A data record where the footer should be.
    noop = RecordBatch(last.base_offset, 1, 1234, False, last.origin,
                       (encode_record(make_record(NoOpRecord())),))
    path.write_bytes(without_footer + encode_batch(noop))
    with pytest.raises(SnapshotCorruptionError, match="snapshot_footer"):
        SnapshotReader.open(path)


def test_raw_writer_validates_before_commit(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    src = write(tmp_path / "a", SnapshotId(77, 2), records(30))
    data = src.read_bytes()
    dest = tmp_path / "b"
    dest.mkdir()
    writer = SnapshotWriter(dest, SnapshotId(77, 2), raw=True)
    for i in range(0, len(data), 100):
        writer.append_raw(data[i:i + 100])
    assert writer.freeze().read_bytes() == data
    bad = SnapshotWriter(dest, SnapshotId(78, 2), raw=True)
    bad.append_raw(data[:-10])
    with pytest.raises(SnapshotCorruptionError):
        bad.freeze()
    assert list_snapshots(dest) == [SnapshotId(77, 2)]
    assert not list(dest.glob("*.tmp"))


@pytest.mark.parametrize("seed", range(20))
def test_batches_are_cut_at_either_limit(tmp_path: Path, seed: int) -> None:
    """Whatever the calls, a batch closes as soon as it holds `records_per_batch`
    records or `batch_bytes` bytes (the rule, applied record by record)."""
    rng = random.Random(seed)
    recs = [os.urandom(rng.randint(1, 40)) for _ in range(rng.randint(0, 300))]
    per_batch, limit = rng.randint(1, 20), rng.randint(1, 400)
    expected: list[list[bytes]] = [[]]
    for rec in recs:
        expected[-1].append(rec)
        if len(expected[-1]) >= per_batch or sum(map(len, expected[-1])) >= limit:
            expected.append([])
    expected = [b for b in expected if b]
    sid = SnapshotId(10, 1)
    with SnapshotWriter(tmp_path, sid, records_per_batch=per_batch,
                        batch_bytes=limit) as writer:
        i = 0
        while i < len(recs):
            step = rng.randint(1, 50)
            writer.append(recs[i:i + step] if rng.random() < 0.5 else iter(recs[i:i + step]))
            i += step
        path = writer.freeze()
    batches = list(SnapshotReader.open(path).batches())
    assert [list(b.records) for b in batches[1:-1]] == expected


def test_head_records_reads_only_the_first_batches(tmp_path: Path) -> None:
    records = [b"r%d" % i for i in range(10)]
    with SnapshotWriter(tmp_path, SnapshotId(10, 1), records_per_batch=3) as writer:
        writer.append(records)
        path = writer.freeze()
    assert head_records(path, 4) == records[:4]
    assert head_records(path, 50) == records
    # Damage past the head is not read (the full reader is what verifies it all)...
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x01
    path.write_bytes(bytes(data))
    assert head_records(path, 2) == records[:2]
    # ...damage in it is an error.
    data[60] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptionError):
        head_records(path, 2)
