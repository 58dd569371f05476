"""The Spark-free reader layer: row columns, JSON, file planning, damage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analytics.reader import MetakraftCorruptLogError, plan_files, read_file
from analytics.rows import record_columns
from analytics.schema import arrow_schema
from controller.logformat.batch import iter_batches
from controller.records import (
    PartitionChangeRecord,
    decode_record,
    encode_record,
    make_record,
    record_to_dict,
)
from tests.analytics.history import Known
from tests.analytics.plant import copy_log, damage_crc


def _all_records(root: Path) -> list[bytes]:
    out: list[bytes] = []
    for seg in sorted((root / "metadata").glob("*.log")):
        for batch in iter_batches(seg.read_bytes()):
            out.extend(batch.records)
    return out


def test_fast_json_equals_record_to_dict_for_every_record(log_dir: tuple[Path, Known]) -> None:
    records = _all_records(log_dir[0])
    assert len(records) == log_dir[1].end_offset
    for raw in records:
        cols = record_columns(raw)
        rec = decode_record(raw)
        assert json.loads(cols[8]) == record_to_dict(rec), cols[0]
        assert cols[0] == rec.WhichOneof("record") and cols[1] == rec.version
        assert cols[9] == _typed_from_json(json.loads(cols[8])), cols[8]
        assert cols[10] == _events_from_json(json.loads(cols[8])), cols[8]


def _events_from_json(record: dict[str, Any]) -> tuple[object, ...] | None:
    """The typed broker and config fields, as read from the record's JSON (the reference)."""
    f, kind = record["fields"], record["type"]
    if kind == "register_broker":
        return (int(f["broker_epoch"]), f["incarnation_id"], f["fenced"],
                f["in_controlled_shutdown"], None, None)
    if kind == "unregister_broker":
        return (int(f["broker_epoch"]), None, None, None, None, None)
    if kind == "broker_registration_change":
        fenced = {"FENCE_CHANGE_FENCE": True, "FENCE_CHANGE_UNFENCE": False}.get(f["fenced"])
        shutdown = f["in_controlled_shutdown"] == "CONTROLLED_SHUTDOWN_CHANGE_ENTER" or None
        return (int(f["broker_epoch"]), None, fenced, shutdown, None, None)
    if kind == "config":
        return (None, None, None, None, f["name"], f.get("value"))
    return None


def _typed_from_json(record: dict[str, Any]) -> tuple[object, ...] | None:
    """The typed partition fields, as read from the record's JSON (the reference)."""
    f = record["fields"]
    if record["type"] == "partition":
        return (f["leader"], tuple(f["isr"]), tuple(f["replicas"]),
                tuple(f["adding_replicas"]), tuple(f["removing_replicas"]),
                f["leader_recovery_state"], f["leader_epoch"], f["partition_epoch"],
                tuple(f["eligible_leader_replicas"]))
    if record["type"] == "partition_change":
        def ids(key: str) -> tuple[int, ...] | None:
            return tuple(f[key]["ids"]) if key in f else None
        return (f.get("leader"), ids("isr"), ids("replicas"), ids("adding_replicas"),
                ids("removing_replicas"), f.get("leader_recovery_state"), None, None,
                ids("eligible_leader_replicas"))
    return None


def test_files_are_planned_per_segment_and_pruned_by_offset(log_dir: tuple[Path, Known]) -> None:
    root, known = log_dir
    pieces = plan_files(str(root))
    assert len(pieces) == known.segment_count > 1
    assert [p.kind for p in plan_files(str(root), snapshots=True)][-1] == "snapshot"
    # Only the segments overlapping [30, 35) are read.
    narrow = plan_files(str(root), start=30, end=35)
    assert 1 <= len(narrow) < len(pieces)
    rows = [r for p in narrow for b in read_file(p) for r in b.column("offset").to_pylist()]
    assert rows == list(range(30, 35))


def test_batches_match_the_declared_schema(log_dir: tuple[Path, Known]) -> None:
    for piece in plan_files(str(log_dir[0]), snapshots=True):
        for batch in read_file(piece):
            assert batch.schema == arrow_schema()


