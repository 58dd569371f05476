"""Bulk decoding of PartitionChange records (`analytics.wire`) and the file reader
around it: every row equals what the one-record-at-a-time path (`rows_of`, checked
against protobuf in test_reader.py) makes of the same bytes, and damage is found
at the same record as before."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.reader import MetakraftCorruptLogError, plan_files, read_file
from analytics.rows import record_columns, rows_of
from analytics.schema import EVENT_FIELD_COLUMNS, PARTITION_FIELD_COLUMNS
from analytics.wire import decode_partition_changes
from controller.logformat.batch import BatchOrigin, RecordBatch, encode_batch
from controller.records import (
    BrokerIdList,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
    encode_record,
    make_record,
)
from controller.records import metadata_pb2 as pb

TID = b"a" * 36
# Hand-made records: layouts the encoder never writes, and unreadable ones.
TOPIC_FIRST = b"\x12\x24" + TID + b"\x08\x05"  # topic_id before partition_id
RESTATED = b"\x08\x05\x12\x24" + TID + b"\x08\x07\x20\x01"  # partition_id again after it
TRUNCATED_ISR = b"\x08\x05\x12\x24" + TID + b"\x1a\x09\x0a"
NOT_UTF8 = b"\x08\x05\x12\x24" + b"\xff" * 36


def _wrap(body: bytes, version: int = 1) -> bytes:
    return bytes([0x08, version, 0x7A, len(body)]) + body


def _change(topic_id: str, partition_id: int, isr: list[int] | None = None,
            leader: int | None = None, recovery: int | None = None) -> bytes:
    change = PartitionChangeRecord(topic_id=topic_id, partition_id=partition_id)
    if isr is not None:
        change.isr.CopyFrom(BrokerIdList(ids=isr))
    if leader is not None:
        change.leader = leader
    if recovery is not None:
        change.leader_recovery_state = recovery  # type: ignore[assignment]
    return encode_record(make_record(change))


def _bulk(records: list[bytes], change_json: bool = True) -> dict[int, tuple[object, ...]]:
    """What the bulk path makes of `records` laid out back to back, per record index:
    the columns it produces, in `record_columns`' positions."""
    buf = np.frombuffer(b"".join(records), np.uint8)
    ends = np.cumsum([len(r) for r in records]).astype(np.int64)
    starts = ends - np.array([len(r) for r in records], np.int64)
    out = decode_partition_changes(buf, starts, ends, change_json=change_json)
    json = out.record_json.to_pylist() if out.record_json is not None else [None] * len(out.rows)
    return {int(row): ("partition_change", version, tid, None, pid, None, None, None, text,
                       out.fields[int(field)], None)
            for row, version, tid, pid, text, field in zip(
                out.rows, out.version.to_pylist(), out.topic_id.to_pylist(),
                out.partition_id.to_pylist(), json, out.field_index, strict=True)}


changes = st.builds(
    _change,
    topic_id=st.one_of(st.sampled_from(["t", "a" * 36, "ü-topic-é", "x" * 100, "", "y" * 127]),
                       st.text(max_size=40)),
    partition_id=st.one_of(st.sampled_from([0, 1, 127, 128, 16383, 16384]),
                           st.integers(0, 2**31 - 1)),
    isr=st.one_of(st.none(), st.lists(st.integers(-1, 2**31 - 1), max_size=5)),
    leader=st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)),
    recovery=st.one_of(st.none(), st.sampled_from(list(pb.LeaderRecoveryState.values()))))
others = st.sampled_from([
    encode_record(make_record(NoOpRecord())),
    encode_record(make_record(TopicRecord(name="t", topic_id="a" * 36))),
    encode_record(make_record(PartitionRecord(topic_id="a" * 36, partition_id=3,
                                              replicas=[1, 2], isr=[1], leader=1))),
    _wrap(TOPIC_FIRST), _wrap(RESTATED), _wrap(RESTATED, version=9), b"\x08", b"",
])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(changes, others), max_size=40), st.booleans())
def test_bulk_rows_equal_the_per_record_path(records: list[bytes], change_json: bool) -> None:
    bulk = _bulk(records, change_json)
    for i, record in enumerate(records):
        if i in bulk:
            assert bulk[i] == record_columns(record, change_json=change_json), record
    # Every encoder-made change that fits the layout takes the bulk path (the fast
    # one): a topic id, a partition id of at most two varint bytes, at most 131 bytes.
    for i, record in enumerate(records):
        if record[:1] == b"\x08" and record[2:3] == b"\x7a" and record[1] == 1:
            change = pb.MetadataRecord.FromString(record).partition_change
            if encode_record(make_record(change)) != record:
                continue  # hand-made
            fits = change.topic_id != "" and change.partition_id < 2**14 and len(record) <= 131
            assert (i in bulk) == fits, record


def test_records_the_bulk_path_must_leave_alone() -> None:
    hand_made = [_wrap(TOPIC_FIRST), _wrap(RESTATED), _wrap(TRUNCATED_ISR), _wrap(NOT_UTF8),
                 _wrap(RESTATED, version=0), _wrap(RESTATED, version=99),
                 _change("t" * 36, 1, recovery=7),  # a recovery state with no name
                 _change("t" * 200, 1)]  # longer than the one-length-byte layout
    assert _bulk(hand_made) == {}
    # Nor is anything else: the bulk path takes PartitionChange records only.
    assert _bulk([encode_record(make_record(NoOpRecord())), b"\x08\x01\x7a"]) == {}


