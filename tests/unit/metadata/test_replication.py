"""Replication manager: topics, partitions, placement, elections, reassignment."""

from __future__ import annotations

import pytest

from controller.metadata import (
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
    ErrorCode,
    ReassignmentRequest,
    TopicPartition,
)
from controller.metadata.config_schema import ResourceType
from controller.metadata.configs import AlterConfigOp, AlterConfigsResource, ConfigResource, OpType
from controller.metadata.errors import ControllerResult
from controller.metadata.partition_change import change_record
from controller.records import make_record, record_type
from controller.records.domain import LeaderRecoveryState
from tests.unit.metadata.support import HEARTBEAT_ISR_LEVEL, SESSION_MS, Harness


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.add_brokers([1, 2, 3])
    return harness


def test_create_topic_records_and_state(h: Harness) -> None:
    result = h.state.replication.create_topics([CreatableTopic("orders", 3, 2)])
    kinds = [record_type(r) for r in result.records]
    assert kinds == ["topic", "partition", "partition", "partition"]
    (response,) = h.apply(result)
    assert response.error.ok and response.num_partitions == 3 and response.replication_factor == 2
    assert h.state.replication.topic_id("orders") == response.topic_id
    for p in range(3):
        part = h.part("orders", p)
        assert len(part.replicas) == 2 and part.isr == part.replicas
        assert part.leader == part.replicas[0] and part.leader_epoch == 0
    h.check()


def test_leaders_spread_evenly(h: Harness) -> None:
    h.create("t", partitions=9, rf=3)
    leaders = [h.part("t", p).leader for p in range(9)]
    assert sorted(leaders.count(b) for b in (1, 2, 3)) == [3, 3, 3]