def test_corrupt_batch_names_file_and_offset(log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    copy = copy_log(log_dir[0], tmp_path / "damaged")
    seg, offset = damage_crc(copy)
    name = seg.name
    piece = next(p for p in plan_files(str(copy)) if p.path.endswith(name))
    with pytest.raises(MetakraftCorruptLogError, match=rf"{name}.*offset {offset}"):
        list(read_file(piece))
    rows = [r for b in read_file(piece, permissive=True) for r in b.to_pylist()]
    assert len(rows) == 1 and rows[0]["offset"] == offset
    assert name in rows[0]["_corrupt"] and "CRC" in rows[0]["_corrupt"]


def _slow(raw: bytes) -> tuple[object, ...]:
    """What the protobuf path makes of a record (the reference for the fast paths)."""
    from analytics.rows import _slow_columns

    return _slow_columns(raw)


def test_fast_paths_equal_the_protobuf_path_on_edge_cases() -> None:
    import random

    from analytics.rows import rows_of
    from controller.records import (
        BrokerIdList,
        BrokerRegistrationChangeRecord,
        ConfigRecord,
        NoOpRecord,
        PartitionChangeRecord,
        RegisterBrokerRecord,
        UnregisterBrokerRecord,
        encode_record,
        make_record,
    )
    from controller.records import metadata_pb2 as pb

    rng = random.Random(5)
    payloads: list[object] = []
    for _ in range(400):
        change = PartitionChangeRecord(
            topic_id=rng.choice(["t", "a" * 36, "ü-topic-é", "x" * 100]),
            partition_id=rng.choice([0, 1, 127, 128, 300, 16383, 16384, 2**31 - 1]))
        if rng.random() < 0.7:
            change.isr.CopyFrom(BrokerIdList(ids=rng.sample([0, 1, 2, 127, 128, 999], 2)))
        if rng.random() < 0.5:
            change.leader = rng.choice([-1, 0, 3, 128, 70000])
        if rng.random() < 0.2:
            change.replicas.CopyFrom(BrokerIdList(ids=[]))
        if rng.random() < 0.2:
            change.adding_replicas.CopyFrom(BrokerIdList(ids=[4, 5]))
        if rng.random() < 0.2:
            change.leader_recovery_state = rng.choice(list(pb.LeaderRecoveryState.values()))
        payloads.append(change)
    payloads += [NoOpRecord(), BrokerRegistrationChangeRecord(
        broker_id=3, broker_epoch=9, fenced=pb.FENCE_CHANGE_FENCE)]
    # Every shape of the typed broker and config columns: each fence change, a
    # shutdown, a registration with both flags, an unregistration, a set and a delete.
    payloads += [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=2**40, fenced=f,
                                                in_controlled_shutdown=s)
                 for f in pb.FenceChange.values() for s in pb.ControlledShutdownChange.values()]
    payloads += [
        RegisterBrokerRecord(broker_id=2, incarnation_id="inc", broker_epoch=5, fenced=True,
                             in_controlled_shutdown=True),
        RegisterBrokerRecord(broker_id=2, incarnation_id="inc2", broker_epoch=6),
        UnregisterBrokerRecord(broker_id=2, broker_epoch=6),
        ConfigRecord(resource_type=pb.CONFIG_RESOURCE_TYPE_TOPIC, resource_name="t",
                     name="retention.ms", value="1"),
        ConfigRecord(resource_type=pb.CONFIG_RESOURCE_TYPE_BROKER, resource_name="3",
                     name="retention.ms")]
    raws = [encode_record(make_record(p)) for p in payloads]  # type: ignore[arg-type]
    # Hand-made wire layouts the encoder never writes: topic_id before partition_id,
    # and a partition_id restated after the topic id (last one wins in protobuf).
    tid = b"a" * 36
    odd = [b"\x12\x24" + tid + b"\x08\x05", b"\x08\x05\x12\x24" + tid + b"\x08\x07\x20\x01"]
    raws += [b"\x08\x01\x7a" + bytes([len(p)]) + p for p in odd]
    for _ in range(2):  # cold caches, then warm ones
        assert rows_of(raws) == [_slow(r) for r in raws]
    for raw in raws:
        cols = rows_of([raw])[0]
        assert json.loads(str(cols[8])) == record_to_dict(decode_record(raw))
        assert cols[9] == _typed_from_json(json.loads(str(cols[8])))
        assert cols[10] == _events_from_json(json.loads(str(cols[8])))


