"""The Spark-free reader layer: row columns, JSON, file planning, damage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytics.reader import MetakraftCorruptLogError, plan_files, read_file
from analytics.rows import record_columns
from analytics.schema import arrow_schema
from controller.records import decode_record, record_to_dict
from controller.storage.batch import iter_batches
from tests.analytics.history import Known


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


def _damage(root: Path, tmp_path: Path) -> tuple[Path, str, int]:
    import shutil

    copy = tmp_path / "damaged"
    shutil.copytree(root, copy)
    seg = sorted((copy / "metadata").glob("*.log"))[1]
    data = bytearray(seg.read_bytes())
    first = iter_batches(bytes(data))[0]
    data[60] ^= 0xFF  # inside the first batch's body: the CRC no longer matches
    seg.write_bytes(bytes(data))
    return copy, seg.name, first.base_offset


def test_corrupt_batch_names_file_and_offset(log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    copy, name, offset = _damage(log_dir[0], tmp_path)
    piece = next(p for p in plan_files(str(copy)) if p.path.endswith(name))
    with pytest.raises(MetakraftCorruptLogError, match=rf"{name}.*offset {offset}"):
        list(read_file(piece))
    rows = [r for b in read_file(piece, permissive=True) for r in b.to_pylist()]
    assert len(rows) == 1 and rows[0]["offset"] == offset
    assert name in rows[0]["_corrupt"] and "CRC" in rows[0]["_corrupt"]
