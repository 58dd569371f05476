"""`metakraft storage ...` and `metakraft log ...` on real files, through click's runner."""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.testing import CliRunner

from controller.cli.log_cmd import log as log_group
from controller.cli.storage_cmd import storage as storage_group
from controller.logformat import RecordBatch, SnapshotId
from controller.logformat.batch import BatchOrigin
from controller.quorum.bootstrap import parse_initial_controllers
from controller.quorum.log_adapter import DurableRaftLog
from controller.raft.control import voters_in
from controller.records import PartitionRecord, TopicRecord, encode_record, make_record
from controller.storage.log import LogConfig, SegmentedLog
from controller.storage.meta_properties import (
    DataDir,
    format_data_dir,
    random_cluster_id,
    read_meta_properties,
)
from controller.storage.snapshot_file import SnapshotWriter

CONFIG = LogConfig(index_interval_bytes=128)


# The two groups as main.py registers them, without importing main.py: the test
# then does not depend on the other areas' commands.
@click.group()
def cli() -> None:
    pass


cli.add_command(log_group)
cli.add_command(storage_group)


def topic(i: int) -> bytes:
    return encode_record(make_record(TopicRecord(name=f"t{i}", topic_id=f"id{i}")))


def partition(i: int) -> bytes:
    return encode_record(make_record(PartitionRecord(partition_id=i, topic_id="id0",
                                                     replicas=[1, 2, 3], isr=[1, 2, 3],
                                                     leader=1)))


def make_log(directory: Path, segments: int = 2) -> int:
    with SegmentedLog.open(directory, CONFIG) as log:
        for s in range(segments):
            if s:
                log.roll()
            log.append_records(s + 1, 1000 + s, [topic(s), partition(0), partition(1)],
                               BatchOrigin("User:admin", "127.0.0.1:5000", f"req-{s}"))
            log.append_records(s + 1, 2000 + s, [b"\xff\xfe not a record"])
        log.flush()
        return log.end_offset


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_random_uuid_and_format(tmp_path: Path) -> None:
    code, out, _ = run("storage", "random-uuid")
    cid = out.strip()
    assert code == 0 and len(cid) == 22
    d = str(tmp_path / "data")
    code, out, _ = run("storage", "format", "--cluster-id", cid, "--node-id", "3", "--data-dir", d)
    assert code == 0 and "Formatted" in out
    code, _, err = run("storage", "format", "--cluster-id", cid, "--node-id", "3",
                       "--data-dir", d)
    assert code == 1 and "already formatted" in err
    code, out, _ = run("storage", "format", "--cluster-id", cid, "--node-id", "3",
                       "--data-dir", d, "--ignore-formatted")
    assert code == 0 and "left unchanged" in out
    code, _, err = run("storage", "format", "--cluster-id", "nope", "--node-id", "1",
                       "--data-dir", str(tmp_path / "other"))
    assert code == 1 and "invalid cluster id" in err
    code, out, _ = run("storage", "info", "--data-dir", d)
    assert code == 0 and json.loads(out)["node_id"] == 3


def test_dump_segments_prints_one_record_a_line(tmp_path: Path) -> None:
    end = make_log(tmp_path)
    code, out, _ = run("log", "dump", str(tmp_path))
    lines = [json.loads(line) for line in out.splitlines()]
    files = [line for line in lines if "file" in line and "offset" not in line]
    records = [line for line in lines if "offset" in line]
    assert len(files) == 2 and [r["offset"] for r in records] == list(range(end))
    first = records[0]
    assert first["type"] == "topic" and first["fields"]["name"] == "t0"
    assert first["origin"] == {"principal": "User:admin", "client_address": "127.0.0.1:5000",
                               "request_id": "req-0"}
    assert (first["epoch"], first["append_time_ms"], first["batch_base_offset"],
            first["is_control"], first["version"]) == (1, 1000, 0, False, 1)
    assert records[1]["fields"]["replicas"] == [1, 2, 3]
    # The undecodable record is an error line with its offset, not a crash.
    assert records[3]["offset"] == 3 and "does not decode" in records[3]["error"]
    assert code == 1


