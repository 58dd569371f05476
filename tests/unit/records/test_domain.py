"""Domain classes: conversions to and from records, and replay of changes."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given

from controller.records import metadata_pb2 as pb
from controller.records.convert import (
    broker_from_record,
    broker_to_record,
    partition_from_record,
    partition_to_record,
    topic_from_record,
    topic_to_record,
)
from controller.records.domain import (
    NO_LEADER,
    BrokerRegistration,
    LeaderRecoveryState,
    PartitionRegistration,
    Topic,
)
from tests.unit.records.strategies import (
    PAYLOADS,
    broker_registrations,
    partition_registrations,
    topics,
)

# --- conversions ---------------------------------------------------------------------


@given(broker_registrations)
def test_broker_domain_round_trip(broker: BrokerRegistration) -> None:
    assert broker_from_record(broker_to_record(broker)) == broker


@given(PAYLOADS["register_broker"])
def test_broker_record_round_trip(msg: pb.RegisterBrokerRecord) -> None:
    assert broker_to_record(broker_from_record(msg)) == msg


def test_broker_rack_absent_differs_from_empty() -> None:
    assert broker_from_record(pb.RegisterBrokerRecord()).rack is None
    assert broker_from_record(pb.RegisterBrokerRecord(rack="")).rack == ""


@given(topics)
def test_topic_domain_round_trip(topic: Topic) -> None:
    assert topic_from_record(topic_to_record(topic)) == topic


@given(partition_registrations)
def test_partition_domain_round_trip(partition: PartitionRegistration) -> None:
    msg = partition_to_record(partition, topic_id="tid", partition_id=7)
    assert (msg.topic_id, msg.partition_id) == ("tid", 7)
    assert partition_from_record(msg) == partition


@given(PAYLOADS["partition"])
def test_partition_record_round_trip(msg: pb.PartitionRecord) -> None:
    back = partition_to_record(
        partition_from_record(msg), topic_id=msg.topic_id, partition_id=msg.partition_id
    )
    assert back == msg


def test_equal_replica_lists_share_one_tuple() -> None:
    # Memory at 1M partitions: equal lists are one tuple, values are unchanged.
    a = partition_from_record(pb.PartitionRecord(replicas=[3, 1, 2], isr=[3, 1, 2], leader=3))
    b = partition_from_record(pb.PartitionRecord(replicas=[3, 1, 2], isr=[1, 2], leader=1))
    c = partition_from_record(pb.PartitionRecord(replicas=[5, 6], isr=[1, 2]))
    assert a.replicas == (3, 1, 2) and a.isr == (3, 1, 2) and b.isr == (1, 2)
    assert a.replicas is b.replicas and a.isr is a.replicas and b.isr is c.isr


def test_unknown_leader_recovery_state_is_refused() -> None:
    with pytest.raises(ValueError):
        partition_from_record(pb.PartitionRecord(replicas=[1], isr=[1], leader_recovery_state=9))


def test_domain_classes_are_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Topic(name="a", topic_id="b").name = "c"  # type: ignore[misc]


# --- PartitionRegistration.merge ---------------------------------------------------

BASE = PartitionRegistration(
    replicas=(1, 2, 3),
    isr=(1, 2, 3),
    leader=1,
    leader_epoch=5,
    partition_epoch=9,
)


def change(**fields: object) -> pb.PartitionChangeRecord:
    return pb.PartitionChangeRecord(partition_id=0, topic_id="t", **fields)  # type: ignore[arg-type]


def test_empty_change_only_bumps_partition_epoch() -> None:
    assert BASE.merge(change()) == attrs.evolve(BASE, partition_epoch=10)


def test_isr_change_keeps_leader_epoch() -> None:
    merged = BASE.merge(change(isr=pb.BrokerIdList(ids=[1, 2])))
    assert merged == attrs.evolve(BASE, isr=(1, 2), partition_epoch=10)


def test_leader_change_bumps_both_epochs() -> None:
    merged = BASE.merge(change(leader=2))
    assert (merged.leader, merged.leader_epoch, merged.partition_epoch) == (2, 6, 10)


def test_losing_the_leader_is_a_leader_change() -> None:
    merged = BASE.merge(change(leader=NO_LEADER, isr=pb.BrokerIdList(ids=[])))
    assert not merged.has_leader
    assert (merged.isr, merged.leader_epoch, merged.partition_epoch) == ((), 6, 10)


def test_restating_the_same_leader_bumps_leader_epoch() -> None:
    """Kafka's replay rule: a stated leader is a new leader epoch (what a change
    removing a replica writes, so the replica sees the epoch move)."""
    merged = BASE.merge(change(leader=1))
    assert (merged.leader, merged.leader_epoch, merged.partition_epoch) == (1, 6, 10)
    unstated = BASE.merge(change(isr=pb.BrokerIdList(ids=[1, 2])))
    assert (unstated.leader_epoch, unstated.partition_epoch) == (5, 10)


def test_present_empty_list_clears_absent_list_keeps() -> None:
    reassigning = attrs.evolve(BASE, adding_replicas=(4,), removing_replicas=(3,))
    merged = reassigning.merge(
        change(
            replicas=pb.BrokerIdList(ids=[1, 2, 4]),
            adding_replicas=pb.BrokerIdList(ids=[]),
            removing_replicas=pb.BrokerIdList(ids=[]),
        )
    )
    assert merged.replicas == (1, 2, 4)
    assert merged.adding_replicas == merged.removing_replicas == ()
    assert merged.isr == BASE.isr


def test_leader_recovery_state_change() -> None:
    merged = BASE.merge(change(leader=3, leader_recovery_state=pb.LEADER_RECOVERY_STATE_RECOVERING))
    assert merged.leader_recovery_state is LeaderRecoveryState.RECOVERING
    assert BASE.merge(change()).leader_recovery_state is LeaderRecoveryState.RECOVERED


@given(partition_registrations, PAYLOADS["partition_change"])
def test_merge_applies_exactly_the_present_fields(
    base: PartitionRegistration, delta: pb.PartitionChangeRecord
) -> None:
    merged = base.merge(delta)
    for name in ("replicas", "isr", "removing_replicas", "adding_replicas"):
        expected = tuple(getattr(delta, name).ids) if delta.HasField(name) else getattr(base, name)
        assert getattr(merged, name) == expected, name
    assert merged.leader == (delta.leader if delta.HasField("leader") else base.leader)
    assert merged.partition_epoch == base.partition_epoch + 1
    # Kafka's rule: a stated leader (a new one, or the same again) is a new epoch.
    assert merged.leader_epoch == base.leader_epoch + int(delta.HasField("leader"))


# --- BrokerRegistration.apply ------------------------------------------------------

BROKER = BrokerRegistration(broker_id=1, incarnation_id="i", broker_epoch=10, fenced=True)


def broker_change(
    fenced: pb.FenceChange.ValueType = pb.FENCE_CHANGE_UNCHANGED,
    shutdown: pb.ControlledShutdownChange.ValueType = pb.CONTROLLED_SHUTDOWN_CHANGE_UNCHANGED,
) -> pb.BrokerRegistrationChangeRecord:
    return pb.BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=10, fenced=fenced, in_controlled_shutdown=shutdown
    )


def test_unfence_then_fence() -> None:
    unfenced = BROKER.apply(broker_change(fenced=pb.FENCE_CHANGE_UNFENCE))
    assert not unfenced.fenced
    assert unfenced.apply(broker_change(fenced=pb.FENCE_CHANGE_FENCE)).fenced


def test_unchanged_flags_stay() -> None:
    assert BROKER.apply(broker_change()) == BROKER


def test_enter_controlled_shutdown_is_sticky() -> None:
    shutting = BROKER.apply(broker_change(shutdown=pb.CONTROLLED_SHUTDOWN_CHANGE_ENTER))
    assert shutting.in_controlled_shutdown
    assert shutting.apply(broker_change()).in_controlled_shutdown
