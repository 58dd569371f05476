"""The fast catch-up paths: bulk decode, the state.json template, prewrites, and that
a crash at any point of them still converges."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from broker_agent.agent import BrokerAgent
from broker_agent.delta import DeltaReplayError, build_image_from_bytes
from broker_agent.local_state import (
    STATE_FILE,
    LocalPartitionStore,
    encode_replica,
    replica_to_json,
)
from broker_agent.reconciler import (
    BecomeFollower,
    BecomeLeader,
    Instruction,
    LocalReplica,
    ReplicaRole,
    plan_full,
)
from broker_agent.snapshot_load import read_snapshot_image
from controller.gc_policy import gc_paused
from controller.logformat import SnapshotId
from controller.records import RecordDecodeError, encode_record, make_record
from controller.records import metadata_pb2 as pb
from controller.storage import snapshot_file as sf
from tests.unit.broker_agent.records_support import partition, topic

LEADER, FOLLOWER = ReplicaRole.LEADER, ReplicaRole.FOLLOWER


def _replicas(n: int, topic_name: str = "t", epoch: int = 1) -> list[LocalReplica]:
    return [LocalReplica(topic_name, topic_name.upper(), i, LEADER if i % 3 == 0 else FOLLOWER,
                         1 if i % 3 == 0 else 2, epoch, i) for i in range(n)]


def _plan(replicas: list[LocalReplica]) -> list[Instruction]:
    leaders = [BecomeLeader(r) for r in replicas if r.role is LEADER]
    followers = [BecomeFollower(r) for r in replicas if r.role is FOLLOWER]
    return [*leaders, *followers]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_template_encoding_is_the_json_encoding() -> None:
    for replica in [LocalReplica("a", "A", 0, LEADER, 1, 3, 7),
                    LocalReplica('we"ird\\é', "x-y", 12, FOLLOWER, -1, 0, 2**31 - 1)]:
        expected = json.dumps(replica_to_json(replica), sort_keys=True).encode() + b"\n"
        assert encode_replica(replica) == expected


def test_bulk_decode_keeps_the_decode_errors() -> None:
    good = [encode_record(topic("a", "A")), encode_record(partition("A", 0, (1, 2)))]
    assert build_image_from_bytes(good, 1).partition(("A", 0)) is not None
    with pytest.raises(RecordDecodeError):
        build_image_from_bytes([*good, b"\xff\xff\xff"], 2)
    newer = make_record(pb.PartitionRecord(topic_id="A", partition_id=1, replicas=[1]))
    newer.version = 99
    with pytest.raises(RecordDecodeError):
        build_image_from_bytes([*good, newer.SerializeToString()], 2)
    with pytest.raises(DeltaReplayError):
        build_image_from_bytes([encode_record(partition("Z", 0, (1,)))], 0)


def test_gc_paused_nests() -> None:
    assert gc.isenabled()
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_grouped_apply_in_threads_matches_the_plan(tmp_path: Path) -> None:
    store = LocalPartitionStore(tmp_path, write_threads=3)
    replicas = _replicas(1000)
    store.apply_all(_plan(replicas))
    assert LocalPartitionStore(tmp_path).load() == {r.dir_name: r for r in replicas}
    assert not list((tmp_path / "partitions").rglob("*.tmp"))
    # Applying the same plan again leaves the same files.
    store.apply_all(_plan(replicas))
    assert LocalPartitionStore(tmp_path).load() == {r.dir_name: r for r in replicas}


def test_prewrites_are_renamed_or_rewritten_and_leftovers_removed(tmp_path: Path) -> None:
    store = LocalPartitionStore(tmp_path)
    kept = LocalReplica("k", "K", 0, LEADER, 1, 1, 1)
    store.apply_all([BecomeLeader(kept)])
    replicas = _replicas(100)
    changed = LocalReplica("t", "T", 5, LEADER, 1, 9, 9)  # the plan wants another state
    stray = LocalReplica("gone", "G", 0, LEADER, 1, 1, 1)  # the plan does not want it
    store.prewrite([*replicas, stray, LocalReplica("k", "K", 0, LEADER, 1, 2, 2)])
    # Nothing visible yet (load reads only state.json).
    assert (tmp_path / "partitions" / "k-0" / STATE_FILE).read_bytes() == encode_replica(kept)
    assert not (tmp_path / "partitions" / "t-0" / STATE_FILE).exists()
    final = [changed if r.dir_name == "t-5" else r for r in replicas]
    store.apply_all(_plan(final))
    assert "prewritten" in "".join(store.last_apply_phases)
    want = {r.dir_name: r for r in final} | {"k-0": kept}
    assert LocalPartitionStore(tmp_path).load() == want
    assert not list((tmp_path / "partitions").rglob("*.tmp"))
    assert not (tmp_path / "partitions" / "gone-0").exists()


def test_a_crash_after_prewrites_converges(tmp_path: Path) -> None:
    replicas = _replicas(80)
    crashed = LocalPartitionStore(tmp_path)
    crashed.prewrite(replicas)
    crashed.close()  # the process dies here: temp files and new directories remain
    assert (tmp_path / "partitions" / "t-0" / (STATE_FILE + ".pre.tmp")).exists()
    restarted = LocalPartitionStore(tmp_path)
    local = restarted.load()
    assert local == {r.dir_name: None for r in replicas}  # directories without state
    # Whatever the image wants after the restart, the full plan gets there.
    writer = sf.SnapshotWriter(tmp_path / "snap", SnapshotId(3, 1))
    writer.append([encode_record(topic("t", "T")), encode_record(partition("T", 0, (1, 2))),
                   encode_record(partition("T", 1, (2, 3)))])
    image = read_snapshot_image(writer.freeze(), 3)
    restarted.apply_all(plan_full(local, image, 1).instructions)
    assert LocalPartitionStore(tmp_path).load() == {
        "t-0": LocalReplica("t", "T", 0, LEADER, 1, 0, 0)}
    assert _files(tmp_path / "partitions") == ["t-0", "t-0/state.json"]


def test_agent_prewrites_while_the_snapshot_decodes(tmp_path: Path) -> None:
    writer = sf.SnapshotWriter(tmp_path / "snap", SnapshotId(1000, 1))
    records = []
    for t in range(30):
        records.append(encode_record(topic(f"t{t}", f"T{t}")))
        records += [encode_record(partition(f"T{t}", p, ((t + p) % 4 + 1, (t + p + 1) % 4 + 1)))
                    for p in range(30)]
    writer.append(records)
    path = writer.freeze()
    store = LocalPartitionStore(tmp_path / "broker")
    agent = BrokerAgent(1, store)
    image = read_snapshot_image(path, 1000, agent)
    agent.publish_full(image)
    agent.flush()
    agent.close()
    assert agent.failure is None
    assert "prewritten" in "".join(store.last_apply_phases)
    on_disk = LocalPartitionStore(tmp_path / "broker").load()
    assert on_disk and plan_full(on_disk, image, 1).empty
    assert not list((tmp_path / "broker" / "partitions").rglob("*.tmp"))
    # A second load of the same snapshot prewrites nothing (the disk has it).
    again = BrokerAgent(1, LocalPartitionStore(tmp_path / "broker"))
    read_snapshot_image(path, 1000, again)
    assert not list((tmp_path / "broker" / "partitions").rglob("*.tmp"))
    again.close()