def test_dump_filters_by_offset_and_type_and_prints_iso_times(tmp_path: Path) -> None:
    make_log(tmp_path)  # offsets 0-3: topic, partition, partition, junk; 4-7 the same

    def records(*args: str) -> list[dict[str, object]]:
        _, out, _ = run("log", "dump", *args, str(tmp_path))
        return [r for r in map(json.loads, out.splitlines()) if "offset" in r]

    assert [r["offset"] for r in records("--from-offset", "2", "--to-offset", "5")] == \
        [2, 3, 4, 5]
    assert [r["offset"] for r in records("--type", "partition")] == [1, 2, 3, 5, 6, 7]
    # A record that does not decode is shown whatever the types asked (it has none).
    assert [r["offset"] for r in records("--type", "topic", "--from-offset", "3")] == [3, 4, 7]
    first = records("--to-offset", "0")[0]
    assert (first["append_time_ms"], first["append_time"]) == (1000, "1970-01-01T00:00:01.000Z")
    code, _, err = run("log", "dump", "--type", "nope", str(tmp_path))
    assert code == 2 and "nope" in err
    code, _, err = run("log", "dump", "--from-offset", "5", "--to-offset", "4", str(tmp_path))
    assert code == 2 and "below --from-offset" in err


def test_dump_skip_metadata(tmp_path: Path) -> None:
    make_log(tmp_path, segments=1)
    _, out, _ = run("log", "dump", "--skip-metadata", str(next(tmp_path.glob("*.log"))))
    lines = [json.loads(line) for line in out.splitlines()]
    assert set(lines[0]) == {"type", "version", "fields"}
    assert len(lines) == 4


def test_dump_and_verify_snapshot(tmp_path: Path) -> None:
    with SnapshotWriter(tmp_path, SnapshotId(42, 3), 99) as writer:
        writer.append([topic(i) for i in range(5)])
        path = writer.freeze()
    code, out, _ = run("log", "dump", str(path))
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert lines[0] == {"file": str(path), "kind": "snapshot"}
    assert lines[1]["type"] == "snapshot_header"
    assert lines[1]["fields"]["last_contained_offset"] == 41
    assert lines[-1]["type"] == "snapshot_footer"
    assert [line["type"] for line in lines[2:-1]] == ["topic"] * 5
    code, out, _ = run("log", "verify", str(path))
    assert code == 0 and "1 snapshot file(s)" in out


def test_verify_good_log(tmp_path: Path) -> None:
    end = make_log(tmp_path, segments=3)
    code, out, _ = run("log", "verify", str(tmp_path))
    assert code == 0
    assert out.count("\n") == 1 and "3 segment file(s)" in out and f"ends at {end}" in out


def test_verify_names_first_bad_file_and_offset(tmp_path: Path) -> None:
    make_log(tmp_path, segments=3)
    second = sorted(tmp_path.glob("*.log"))[1]
    data = bytearray(second.read_bytes())
    data[-2] ^= 0x10
    second.write_bytes(bytes(data))
    code, _, err = run("log", "verify", str(tmp_path))
    assert code == 1 and second.name in err and "offset 7" in err and "CRC" in err
    # dump reports it as an error line, still exits non-zero
    code, out, _ = run("log", "dump", str(second))
    assert code == 1 and '"error"' in out


def test_verify_detects_missing_segment(tmp_path: Path) -> None:
    make_log(tmp_path, segments=3)
    sorted(tmp_path.glob("*.log"))[1].unlink()
    code, _, err = run("log", "verify", str(tmp_path))
    assert code == 1 and "missing or overlapping" in err


