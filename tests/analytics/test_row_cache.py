"""The audit's row cache without Spark: which pieces it keys, what it stores and
refuses, what a read leaves out. The audit through it (rows and report equal to a
full audit's) is in test_tier.py, on a real cluster's tier."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analytics import row_cache
from analytics.reader import FileSlice, plan_history_files
from analytics.schema import CORRUPT_COLUMN, arrow_schema
from analytics.source import MetakraftReader, _Options
from tests.support.tier_objects import build


def tier_pieces(tmp_path: Path, *, hashed_from: int = 0) -> list[FileSlice]:
    tier = build(tmp_path, 4, hashed_from=hashed_from)
    return plan_history_files(None, tier.store.url)


def rows(n: int, *, permissive: bool = False, damaged: bool = False) -> pa.RecordBatch:
    schema = arrow_schema(permissive)
    columns = [pa.nulls(n, f.type) for f in schema]
    columns[0] = pa.array(range(n), pa.int64())
    if damaged:
        columns[-1] = pa.array([None] * (n - 1) + ["segment x: bad CRC"], pa.string())
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def test_only_hashed_tier_objects_are_keyed_each_range_its_own(tmp_path: Path) -> None:
    pieces = tier_pieces(tmp_path / "a", hashed_from=2)
    keys = [row_cache.piece_key(p) for p in pieces]
    # Objects below level 9 carry no SHA-256 of their data: a replaced one would pass.
    assert keys[:2] == [None, None] and all(keys[2:]) and len(set(keys[2:])) == 2
    whole = pieces[3]
    part = FileSlice(whole.path, whole.kind, whole.start + 1, whole.end, tier=whole.tier,
                     manifest=whole.manifest)
    assert row_cache.piece_key(part) not in (None, keys[3])
    local = FileSlice("/data/metadata/00000000000000000040.log", "segment", 40, 50)
    snapshot = FileSlice(whole.path, "snapshot", 0, 50, 39, tier=whole.tier,
                         manifest=whole.manifest)
    assert row_cache.piece_key(local) is None and row_cache.piece_key(snapshot) is None
    # The same objects at another URL (a copied tier, another mount): the same keys.
    copied = tier_pieces(tmp_path / "b", hashed_from=2)
    assert copied[0].tier != pieces[0].tier
    assert [row_cache.piece_key(p) for p in copied] == keys


def test_stored_rows_read_back_equal_and_damage_is_not_stored(tmp_path: Path) -> None:
    folder = row_cache.mode_dir(tmp_path, permissive=True, change_json=False)
    assert folder.name == f"rows-v{row_cache.ROWS_VERSION}-permissive"
    batches = [rows(5, permissive=True), rows(3, permissive=True)]
    assert row_cache.store(folder, "k1", batches, arrow_schema(True))
    back = pq.read_table(folder / "k1.parquet")
    assert back.schema == arrow_schema(True)
    assert back.equals(pa.Table.from_batches(batches))
    assert not row_cache.store(folder, "k2", [rows(4, permissive=True, damaged=True)],
                               arrow_schema(True))
    assert sorted(p.name for p in folder.iterdir()) == ["k1.parquet"]  # no temporary left
    assert CORRUPT_COLUMN in back.schema.names


def test_a_cache_that_cannot_be_written_is_said_and_stores_nothing(tmp_path: Path) -> None:
    """The cache only saves time: a folder that cannot be made (here under a file, so
    the check holds for root too) is named as a problem before the audit (which then
    decodes everything), and a store into it returns False instead of failing the
    executor's task."""
    good = tmp_path / "cache"
    assert row_cache.problem(good) is None and good.is_dir()
    assert list(good.iterdir()) == []  # the probe is gone
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    bad = blocker / "cache"
    said = row_cache.problem(bad)
    assert said is not None and said.startswith(("NotADirectoryError", "FileExistsError")), said
    assert not row_cache.store(bad, "k1", [rows(2)], arrow_schema())
    assert blocker.read_text() == "not a folder"


def test_split_and_prune(tmp_path: Path) -> None:
    pieces = tier_pieces(tmp_path)
    folder = tmp_path / "cache"
    keys = [row_cache.piece_key(p) for p in pieces]
    assert all(keys)
    row_cache.store(folder, str(keys[1]), [rows(2)], arrow_schema())
    row_cache.store(folder, "gone", [rows(2)], arrow_schema())
    split = row_cache.split(pieces, folder)
    assert split.cached_keys == {keys[1]}
    assert split.cached_files == (str(folder / f"{keys[1]}.parquet"),)
    assert split.to_read == (pieces[0], *pieces[2:])
    assert row_cache.split(pieces, folder, use=False).to_read == tuple(pieces)  # --full
    assert row_cache.prune(folder, filter(None, keys)) == 1
    assert [p.stem for p in folder.iterdir()] == [keys[1]]


def test_the_source_leaves_out_the_cached_pieces_and_refuses_unknown_ones(
        tmp_path: Path) -> None:
    pieces = tier_pieces(tmp_path)
    url = pieces[0].tier
    keys = [row_cache.piece_key(p) for p in pieces]

    def planned(cached: str) -> list[FileSlice]:
        reader = MetakraftReader(_Options({"tier": url, "cacheDir": str(tmp_path / "c"),
                                           "cachedPieces": cached}))
        return [p.piece for p in reader.partitions()]

    assert planned("") == pieces
    assert planned(f"{keys[0]},{keys[2]}") == [pieces[1], pieces[3]]
    with pytest.raises(ValueError, match="not in this read's plan"):
        planned(f"{keys[0]},{'0' * 64}")
    with pytest.raises(ValueError, match="cachedPieces needs cacheDir"):
        _Options({"tier": url, "cachedPieces": str(keys[0])})
