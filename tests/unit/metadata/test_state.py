"""MetadataState: replay dispatch, snapshots, images, revert to a committed offset."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import controller.metadata
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    CreatableTopic,
    MetadataReplayError,
    OpType,
    ReassignmentRequest,
    ResourceType,
)
from controller.records import (
    AccessControlEntryRecord,
    LeaderChangeRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    RecordPayload,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    TopicRecord,
    make_record,
    record_type,
)
from controller.records import metadata_pb2 as pb
from tests.unit.metadata.support import SESSION_MS, Harness, new_state


def busy_harness() -> Harness:
    h = Harness()
    h.add_brokers([1, 2, 3, 4])
    h.create("a", partitions=3, rf=3, configs=(("retention.ms", "10"),))
    h.create("b", partitions=2, rf=2)
    h.apply(
        h.state.configs.incremental_alter_configs(
            [
                AlterConfigsResource(
                    ConfigResource(ResourceType.BROKER, "2"),
                    (AlterConfigOp("background.threads", OpType.SET, "3"),),
                )
            ]
        )
    )
    acl = AccessControlEntryRecord(
        id="acl-1",
        resource_type=pb.ACL_RESOURCE_TYPE_TOPIC,
        resource_name="a",
        pattern_type=pb.ACL_PATTERN_TYPE_LITERAL,
        principal="User:x",
        host="*",
        operation=pb.ACL_OPERATION_READ,
        permission_type=pb.ACL_PERMISSION_TYPE_ALLOW,
    )
    h.apply(controller.metadata.ControllerResult((make_record(acl),), None))
    return h


def test_control_and_noop_records_are_ignored() -> None:
    state = new_state()
    before = state.to_image()
    payloads: list[RecordPayload] = [
        NoOpRecord(),
        LeaderChangeRecord(leader_id=1, epoch=1),
        SnapshotHeaderRecord(),
        SnapshotFooterRecord(),
    ]
    for i, payload in enumerate(payloads):
        state.replay(make_record(payload), i)
    assert state.to_image() == before
    assert state.last_applied_offset() == 3


def test_unknown_record_type_is_a_clear_error() -> None:
    state = new_state()
    with pytest.raises(MetadataReplayError, match="no record type"):
        state.replay(MetadataRecord(version=1), 0)


def test_bad_records_raise_and_change_nothing() -> None:
    h = busy_harness()
    image = h.state.to_image()
    bad = [
        make_record(TopicRecord(name="a", topic_id="another-id")),
        make_record(PartitionChangeRecord(topic_id="no-such", partition_id=0)),
        make_record(RemoveTopicRecord(topic_id="no-such")),
        make_record(RemoveAccessControlEntryRecord(id="nope")),
    ]
    for record in bad:
        with pytest.raises(MetadataReplayError):
            h.state.replay(record, h.next_offset)
    assert h.state.to_image() == image
    with pytest.raises(MetadataReplayError, match="after offset"):
        h.state.replay(make_record(NoOpRecord()), 0)


def test_snapshot_records_order_and_round_trip() -> None:
    h = busy_harness()
    kinds = [record_type(r) for r in h.state.snapshot_records()]
    order = ["feature_level", "register_broker", "topic", "config", "access_control_entry"]
    positions = [max(i for i, k in enumerate(kinds) if k == kind) for kind in order]
    assert positions == sorted(positions)
    assert "partition" in kinds
    h.check()
    assert len(h.state.to_image().acls) == 1


def test_snapshot_at_a_past_epoch_equals_the_state_then() -> None:
    h = busy_harness()
    committed = h.committed
    image_then = h.state.to_image()
    h.apply(h.state.replication.delete_topics(["a"]))
    h.create("c", partitions=2, rf=1)
    assert h.state.to_image(committed) == image_then
    rebuilt = new_state(5)
    for record in h.state.snapshot_records(committed):
        rebuilt.replay(record, committed)
    assert rebuilt.to_image() == image_then


def test_revert_to_committed_offset_restores_the_state_exactly() -> None:
    h = busy_harness()
    committed = h.committed
    committed_image = h.state.to_image()
    committed_records = h.state.snapshot_records()
    # Uncommitted work of every kind.
    h.apply(h.state.replication.create_topics([CreatableTopic("new", 4, 2)]))
    h.apply(h.state.replication.delete_topics(["b"]))
    h.apply(
        h.state.replication.alter_partition_reassignments([ReassignmentRequest("a", 0, (4, 1, 2))])
    )
    h.now_ms = SESSION_MS + 1
    h.heartbeat(1)
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    h.apply(h.state.cluster.unregister_broker(1))
    h.register(9)
    assert h.state.to_image() != committed_image
    h.state.revert_to_committed(committed)
    assert h.state.cluster.heartbeat_state(2) is None  # soft state dropped
    assert h.state.to_image() == committed_image
    assert h.state.snapshot_records() == committed_records
    assert h.state.last_applied_offset() == committed
    h.state.replication.check_indexes()
    assert h.state.check_invariants() == []


def test_package_imports_no_io_clock_or_randomness() -> None:
    forbidden = {"asyncio", "grpc", "socket", "time", "random", "threading", "os", "io"}
    package = Path(controller.metadata.__file__).parent
    files = sorted(package.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path.name} imports {name}"
