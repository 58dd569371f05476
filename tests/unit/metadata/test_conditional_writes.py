"""Conditional writes: every topic and config resource has a mod offset (the log
offset of its last change), every partition its partition epoch; a write naming an
expected one fails CONDITION_FAILED, writing nothing for that item, once the
resource has changed. The mod offsets are timeline state (reverted with the rest),
the same on every controller that replayed the same log, and after a snapshot load
an upper bound that still tells every later change apart."""

from __future__ import annotations

from controller.metadata.configs import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    OpType,
    ResourceType,
)
from controller.metadata.errors import ControllerResult, ErrorCode
from controller.metadata.features import METADATA_VERSION
from controller.metadata.topics import CreatePartitionsTopic, ReassignmentRequest
from controller.records import FeatureLevelRecord, decode_record, encode_record, make_record
from tests.unit.metadata.support import Harness, new_state


def topic_mod(h: Harness, name: str) -> int:
    (desc,) = h.state.replication.describe_topics([name])
    return desc.mod_offset


def config_mod(h: Harness, resource: ConfigResource) -> int:
    (desc,) = h.state.configs.describe_configs([resource])
    return desc.mod_offset


def set_config(h: Harness, resource: ConfigResource, key: str, value: str | None,
               if_mod_offset: int | None = None) -> ErrorCode:
    op = AlterConfigOp(key, OpType.SET if value is not None else OpType.DELETE, value)
    (result,) = h.apply(h.state.configs.incremental_alter_configs(
        [AlterConfigsResource(resource, (op,), if_mod_offset)]))
    return result.error.code


def test_a_topic_mod_offset_moves_with_its_creation_and_added_partitions_only() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3])
    h.create("t", 2, 3)
    created = topic_mod(h, "t")
    assert created == h.committed  # the last record of the creating batch
    part = h.part("t")
    h.apply(h.state.replication.alter_partition_reassignments(
        [ReassignmentRequest("t", 0, (3, 2, 1))]))
    assert h.part("t").partition_epoch > part.partition_epoch
    assert topic_mod(h, "t") == created, "a partition change is not a topic change"
    (added,) = h.apply(h.state.replication.create_partitions(
        [CreatePartitionsTopic("t", 3, if_mod_offset=created)]))
    assert added.error.ok
    assert topic_mod(h, "t") == h.committed
    h.check()


def test_topic_conditions_refuse_a_changed_topic_and_write_nothing() -> None:
    h = Harness()
    h.add_brokers([1])
    h.create("a")
    h.create("b")
    seen = topic_mod(h, "a")
    h.apply(h.state.replication.create_partitions([CreatePartitionsTopic("a", 2)]))
    stale = h.state.replication.create_partitions([CreatePartitionsTopic("a", 3,
                                                                         if_mod_offset=seen)])
    assert stale.records == ()
    assert stale.response[0].error.code is ErrorCode.CONDITION_FAILED
    assert f"was last changed at offset {topic_mod(h, 'a')}, not {seen}" in \
        stale.response[0].error.message
    # Delete: per topic; the other topic of the request is deleted.
    result = h.state.replication.delete_topics(["a", "b"], {"a": seen})
    assert [r.error.code for r in result.response] == [ErrorCode.CONDITION_FAILED,
                                                      ErrorCode.NONE]
    h.apply(result)
    (gone,) = h.apply(h.state.replication.delete_topics(["a"], {"a": topic_mod(h, "a")}))
    assert gone.error.ok
    assert h.state.replication.list_topics() == ()
    h.check()


def test_a_config_resource_mod_offset_and_its_conditions() -> None:
    h = Harness()
    h.add_brokers([1])
    h.create("c")
    topic = ConfigResource(ResourceType.TOPIC, "c")
    assert config_mod(h, topic) == -1  # no dynamic config yet
    # -1: only if it has none. The first writer wins, the second is refused.
    assert set_config(h, topic, "retention.ms", "1000", if_mod_offset=-1) is ErrorCode.NONE
    first = config_mod(h, topic)
    assert first == h.committed
    assert set_config(h, topic, "retention.ms", "2000", if_mod_offset=-1) is \
        ErrorCode.CONDITION_FAILED
    assert h.state.configs.get(topic, "retention.ms") == "1000"
    assert set_config(h, topic, "segment.ms", "5000", if_mod_offset=first) is ErrorCode.NONE
    assert config_mod(h, topic) == h.committed > first
    # Deleting every key: it has none again (as a controller that loaded a snapshot
    # would say).
    assert set_config(h, topic, "retention.ms", None) is ErrorCode.NONE
    assert set_config(h, topic, "segment.ms", None) is ErrorCode.NONE
    assert config_mod(h, topic) == -1
    # A no-op alter writes nothing and does not move it.
    before = h.next_offset
    assert set_config(h, topic, "segment.ms", None, if_mod_offset=-1) is ErrorCode.NONE
    assert h.next_offset == before
    h.check()


