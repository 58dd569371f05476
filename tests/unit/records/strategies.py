"""Hypothesis strategies: one per record payload message, plus domain values."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message
from hypothesis import strategies as st

from controller.records import metadata_pb2 as pb
from controller.records.domain import (
    BrokerRegistration,
    FeatureRange,
    LeaderRecoveryState,
    Listener,
    PartitionRegistration,
    Topic,
)

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
uint32s = st.integers(0, 2**32 - 1)
broker_ids = st.integers(-1, 2**31 - 1)
texts = st.text(max_size=20)  # excludes surrogates, so always valid UTF-8
uuids = st.uuids().map(str)
id_lists = st.lists(broker_ids, max_size=6)


def _enum(enum_type: Any) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(enum_type.values()))


def message(cls: type[Message], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Build ``cls`` from field strategies; a field drawn as None is left unset."""

    def build(values: dict[str, Any]) -> Message:
        return cls(**{name: value for name, value in values.items() if value is not None})

    return st.fixed_dictionaries(fields).map(build)


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


listeners = message(
    pb.Listener,
    name=texts,
    host=texts,
    port=st.integers(0, 65535),
    security_protocol=st.sampled_from(["PLAINTEXT", "SSL", "SASL_SSL"]),
)
broker_id_lists = message(pb.BrokerIdList, ids=id_lists)

PAYLOADS: dict[str, st.SearchStrategy[Any]] = {
    "register_broker": message(
        pb.RegisterBrokerRecord,
        broker_id=broker_ids,
        incarnation_id=uuids,
        broker_epoch=int64s,
        listeners=st.lists(listeners, max_size=3),
        rack=_optional(texts),
        fenced=st.booleans(),
        in_controlled_shutdown=st.booleans(),
        features=st.lists(
            message(
                pb.BrokerFeature,
                name=texts,
                min_supported_version=int32s,
                max_supported_version=int32s,
            ),
            max_size=3,
        ),
    ),
    "unregister_broker": message(
        pb.UnregisterBrokerRecord, broker_id=broker_ids, broker_epoch=int64s
    ),
    "broker_registration_change": message(
        pb.BrokerRegistrationChangeRecord,
        broker_id=broker_ids,
        broker_epoch=int64s,
        fenced=_enum(pb.FenceChange),
        in_controlled_shutdown=_enum(pb.ControlledShutdownChange),
    ),
    "topic": message(pb.TopicRecord, name=texts, topic_id=uuids),
    "partition": message(
        pb.PartitionRecord,
        partition_id=st.integers(0, 2**31 - 1),
        topic_id=uuids,
        replicas=id_lists,
        isr=id_lists,
        removing_replicas=id_lists,
        adding_replicas=id_lists,
        leader=broker_ids,
        leader_recovery_state=_enum(pb.LeaderRecoveryState),
        leader_epoch=int32s,
        partition_epoch=int32s,
    ),
    "partition_change": message(
        pb.PartitionChangeRecord,
        partition_id=st.integers(0, 2**31 - 1),
        topic_id=uuids,
        isr=_optional(broker_id_lists),
        leader=_optional(broker_ids),
        replicas=_optional(broker_id_lists),
        removing_replicas=_optional(broker_id_lists),
        adding_replicas=_optional(broker_id_lists),
        leader_recovery_state=_optional(_enum(pb.LeaderRecoveryState)),
    ),
    "remove_topic": message(pb.RemoveTopicRecord, topic_id=uuids),
    "config": message(
        pb.ConfigRecord,
        resource_type=_enum(pb.ConfigResourceType),
        resource_name=texts,
        name=texts,
        value=_optional(texts),
    ),
    "feature_level": message(pb.FeatureLevelRecord, name=texts, feature_level=int32s),
    "access_control_entry": message(
        pb.AccessControlEntryRecord,
        id=uuids,
        resource_type=_enum(pb.AclResourceType),
        resource_name=texts,
        pattern_type=_enum(pb.AclPatternType),
        principal=texts,
        host=texts,
        operation=_enum(pb.AclOperation),
        permission_type=_enum(pb.AclPermissionType),
    ),
    "remove_access_control_entry": message(pb.RemoveAccessControlEntryRecord, id=uuids),
    "no_op": st.just(pb.NoOpRecord()),
    "remote_log_segment": message(
        pb.RemoteLogSegmentRecord,
        segment_id=uuids,
        kind=_enum(pb.RemoteLogObjectKind),
        start_offset=int64s,
        end_offset=int64s,
        start_time_ms=int64s,
        end_time_ms=int64s,
        size_bytes=int64s,
        last_epoch=int32s,
        copier_id=int32s,
        copier_epoch=int32s,
        event_time_ms=int64s,
    ),
    "remote_log_segment_state_change": message(
        pb.RemoteLogSegmentStateChangeRecord,
        segment_id=uuids,
        state=_enum(pb.RemoteLogSegmentState),
        copier_id=int32s,
        copier_epoch=int32s,
        event_time_ms=int64s,
    ),
    "request_result": message(
        pb.RequestResultRecord,
        principal=texts,
        request_id=texts,
        method=texts,
        time_ms=int64s,
        response=st.binary(max_size=64),
        result_dropped=st.booleans(),
    ),
    "leader_change": message(
        pb.LeaderChangeRecord,
        leader_id=broker_ids,
        epoch=int32s,
        voters=id_lists,
        granting_voters=id_lists,
    ),
    "snapshot_header": message(
        pb.SnapshotHeaderRecord,
        last_contained_offset=int64s,
        last_contained_epoch=int32s,
        last_contained_log_time_ms=int64s,
        format_version=uint32s,
    ),
    "snapshot_footer": message(pb.SnapshotFooterRecord, record_count=int64s),
    "voters": st.builds(
        lambda voters: pb.VotersRecord(voters=voters),
        st.lists(message(pb.VotersRecord.Voter, node_id=broker_ids, directory_id=texts,
                         endpoint=texts), max_size=5),
    ),
}

any_payload = st.sampled_from(sorted(PAYLOADS)).flatmap(lambda name: PAYLOADS[name])

# --- domain values -------------------------------------------------------------------

domain_listeners = st.builds(
    Listener, name=texts, host=texts, port=st.integers(0, 65535), security_protocol=texts
)
broker_registrations = st.builds(
    BrokerRegistration,
    broker_id=broker_ids,
    incarnation_id=uuids,
    broker_epoch=int64s,
    listeners=st.lists(domain_listeners, max_size=3).map(tuple),
    rack=st.none() | texts,
    fenced=st.booleans(),
    in_controlled_shutdown=st.booleans(),
    supported_features=st.lists(
        st.builds(FeatureRange, name=texts, min_version=int32s, max_version=int32s),
        max_size=3,
    ).map(tuple),
)
topics = st.builds(Topic, name=texts, topic_id=uuids)
id_tuples = id_lists.map(tuple)
partition_registrations = st.builds(
    PartitionRegistration,
    replicas=id_tuples,
    isr=id_tuples,
    removing_replicas=id_tuples,
    adding_replicas=id_tuples,
    leader=broker_ids,
    leader_recovery_state=st.sampled_from(LeaderRecoveryState),
    leader_epoch=st.integers(0, 2**30),
    partition_epoch=st.integers(0, 2**30),
)
