"""The `metakraft` Spark data source on the real log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analytics.schema import COLUMN_NAMES
from tests.analytics.history import Known
from tests.analytics.plant import copy_log, damage_crc

pytestmark = pytest.mark.spark


def test_schema_and_one_partition_per_segment(spark: Any, log_dir: tuple[Path, Known]) -> None:
    root, known = log_dir
    df = spark.read.format("metakraft").load(str(root))
    assert tuple(df.columns) == COLUMN_NAMES
    assert dict(df.dtypes)["append_time"] == "timestamp"
    assert df.rdd.getNumPartitions() == known.segment_count
    offsets = [r.offset for r in df.select("offset").orderBy("offset").collect()]
    assert offsets == list(range(known.end_offset))


def test_snapshots_and_offset_range(spark: Any, log_dir: tuple[Path, Known]) -> None:
    root, known = log_dir
    with_snap = spark.read.format("metakraft").option("snapshots", "true").load(str(root))
    snap = with_snap.where("source = 'snapshot'")
    assert snap.count() > 0
    assert {r.offset for r in snap.select("offset").distinct().collect()} == {
        known.snapshot_offset}
    ranged = (spark.read.format("metakraft").option("startOffset", 10)
              .option("endOffset", 20).load(str(root)))
    assert sorted(r.offset for r in ranged.select("offset").collect()) == list(range(10, 20))


def test_origin_and_topic_names(spark: Any, log_dir: tuple[Path, Known]) -> None:
    import analytics

    root, known = log_dir
    df = analytics.load(spark, str(root))
    orders = known.topic_ids["orders"]
    rows = df.where(f"topic_id = '{orders}'").select("record_type", "topic_name").collect()
    assert {r.topic_name for r in rows} == {"orders"}
    assert {r.record_type for r in rows} >= {"topic", "partition", "partition_change"}
    created = df.where("record_type = 'topic' AND topic_name = 'logs'").first()
    assert (created.principal, created.client_address, created.request_id) == (
        "bob", "ipv4:10.0.0.6:4200", "req-b1")


def test_corrupt_log_fails_naming_file_or_reports_in_column(
        spark: Any, log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    copy = copy_log(log_dir[0], tmp_path / "bad")
    seg, _ = damage_crc(copy)
    with pytest.raises(Exception, match=seg.name):
        spark.read.format("metakraft").load(str(copy)).count()
    df = spark.read.format("metakraft").option("mode", "permissive").load(str(copy))
    bad = df.where("_corrupt IS NOT NULL").collect()
    assert len(bad) == 1 and seg.name in bad[0]["_corrupt"]


def test_partition_change_json_option(spark: Any, log_dir: tuple[Path, Known]) -> None:
    root = log_dir[0]
    full = spark.read.format("metakraft").load(str(root))
    lean = spark.read.format("metakraft").option("partitionChangeJson", "false").load(str(root))
    assert lean.columns == full.columns
    # Everything equal but PartitionChange JSON, which is null.
    expected = full.selectExpr(
        "*", "CASE WHEN record_type = 'partition_change' THEN NULL ELSE record_json END AS _j"
    ).drop("record_json").withColumnRenamed("_j", "record_json").select(*full.columns)
    assert lean.exceptAll(expected).count() == 0 and expected.exceptAll(lean).count() == 0
    assert lean.where("record_type = 'partition_change'").count() > 0
    for bad in ("maybe", ""):
        with pytest.raises(Exception, match="partitionChangeJson must be true or false"):
            spark.read.format("metakraft").option("partitionChangeJson", bad).load(
                str(root)).count()
    with pytest.raises(Exception, match="snapshots must be true or false"):
        spark.read.format("metakraft").option("snapshots", "maybe").load(str(root)).count()


@pytest.mark.parametrize(("options", "error"), [
    ({"startoffset": "ten"}, "option startOffset must be an offset (an integer >= 0), not 'ten'"),
    ({"endoffset": "-1"}, "option endOffset must be an offset (an integer >= 0), not '-1'"),
    ({"startoffset": "9", "endoffset": "3"}, "empty offset range: startOffset 9 > endOffset 3"),
    ({"mode": "lenient"}, "mode must be failfast or permissive, not lenient"),
    ({"startofset": "5"}, "unknown option(s) startofset; the options are snapshots, "
                          "partitionChangeJson, mode, startOffset, endOffset, tier, seed, cacheDir, "
                          "cachedPieces"),
    ({"seed": "true"}, "option seed needs a startOffset above 0"),
    ({"path": ""}, "give the log directory to load(PATH), or a remote tier with "
                   'option("tier", URL), or both'),
    ({"tier": "gs://bucket/x"}, None),
])
def test_bad_options_are_refused_by_name(options: dict[str, str], error: str | None) -> None:
    """Checked where Spark asks for the schema, before any file is read (no JVM needed:
    Spark hands the source its options lower-cased, as here)."""
    from analytics.source import MetakraftDataSource

    source = MetakraftDataSource({"path": "/var/lib/metakraft/node-1", **options})
    with pytest.raises(ValueError) as raised:
        source.schema()
    if error is None:  # a bad tier URL: the tier's own message
        assert "expected file:///path or s3://bucket/prefix" in str(raised.value)
    else:
        assert str(raised.value) == f"metakraft source: {error}"


def test_good_options_pass(log_dir: tuple[Path, Known]) -> None:
    from analytics.source import MetakraftDataSource

    source = MetakraftDataSource({"path": str(log_dir[0]), "startoffset": "0",
                                  "endoffset": "0", "mode": "PERMISSIVE",
                                  "snapshots": "false", "partitionchangejson": "true"})
    assert source.schema().endswith("`_corrupt` STRING")
    assert source.reader(None).partitions() == []  # the empty range [0, 0)


def test_a_misspelt_option_fails_the_read(spark: Any, log_dir: tuple[Path, Known]) -> None:
    with pytest.raises(Exception, match=r"unknown option\(s\) endoffest"):
        spark.read.format("metakraft").option("endOffest", 10).load(str(log_dir[0])).count()