def test_a_reassignment_conditional_on_the_partition_epoch() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3, 4])
    h.create("r", 1, 3)
    epoch = h.part("r").partition_epoch
    target = tuple(reversed(h.part("r").replicas))
    (moved,) = h.apply(h.state.replication.alter_partition_reassignments(
        [ReassignmentRequest("r", 0, target, if_partition_epoch=epoch)]))
    assert moved.error.ok
    stale = h.state.replication.alter_partition_reassignments(
        [ReassignmentRequest("r", 0, (4, 3, 2), if_partition_epoch=epoch)])
    assert stale.records == ()
    assert stale.response[0].error.code is ErrorCode.CONDITION_FAILED
    assert f"not {epoch}" in stale.response[0].error.message


def test_mod_offsets_are_reverted_with_the_state_they_belong_to() -> None:
    h = Harness()
    h.add_brokers([1])
    h.create("v")
    topic = ConfigResource(ResourceType.TOPIC, "v")
    committed = h.committed
    # Records replayed but not committed (an active controller's), then reverted.
    set_config(h, topic, "retention.ms", "7")
    h.apply(h.state.replication.create_partitions([CreatePartitionsTopic("v", 2)]))
    h.state.revert_to_committed(committed)
    h.resync()
    assert config_mod(h, topic) == -1
    assert topic_mod(h, "v") == committed


def test_every_controller_agrees_whether_it_replayed_the_log_or_loaded_a_snapshot() -> None:
    h = Harness()
    h.add_brokers([1])
    h.create("s")
    topic = ConfigResource(ResourceType.TOPIC, "s")
    set_config(h, topic, "retention.ms", "9")
    h.create("later")
    replayed = new_state(5)
    replayed.replay_batch(h.log, 0)
    # A snapshot's records are all replayed at its last offset; from metadata.version 8
    # they carry each mod offset, so a controller that loaded one says the same.
    loaded = new_state(6)
    loaded.replay_encoded((encode_record(r) for r in h.state.snapshot_records()), h.committed,
                          step=0)
    for state in (replayed, loaded):
        assert state.replication.describe_topics(["s", "later"]) == \
            h.state.replication.describe_topics(["s", "later"])
        assert state.configs.mod_offset(topic) == config_mod(h, topic) >= 0
    assert topic_mod(h, "s") < config_mod(h, topic) < topic_mod(h, "later")
    h.check()


def test_below_metadata_version_8_there_are_no_mod_offsets_then_the_upgrade_is_the_floor(
        ) -> None:
    h = Harness(metadata_version=7)
    h.add_brokers([1])
    h.create("old")
    topic = ConfigResource(ResourceType.TOPIC, "old")
    set_config(h, topic, "retention.ms", "1")
    assert topic_mod(h, "old") == -1 and config_mod(h, topic) == -1
    assert set_config(h, topic, "retention.ms", "2", if_mod_offset=-1) is \
        ErrorCode.UNSUPPORTED_VERSION
    refused = h.state.replication.delete_topics(["old"], {"old": 0})
    assert refused.response[0].error.code is ErrorCode.UNSUPPORTED_VERSION
    assert "needs metadata.version 8" in refused.response[0].error.message
    # A controller that loaded a snapshot taken at level 7 (no mod offsets in it) ...
    at_seven = new_state(7)
    at_seven.replay_encoded((encode_record(r) for r in h.state.snapshot_records()),
                            h.committed, step=0)
    # The upgrade's record (`features upgrade` writes it once every node supports 8).
    h.apply(ControllerResult((make_record(FeatureLevelRecord(name=METADATA_VERSION,
                                                             feature_level=8)),), None))
    upgrade_offset = h.committed
    at_seven.replay(decode_record(encode_record(h.log[-1])), upgrade_offset)
    # ... and one that replayed the log agree: older changes report the upgrade.
    for state in (h.state, at_seven):
        assert state.replication.describe_topics(["old"])[0].mod_offset == upgrade_offset
        assert state.configs.mod_offset(topic) == upgrade_offset
    assert set_config(h, topic, "retention.ms", "3", if_mod_offset=upgrade_offset) is \
        ErrorCode.NONE
    assert config_mod(h, topic) == h.committed
    h.check()