def test_verify_detects_torn_tail(tmp_path: Path) -> None:
    make_log(tmp_path, segments=1)
    seg = next(tmp_path.glob("*.log"))
    seg.write_bytes(seg.read_bytes()[:-1])
    code, _, err = run("log", "verify", str(seg))
    assert code == 1 and seg.name in err


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run("log", "verify", str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in err


def test_format_a_dynamic_quorum_and_reformat_a_replica(tmp_path: Path) -> None:
    code, out, _ = run("storage", "random-uuid")
    cid = out.strip()
    d1, d2 = (run("storage", "random-uuid")[1].strip() for _ in range(2))
    initial = f"1@127.0.0.1:9001:{d1},2@127.0.0.1:9002:{d2}"
    first = tmp_path / "c1"
    code, out, err = run("storage", "format", "--cluster-id", cid, "--node-id", "1",
                         "--data-dir", str(first), "--initial-controllers", initial)
    assert code == 0, err
    assert f"directory id {d1} (a dynamic quorum)" in out
    meta = read_meta_properties(first)
    assert (meta.directory_id, meta.kraft_version) == (d1, 1)
    # The log starts with the initial voter set, at offset 0 in epoch 0.
    with SegmentedLog.open(DataDir(first).log_dir) as log:
        (batch,) = log.read_batches(0)
    assert batch.is_control and batch.epoch == 0 and batch.base_offset == 0
    assert voters_in(batch.records) == parse_initial_controllers(initial)
    # A controller that joins later: an empty log, its own new directory id.
    joining = tmp_path / "c3"
    code, out, err = run("storage", "format", "--cluster-id", cid, "--node-id", "3",
                         "--data-dir", str(joining), "--no-initial-controllers")
    assert code == 0, err
    assert read_meta_properties(joining).kraft_version == 1
    assert not list(DataDir(joining).log_dir.glob("*.log"))
    # Bad input: both modes, a node missing from the list, a malformed list.
    code, _, err = run("storage", "format", "--cluster-id", cid, "--node-id", "4",
                       "--data-dir", str(tmp_path / "c4"), "--initial-controllers", initial,
                       "--no-initial-controllers")
    assert code == 2 and "not both" in err
    code, _, err = run("storage", "format", "--cluster-id", cid, "--node-id", "4",
                       "--data-dir", str(tmp_path / "c4"), "--initial-controllers", initial)
    assert code == 1 and "not among the initial controllers" in err
    assert not (tmp_path / "c4").exists()
    for bad in ("1@h:1", "x@h:1:" + d1, f"1@h:1:{d1},1@h:2:{d2}", "1@h:1:short"):
        code, _, err = run("storage", "format", "--cluster-id", cid, "--node-id", "1",
                           "--data-dir", str(tmp_path / "c5"), "--initial-controllers", bad)
        assert code == 1 and "error:" in err, bad
    # A lost disk: moved aside (nothing deleted), formatted as a new replica of node 1.
    code, out, err = run("storage", "reformat-replica", "--data-dir", str(first))
    assert code == 0, err
    assert f"--directory-id {d1}" in out
    new = read_meta_properties(first)
    assert new.node_id == 1 and new.cluster_id == cid and new.kraft_version == 1
    assert new.directory_id not in (d1, d2)
    assert not list(DataDir(first).log_dir.glob("*.log"))
    (aside,) = tmp_path.glob("c1.replaced-*")
    assert read_meta_properties(aside).directory_id == d1


def test_info_shows_the_recovery_point_and_a_pending_repair(tmp_path: Path) -> None:
    data_dir = DataDir(tmp_path / "c1")
    format_data_dir(data_dir.root, random_cluster_id(), 1)
    log = DurableRaftLog.open(data_dir)
    log.append(RecordBatch(0, 1, 0, False, BatchOrigin(), (b"a", b"b")))
    log.flush()
    log.close()
    code, out, _ = run("storage", "info", "--data-dir", str(data_dir.root))
    assert code == 0 and json.loads(out)["recovery_point"] == 2
    assert json.loads(out)["pending_repair"] is None
    for segment in data_dir.log_dir.glob("*.log"):
        segment.unlink()
    DurableRaftLog.open(data_dir).close()  # finds the loss, notes the repair
    code, out, _ = run("storage", "info", "--data-dir", str(data_dir.root))
    shown = json.loads(out)
    assert shown["recovery_point"] == 0 and shown["pending_repair"]["repair_to_offset"] == 2
    assert "segment files are missing" in shown["pending_repair"]["reason"]