def test_placement_is_rack_aware() -> None:
    h = Harness()
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    h.add_brokers(list(racks), racks)
    h.create("t", partitions=12, rf=3)
    for p in range(12):
        replicas = h.part("t", p).replicas
        assert len({racks[b] for b in replicas}) == 3, replicas


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (CreatableTopic("", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic(".", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("..", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("a" * 250, 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("bad name", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("bad/name", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("ümlaut", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("existing", 1, 1), ErrorCode.TOPIC_ALREADY_EXISTS),
        (CreatableTopic("t", 0, 1), ErrorCode.INVALID_PARTITIONS),
        (CreatableTopic("t", -5, 1), ErrorCode.INVALID_PARTITIONS),
        (CreatableTopic("t", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR),
        (CreatableTopic("t", 1, -3), ErrorCode.INVALID_REPLICATION_FACTOR),
        (CreatableTopic("t", 1, 4), ErrorCode.INVALID_REPLICATION_FACTOR),
        (CreatableTopic("t", assignments=((1, 2), (1,))), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreatableTopic("t", assignments=((1, 1),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreatableTopic("t", assignments=((1, 9),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreatableTopic("t", assignments=((),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreatableTopic("t", 2, -1, assignments=((1,),)), ErrorCode.INVALID_REQUEST),
        (CreatableTopic("t", 1, 1, configs=(("nope", "1"),)), ErrorCode.INVALID_CONFIG),
        (CreatableTopic("t", 1, 1, configs=(("retention.ms", "-2"),)), ErrorCode.INVALID_CONFIG),
    ],
)
def test_create_topic_errors_produce_no_records(
    h: Harness, topic: CreatableTopic, code: ErrorCode
) -> None:
    h.create("existing")
    result = h.state.replication.create_topics([topic])
    assert result.records == ()
    (response,) = result.response
    assert response.error.code is code, response.error
    assert response.error.message


def test_one_bad_topic_does_not_fail_the_others(h: Harness) -> None:
    result = h.state.replication.create_topics(
        [
            CreatableTopic("good", 1, 1),
            CreatableTopic("bad!", 1, 1),
            CreatableTopic("also-good", 2, 3),
        ]
    )
    codes = [r.error.code for r in result.response]
    assert codes == [ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.NONE]
    h.apply(result)
    assert [t.name for t in h.state.replication.list_topics()] == ["also-good", "good"]
    h.check()


def test_duplicates_in_one_request(h: Harness) -> None:
    result = h.state.replication.create_topics(
        [CreatableTopic("d", 1, 1), CreatableTopic("d", 1, 1)]
    )
    assert result.records == ()
    assert [r.error.code for r in result.response] == [ErrorCode.DUPLICATE_RESOURCE] * 2


def test_validate_only_writes_nothing(h: Harness) -> None:
    result = h.state.replication.create_topics([CreatableTopic("v", 3, 3)], validate_only=True)
    assert result.records == () and result.response[0].error.ok
    assert result.response[0].num_partitions == 3


def test_defaults_from_cluster_configs(h: Harness) -> None:
    cluster = ConfigResource(ResourceType.CLUSTER, "")
    h.apply(
        h.state.configs.incremental_alter_configs(
            [AlterConfigsResource(cluster, (AlterConfigOp("num.partitions", OpType.SET, "4"),))]
        )
    )
    response = h.create("defaults", partitions=-1, rf=-1)
    assert response.num_partitions == 4 and response.replication_factor == 1


def test_explicit_assignment_with_fenced_replica(h: Harness) -> None:
    h.register(4)  # registered but fenced
    response = h.create("a", partitions=-1, rf=-1, assignments=((4, 2, 1),))
    assert response.error.ok
    part = h.part("a")
    assert part.replicas == (4, 2, 1) and part.isr == (2, 1) and part.leader == 2
    only_fenced = h.state.replication.create_topics([CreatableTopic("b", assignments=((4,),))])
    assert only_fenced.response[0].error.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    h.check()


def test_topic_configs_are_written_with_the_topic(h: Harness) -> None:
    h.create("c", configs=(("cleanup.policy", "compact, delete"), ("retention.ms", "1000")))
    resource = ConfigResource(ResourceType.TOPIC, "c")
    assert h.state.configs.dynamic_configs(resource) == {
        "cleanup.policy": "compact,delete",
        "retention.ms": "1000",
    }
    h.check()


def test_delete_topics(h: Harness) -> None:
    h.create("gone", partitions=3, rf=2, configs=(("retention.ms", "5"),))
    h.create("kept")
    result = h.state.replication.delete_topics(["gone", "missing", "kept", "kept"])
    codes = [r.error.code for r in result.response]
    assert codes == [
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.DUPLICATE_RESOURCE,
        ErrorCode.DUPLICATE_RESOURCE,
    ]
    assert [record_type(r) for r in result.records] == ["remove_topic"]
    h.apply(result)
    assert h.state.replication.topic_id("gone") is None
    assert h.state.configs.dynamic_configs(ConfigResource(ResourceType.TOPIC, "gone")) == {}
    assert h.state.replication.total_partition_count() == 1
    # Re-created under the same name it gets a new id.
    old_id = result.response[0].topic_id
    assert h.create("gone").topic_id != old_id
    h.check()


def test_create_partitions(h: Harness) -> None:
    h.create("p", partitions=2, rf=2)
    result = h.state.replication.create_partitions(
        [
            CreatePartitionsTopic("p", 5),
            CreatePartitionsTopic("missing", 3),
        ]
    )
    assert [r.error.code for r in result.response] == [
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    h.apply(result)
    assert h.state.replication.partition_count(h.state.replication.topic_id("p")) == 5  # type: ignore[arg-type]
    assert all(len(h.part("p", i).replicas) == 2 for i in range(5))
    h.check()


@pytest.mark.parametrize(
    ("item", "code"),
    [
        (CreatePartitionsTopic("p", 2), ErrorCode.INVALID_PARTITIONS),
        (CreatePartitionsTopic("p", 1), ErrorCode.INVALID_PARTITIONS),
        (CreatePartitionsTopic("p", 4, ((1, 2),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreatePartitionsTopic("p", 3, ((1, 7),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreatePartitionsTopic("p", 4, ((1, 2), (3,))), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ],
)
def test_create_partitions_errors(h: Harness, item: CreatePartitionsTopic, code: ErrorCode) -> None:
    h.create("p", partitions=2, rf=2)
    result = h.state.replication.create_partitions([item])
    assert result.records == () and result.response[0].error.code is code


def test_create_partitions_with_assignment_and_validate_only(h: Harness) -> None:
    h.create("p", partitions=1, rf=1)
    dry = h.state.replication.create_partitions(
        [CreatePartitionsTopic("p", 3, ((2,), (3,)))], validate_only=True
    )
    assert dry.records == () and dry.response[0].error.ok
    h.apply(h.state.replication.create_partitions([CreatePartitionsTopic("p", 3, ((2,), (3,)))]))
    assert [h.part("p", i).replicas for i in (1, 2)] == [(2,), (3,)]


def test_partition_change_carries_only_changed_fields(h: Harness) -> None:
    h.create("t", partitions=1, rf=3)
    before = h.part("t")
    h.now_ms = SESSION_MS + 1
    others = [b for b in (1, 2, 3) if b != before.leader]
    for b in others:
        h.heartbeat(b)
    result = h.state.cluster.fence_stale_brokers(h.now_ms)
    change = result.records[0].partition_change
    assert change.HasField("isr") and change.HasField("leader")
    assert not change.HasField("replicas") and not change.HasField("adding_replicas")
    h.apply(result)
    after = h.part("t")
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch == before.partition_epoch + 1


def _set_unclean(h: Harness, topic: str) -> None:
    op = AlterConfigOp("unclean.leader.election.enable", OpType.SET, "true")
    h.apply(
        h.state.configs.incremental_alter_configs(
            [AlterConfigsResource(ConfigResource(ResourceType.TOPIC, topic), (op,))]
        )
    )


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_election_only_when_the_topic_allows(unclean: bool) -> None:
    h = Harness()
    h.add_brokers([1, 2])
    h.create("u", assignments=((1, 2),))
    if unclean:
        _set_unclean(h, "u")
    h.now_ms = SESSION_MS + 1
    h.heartbeat(1)
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))  # 2 fenced: ISR (1,)
    h.now_ms = 2 * SESSION_MS + 2
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))  # 1 fenced: offline
    assert h.part("u").leader == -1 and h.part("u").isr == (1,)
    h.heartbeat(2)  # 2 is back, usable, but was not in sync
    part = h.part("u")
    if unclean:
        assert part.leader == 2 and part.isr == (2,)
        assert part.leader_recovery_state is LeaderRecoveryState.RECOVERING
    else:
        assert part.leader == -1 and part.isr == (1,)
    h.check()


def test_out_of_isr_broker_does_not_join_an_offline_partition() -> None:
    h = Harness(metadata_version=HEARTBEAT_ISR_LEVEL)
    h.add_brokers([1, 2])
    h.create("u", assignments=((1, 2),))
    h.now_ms = SESSION_MS + 1
    h.heartbeat(1)
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))  # 2 fenced
    h.now_ms = 2 * SESSION_MS + 2
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))  # 1 fenced: offline
    h.heartbeat(2)  # 2 comes back, but it is not in sync
    assert h.part("u").leader == -1 and h.part("u").isr == (1,)
    h.heartbeat(1)
    assert h.part("u").leader == 1 and set(h.part("u").isr) == {1}
    h.heartbeat(2)  # now there is a leader to catch up from
    assert set(h.part("u").isr) == {1, 2}
    h.check()


def test_preferred_leader_election() -> None:
    h = Harness(metadata_version=HEARTBEAT_ISR_LEVEL)  # broker 1 rejoins by heartbeat
    h.add_brokers([1, 2, 3])
    h.create("e", assignments=((1, 2, 3),))
    rep = h.state.replication
    not_needed = rep.elect_leaders([TopicPartition("e", 0)])
    assert (
        not_needed.records == ()
        and not_needed.response[0].error.code is ErrorCode.ELECTION_NOT_NEEDED
    )
    h.heartbeat(1, want_shutdown=True)
    assert h.part("e").leader == 2
    unavailable = rep.elect_leaders([TopicPartition("e", 0)])
    assert unavailable.records == ()
    assert unavailable.response[0].error.code is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    unknown = rep.elect_leaders([TopicPartition("e", 5), TopicPartition("nope", 0)])
    assert [r.error.code for r in unknown.response] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    # Broker 1 restarts, rejoins, and the preferred election moves leadership back.
    h.now_ms = SESSION_MS + 1  # the old incarnation's session is over
    h.register(1, incarnation="second")
    h.heartbeat(1)
    assert h.part("e").leader == 2 and 1 in h.part("e").isr
    everything = rep.elect_leaders(None)
    assert [(r.topic, r.partition, r.error.code) for r in everything.response] == [
        ("e", 0, ErrorCode.NONE)
    ]
    h.apply(everything)
    assert h.part("e").leader == 1
    h.check()


def test_unclean_election_request() -> None:
    h = Harness()
    h.add_brokers([1, 2])
    h.create("x", assignments=((1, 2),))
    h.now_ms = SESSION_MS + 1
    h.heartbeat(1)
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    h.now_ms = 2 * SESSION_MS + 2
    h.apply(h.state.cluster.fence_stale_brokers(h.now_ms))
    h.heartbeat(2)
    rep = h.state.replication
    result = rep.elect_leaders([TopicPartition("x", 0)], ElectionType.UNCLEAN)
    assert result.response[0].error.ok
    h.apply(result)
    assert h.part("x").leader == 2 and h.part("x").isr == (2,)
    again = rep.elect_leaders([TopicPartition("x", 0)], ElectionType.UNCLEAN)
    assert again.response[0].error.code is ErrorCode.ELECTION_NOT_NEEDED
    h.check()


def test_reassignment_lifecycle() -> None:
    h = Harness(metadata_version=HEARTBEAT_ISR_LEVEL)
    h.add_brokers([1, 2, 3, 4])
    h.create("r", assignments=((1, 2),))
    rep = h.state.replication
    started = rep.alter_partition_reassignments([ReassignmentRequest("r", 0, (3, 4))])
    assert started.response[0].error.ok
    h.apply(started)
    part = h.part("r")
    assert part.replicas == (3, 4, 1, 2)
    assert part.adding_replicas == (3, 4) and part.removing_replicas == (1, 2)
    assert part.isr == (1, 2) and part.leader == 1
    (ongoing,) = rep.list_reassignments()
    assert (ongoing.topic, ongoing.adding, ongoing.removing) == ("r", (3, 4), (1, 2))
    h.check()
    h.heartbeat(3)  # 3 catches up: not done yet
    assert h.part("r").adding_replicas == (3, 4) and 3 in h.part("r").isr
    h.heartbeat(4)  # 4 catches up: the reassignment completes
    part = h.part("r")
    assert part.replicas == (3, 4) and part.isr == (3, 4)
    assert part.adding_replicas == () and part.removing_replicas == ()
    assert part.leader == 3
    assert rep.list_reassignments() == ()
    h.check()


def test_reassignment_cancel_restores_original() -> None:
    h = Harness()
    h.add_brokers([1, 2, 3])
    h.register(4)  # fenced: the move cannot finish
    h.create("r", assignments=((1, 2),))
    rep = h.state.replication
    h.apply(rep.alter_partition_reassignments([ReassignmentRequest("r", 0, (1, 4))]))
    assert h.part("r").replicas == (1, 4, 2)
    h.check()
    h.apply(rep.alter_partition_reassignments([ReassignmentRequest("r", 0, None)]))
    part = h.part("r")
    assert (
        set(part.replicas) == {1, 2} and part.adding_replicas == () and part.removing_replicas == ()
    )
    assert rep.list_reassignments() == ()
    h.check()


def test_pure_removal_completes_at_once(h: Harness) -> None:
    h.create("r", assignments=((1, 2, 3),))
    h.apply(
        h.state.replication.alter_partition_reassignments([ReassignmentRequest("r", 0, (2, 3))])
    )
    part = h.part("r")
    assert part.replicas == (2, 3) and part.isr == (2, 3) and part.leader == 2
    h.check()


@pytest.mark.parametrize(
    ("item", "code"),
    [
        (ReassignmentRequest("r", 0, (1, 9)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (ReassignmentRequest("r", 0, (1, 1)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (ReassignmentRequest("r", 0, ()), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (ReassignmentRequest("r", 3, (1, 2)), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (ReassignmentRequest("zz", 0, (1, 2)), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (ReassignmentRequest("r", 0, None), ErrorCode.NO_REASSIGNMENT_IN_PROGRESS),
    ],
)
def test_reassignment_errors(h: Harness, item: ReassignmentRequest, code: ErrorCode) -> None:
    h.create("r", assignments=((1, 2),))
    result = h.state.replication.alter_partition_reassignments([item])
    assert result.records == () and result.response[0].error.code is code


def test_reassignment_duplicate_items(h: Harness) -> None:
    h.create("r", assignments=((1, 2),))
    result = h.state.replication.alter_partition_reassignments(
        [ReassignmentRequest("r", 0, (2, 3)), ReassignmentRequest("r", 0, (1, 3))]
    )
    assert result.records == ()
    assert {r.error.code for r in result.response} == {ErrorCode.DUPLICATE_RESOURCE}


def test_reads_at_a_committed_epoch(h: Harness) -> None:
    h.create("one", partitions=2, rf=1)
    committed = h.committed
    h.create("two")
    h.apply(h.state.replication.create_partitions([CreatePartitionsTopic("one", 4)]))
    rep = h.state.replication
    assert [t.name for t in rep.list_topics(committed)] == ["one"]
    (described,) = rep.describe_topics(["one"], committed)
    assert len(described.partitions) == 2
    (missing,) = rep.describe_topics(["two"], committed)
    assert missing.error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert len(rep.describe_topics(["one"])[0].partitions) == 4


def test_names_colliding_on_dot_and_underscore_are_refused(h: Harness) -> None:
    h.create("a.b")
    existing = h.state.replication.create_topics([CreatableTopic("a_b", 1, 1)])
    assert existing.records == ()
    assert existing.response[0].error.code is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "'a.b'" in existing.response[0].error.message
    same_request = h.state.replication.create_topics(
        [CreatableTopic("x_y", 1, 1), CreatableTopic("x.y", 1, 1)]
    )
    codes = [r.error.code for r in same_request.response]
    assert codes == [ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION]
    h.apply(same_request)
    # Once the colliding topic is gone the name is free again.
    h.apply(h.state.replication.delete_topics(["a.b"]))
    h.create("a_b")
    h.check()


def test_new_partitions_share_registrations_and_changes_stay_their_own(h: Harness) -> None:
    h.create("shared", partitions=12, rf=3)
    parts = [h.part("shared", p) for p in range(12)]
    # 3 brokers, RF 3: few distinct (replicas, ISR, leader) values, each replayed once.
    assert len({id(p) for p in parts}) == len(set(parts)) < 12
    twin = next(p for p in range(1, 12) if parts[p] is parts[0])
    tid = h.state.replication.topic_id("shared")
    assert tid is not None
    delta = h.state.replication.partition_delta(tid, parts[0], isr=parts[0].replicas[:2])
    assert delta is not None
    h.apply(ControllerResult((change_record(tid, 0, delta),), None))
    assert h.part("shared", 0).isr == parts[0].replicas[:2]
    assert h.part("shared", twin) is parts[twin] and parts[twin].isr == parts[twin].replicas
    h.check()



def test_partition_records_equal_the_generic_conversion() -> None:
    from controller.metadata.registrations import partition_records
    from controller.records import encode_record
    from controller.records.convert import partition_to_record
    from controller.records.domain import PartitionRegistration

    parts = [
        PartitionRegistration(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1),
        PartitionRegistration(replicas=(4, 5), isr=(5,), leader=5, leader_epoch=3,
                              partition_epoch=7),
        PartitionRegistration(replicas=(1, 2, 3, 4), isr=(1, 2), removing_replicas=(3,),
                              adding_replicas=(4,), leader=2, leader_epoch=1, partition_epoch=2),
        PartitionRegistration(replicas=(6,), isr=(6,), leader=-1,
                              leader_recovery_state=LeaderRecoveryState.RECOVERING),
    ]
    got = partition_records("tid-1", parts, first_id=5)
    want = [make_record(partition_to_record(p, topic_id="tid-1", partition_id=5 + i))
            for i, p in enumerate(parts)]
    assert got == want
    assert [encode_record(r) for r in got] == [encode_record(r) for r in want]


def test_partitions_at_a_past_epoch_read_from_the_latest_state_only_when_unchanged(
    h: Harness,
) -> None:
    replication = h.state.replication
    for name in ("a", "b", "c", "d"):
        h.create(name, partitions=3, rf=2)
    epoch = h.committed  # a live registry snapshot (Harness makes one per apply)
    ids = {n: replication.topic_id(n) for n in ("a", "b", "c", "d")}
    before = {n: replication.partitions(t, epoch) for n, t in ids.items() if t}

    def check() -> None:
        for name, tid in ids.items():
            assert tid is not None
            assert replication.partitions_at(tid, epoch) == before[name], name

    # Changes after the epoch: a partition change ("a"), new partitions ("b"), a
    # deleted topic ("c"), a new topic; "d" is untouched and read from the latest state.
    tid_a = ids["a"]
    assert tid_a is not None
    part = replication.partition(tid_a, 0)
    assert part is not None
    delta = replication.partition_delta(tid_a, part, isr=part.replicas[:1])
    assert delta is not None
    h.apply(ControllerResult((change_record(tid_a, 0, delta),), None))
    h.apply(replication.create_partitions([CreatePartitionsTopic("b", 5)]))
    h.apply(replication.delete_topics(["c"]))
    h.create("e", partitions=2, rf=2)
    check()
    # A revert to an offset after the epoch keeps it right, and so does forgetting the
    # hints at or below the epoch.
    reverted_to = h.committed
    h.create("f", partitions=2, rf=2)
    h.apply(replication.delete_topics(["d"]))
    h.state.registry.revert_to_snapshot(reverted_to)
    h.next_offset = reverted_to + 1
    h.log = h.log[: reverted_to + 1]
    h.resync()
    check()
    replication.forget_changes_up_to(epoch)
    check()
    h.check()
