"""Conversions between wire records (protobuf) and domain classes (attrs).

Kept apart from ``domain`` so the domain classes stay free of serialisation.
``x_to_record(x_from_record(r)) == r`` for every valid record ``r``, and the converse
for domain values.
"""

from __future__ import annotations

from controller.records import metadata_pb2 as pb
from controller.records.domain import (
    BrokerRegistration,
    FeatureRange,
    LeaderRecoveryState,
    Listener,
    PartitionDelta,
    PartitionRegistration,
    Topic,
)


def listener_from_record(msg: pb.Listener) -> Listener:
    return Listener(
        name=msg.name, host=msg.host, port=msg.port, security_protocol=msg.security_protocol
    )


def listener_to_record(listener: Listener) -> pb.Listener:
    return pb.Listener(
        name=listener.name,
        host=listener.host,
        port=listener.port,
        security_protocol=listener.security_protocol,
    )


def broker_from_record(msg: pb.RegisterBrokerRecord) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=msg.broker_id,
        incarnation_id=msg.incarnation_id,
        broker_epoch=msg.broker_epoch,
        listeners=tuple(listener_from_record(item) for item in msg.listeners),
        rack=msg.rack if msg.HasField("rack") else None,
        fenced=msg.fenced,
        in_controlled_shutdown=msg.in_controlled_shutdown,
        supported_features=tuple(
            FeatureRange(
                name=item.name,
                min_version=item.min_supported_version,
                max_version=item.max_supported_version,
            )
            for item in msg.features
        ),
    )


def broker_to_record(broker: BrokerRegistration) -> pb.RegisterBrokerRecord:
    msg = pb.RegisterBrokerRecord(
        broker_id=broker.broker_id,
        incarnation_id=broker.incarnation_id,
        broker_epoch=broker.broker_epoch,
        listeners=[listener_to_record(item) for item in broker.listeners],
        fenced=broker.fenced,
        in_controlled_shutdown=broker.in_controlled_shutdown,
        features=[
            pb.BrokerFeature(
                name=item.name,
                min_supported_version=item.min_version,
                max_supported_version=item.max_version,
            )
            for item in broker.supported_features
        ],
    )
    # Set only when known: an empty rack string and "no rack" are different things.
    if broker.rack is not None:
        msg.rack = broker.rack
    return msg


def topic_from_record(msg: pb.TopicRecord) -> Topic:
    return Topic(name=msg.name, topic_id=msg.topic_id)


def topic_to_record(topic: Topic) -> pb.TopicRecord:
    return pb.TopicRecord(name=topic.name, topic_id=topic.topic_id)


# Replica lists repeat a lot (12 brokers at RF 3 have 1,320 ordered triples, and a
# 1M-partition snapshot holds two lists a partition): replay shares one tuple per
# distinct list instead of building a million equal ones (~130 MB at 1M partitions).
# Cleared when it grows past the bound, so odd lists never pile up for ever.
_SHARED_IDS: dict[tuple[int, ...], tuple[int, ...]] = {}
_SHARED_IDS_MAX = 100_000
# Enum lookups by value without EnumMeta.__call__ (a hot path of snapshot loading).
_RECOVERY_STATES = {int(state): state for state in LeaderRecoveryState}


def shared_ids(ids: tuple[int, ...]) -> tuple[int, ...]:
    """An equal tuple, shared with earlier equal ones (tuples are immutable)."""
    found = _SHARED_IDS.get(ids)
    if found is None:
        if len(_SHARED_IDS) >= _SHARED_IDS_MAX:
            _SHARED_IDS.clear()
        found = _SHARED_IDS[ids] = ids
    return found


def partition_from_record(msg: pb.PartitionRecord) -> PartitionRegistration:
    """The registration a PartitionRecord states (its topic id and index are the key)."""
    recovery = _RECOVERY_STATES.get(msg.leader_recovery_state)
    if recovery is None:
        recovery = LeaderRecoveryState(msg.leader_recovery_state)  # raises ValueError
    replicas = shared_ids(tuple(msg.replicas))
    isr = tuple(msg.isr)
    return PartitionRegistration(
        replicas=replicas,
        isr=replicas if isr == replicas else shared_ids(isr),
        removing_replicas=tuple(msg.removing_replicas),
        adding_replicas=tuple(msg.adding_replicas),
        leader=msg.leader,
        leader_recovery_state=recovery,
        leader_epoch=msg.leader_epoch,
        partition_epoch=msg.partition_epoch,
        elr=tuple(msg.eligible_leader_replicas),
    )


def partition_to_record(
    partition: PartitionRegistration, *, topic_id: str, partition_id: int
) -> pb.PartitionRecord:
    return pb.PartitionRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        replicas=partition.replicas,
        isr=partition.isr,
        removing_replicas=partition.removing_replicas,
        adding_replicas=partition.adding_replicas,
        leader=partition.leader,
        leader_recovery_state=pb.LeaderRecoveryState.ValueType(
            int(partition.leader_recovery_state)
        ),
        leader_epoch=partition.leader_epoch,
        partition_epoch=partition.partition_epoch,
        eligible_leader_replicas=partition.elr,
    )


def change_to_record(
    delta: PartitionDelta, *, topic_id: str, partition_id: int
) -> pb.PartitionChangeRecord:
    """The PartitionChangeRecord stating ``delta`` (``PartitionDelta.of`` reads it back)."""
    change = pb.PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id)
    # SetInParent: a list set empty must be present (cleared), not absent (unchanged).
    for name, field_name in (("isr", "isr"), ("replicas", "replicas"),
                             ("removing_replicas", "removing_replicas"),
                             ("adding_replicas", "adding_replicas"),
                             ("elr", "eligible_leader_replicas")):
        ids = getattr(delta, name)
        if ids is not None:
            field = getattr(change, field_name)
            field.SetInParent()
            field.ids.extend(ids)
    if delta.leader is not None:
        change.leader = delta.leader
    if delta.leader_recovery_state is not None:
        change.leader_recovery_state = pb.LeaderRecoveryState.ValueType(
            int(delta.leader_recovery_state))
    return change