def test_unreadable_partition_change_is_still_an_error() -> None:
    from analytics.rows import rows_of
    from controller.records.codec import RecordDecodeError

    tid = b"a" * 36
    for body in (b"\x08\x05\x12\x24" + tid + b"\x1a\x09\x0a",   # truncated ISR
                 b"\x08\x05\x12\x24" + b"\xff" * 36):           # topic id not UTF-8
        raw = b"\x08\x01\x7a" + bytes([len(body)]) + body
        with pytest.raises(RecordDecodeError):
            rows_of([raw])
    # A recovery state this code has no name for (protobuf enums are open): an error
    # on both paths, not a KeyError and not a guessed name.
    unknown = encode_record(make_record(PartitionChangeRecord(
        topic_id="t" * 36, partition_id=1, leader_recovery_state=7)))  # type: ignore[arg-type]
    with pytest.raises(RecordDecodeError, match="leader_recovery_state 7"):
        rows_of([unknown])


def test_without_change_json_only_partition_change_json_is_left_out(
        log_dir: tuple[Path, Known]) -> None:
    from analytics.rows import rows_of

    records = _all_records(log_dir[0])
    full = rows_of(records)
    lean = rows_of(records, change_json=False)
    kinds = {cols[0] for cols in full}
    assert "partition_change" in kinds and len(kinds) > 3
    for a, b in zip(full, lean, strict=True):
        if a[0] == "partition_change":
            assert b == (*a[:8], None, *a[9:])  # the typed fields are all still there
        else:
            assert b == a
    # The same through the file reader (and on the protobuf path: cold caches miss).
    piece = plan_files(str(log_dir[0]))[0]
    for batch in read_file(piece, change_json=False):
        rows = batch.to_pylist()
        assert any(r["record_type"] == "partition_change" for r in rows)
        assert all((r["record_json"] is None) == (r["record_type"] == "partition_change")
                   for r in rows)
    # A change the wire fast path does not take (topic_id before partition_id).
    body = b"\x12\x24" + b"a" * 36 + b"\x08\x05"
    odd = b"\x08\x01\x7a" + bytes([len(body)]) + body
    assert rows_of([odd])[0][8] is not None
    assert rows_of([odd], change_json=False)[0] == (*rows_of([odd])[0][:8], None,
                                                     *rows_of([odd])[0][9:])


def test_damage_is_reported_the_same_without_change_json(log_dir: tuple[Path, Known],
                                                         tmp_path: Path) -> None:
    copy = copy_log(log_dir[0], tmp_path / "bad")
    seg = sorted((copy / "metadata").glob("*.log"))[1]
    seg.write_bytes(seg.read_bytes()[:-7])  # a torn last batch
    piece = next(p for p in plan_files(str(copy)) if p.path == str(seg))
    with pytest.raises(MetakraftCorruptLogError, match=seg.name):
        list(read_file(piece, change_json=False))
    rows = [r for b in read_file(piece, permissive=True, change_json=False)
            for r in b.to_pylist()]
    assert rows[-1]["_corrupt"] is not None and seg.name in rows[-1]["_corrupt"]
    assert all(r["_corrupt"] is None for r in rows[:-1])


def test_fast_json_of_eligible_leader_replicas_equals_record_to_dict() -> None:
    """Records of metadata.version 7 carry the ELR; the fast path prints it too."""
    from controller.records import encode_record, make_record
    from controller.records import metadata_pb2 as mpb

    part = mpb.PartitionRecord(partition_id=3, topic_id="t", replicas=[1, 2, 3], isr=[1],
                               leader=1, eligible_leader_replicas=[2, 3])
    change = mpb.PartitionChangeRecord(partition_id=3, topic_id="t",
                                       isr=mpb.BrokerIdList(ids=[1, 2]),
                                       eligible_leader_replicas=mpb.BrokerIdList(ids=[]))
    for record in (part, change):
        raw = encode_record(make_record(record))
        assert json.loads(record_columns(raw)[8]) == record_to_dict(decode_record(raw))