def _write_log(root: Path, batches: list[list[bytes]]) -> Path:
    """One segment file of `batches` (valid CRCs, whatever the records hold)."""
    seg_dir = root / "metadata"
    seg_dir.mkdir(parents=True)
    data, offset = bytearray(), 0
    for i, records in enumerate(batches):
        origin = BatchOrigin("admin", "ipv4:1.2.3.4:5", f"req-{i}") if i % 3 else BatchOrigin()
        data += encode_batch(RecordBatch(offset, 1 + i // 10, 1_700_000_000_000 + i, False,
                                         origin, tuple(records)))
        offset += len(records)
    path = seg_dir / f"{0:020d}.log"
    path.write_bytes(bytes(data))
    return path


def _mixed_batches(rng: random.Random, count: int) -> list[list[bytes]]:
    pool = [
        _change("a" * 36, 3, isr=[1, 2]), _change("b" * 36, 0, leader=2),
        _change("ü-topic-é", 200, isr=[], leader=-1, recovery=1), _wrap(TOPIC_FIRST),
        encode_record(make_record(NoOpRecord())),
        encode_record(make_record(BrokerRegistrationChangeRecord(
            broker_id=3, broker_epoch=9, fenced=pb.FENCE_CHANGE_FENCE))),
        encode_record(make_record(ConfigRecord(
            resource_type=pb.CONFIG_RESOURCE_TYPE_TOPIC, resource_name="t", name="k",
            value="v"))),
    ]
    return [[rng.choice(pool) for _ in range(rng.randint(1, 300))] for _ in range(count)]


@pytest.mark.parametrize("change_json", [True, False])
def test_file_rows_equal_the_per_record_path(tmp_path: Path, change_json: bool) -> None:
    rng = random.Random(11)
    batches = _mixed_batches(rng, 600)  # ~90k records: more than one Arrow batch
    path = _write_log(tmp_path, batches)
    records = [r for b in batches for r in b]
    rows = [row for b in read_file(plan_files(str(tmp_path))[0], change_json=change_json)
            for row in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(len(records)))
    assert {r["file"] for r in rows} == {path.name}
    names = ["record_type", "version", "topic_id", "topic_name", "partition_id", "broker_id",
             "resource_type", "resource_name", "record_json"]
    for row, cols in zip(rows, rows_of(records, change_json=change_json), strict=True):
        assert [row[n] for n in names] == list(cols[:9])
        typed = [list(v) if isinstance(v, tuple) else v for v in cols[9] or (None,) * 9]
        assert [row[n] for n in PARTITION_FIELD_COLUMNS] == typed
        assert [row[n] for n in EVENT_FIELD_COLUMNS] == list(cols[10] or (None,) * 6)
    # Batch fields per row: the run each row came from.
    row = rows[len(batches[0]) + len(batches[1])]  # first row of batch 2
    assert (row["batch_base_offset"], row["epoch"], row["principal"], row["request_id"]) == (
        row["offset"], 1, "admin", "req-2")


def test_unreadable_record_is_found_where_it_is(tmp_path: Path) -> None:
    rng = random.Random(12)
    batches = _mixed_batches(rng, 400)
    # An unreadable record in batch 151, and a CRC-damaged batch after it in the same
    # Arrow batch of rows: the first damage in the file is what is reported.
    at = min(5, len(batches[151]))
    batches[151].insert(at, _wrap(TRUNCATED_ISR))
    bad_offset = sum(len(b) for b in batches[:151]) + at
    path = _write_log(tmp_path, batches)
    data = bytearray(path.read_bytes())
    from controller.logformat.batch import iter_batches

    stored = iter_batches(bytes(data))
    batch_at = sum(len(encode_batch(b)) for b in stored[:151])
    later = sum(len(encode_batch(b)) for b in stored[:160]) + 50
    data[later] ^= 0xFF
    path.write_bytes(bytes(data))
    piece = plan_files(str(tmp_path))[0]
    with pytest.raises(MetakraftCorruptLogError,
                       match=rf"unreadable record at offset {bad_offset} \(batch at byte "
                             rf"{batch_at}\)"):
        list(read_file(piece))
    rows = [r for b in read_file(piece, permissive=True) for r in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(bad_offset + 1))
    assert all(r["_corrupt"] is None and r["record_type"] for r in rows[:-1])
    last = rows[-1]
    assert last["record_type"] is None and f"offset {bad_offset}" in last["_corrupt"]
    assert (last["batch_base_offset"], last["request_id"]) == (bad_offset - at, "req-151")
    # Without the unreadable record, the CRC damage is the first and is reported.
    batches[151].pop(at)
    other = tmp_path / "crc"
    _write_log(other, batches)
    crc_data = bytearray((other / "metadata" / path.name).read_bytes())
    crc_data[sum(len(encode_batch(b)) for b in iter_batches(bytes(crc_data))[:160]) + 50] ^= 0xFF
    (other / "metadata" / path.name).write_bytes(bytes(crc_data))
    with pytest.raises(MetakraftCorruptLogError, match="CRC"):
        list(read_file(plan_files(str(other))[0]))
