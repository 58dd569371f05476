"""Wire messages (admin.proto, broker.proto) ⇄ the control managers' values.

``*_from_pb`` runs on the server for requests and on the client for responses;
``*_to_pb`` the other way round. A request that cannot mean anything (an enum left
UNSPECIFIED, a reassignment that both cancels and names replicas) raises
``MalformedRequestError``, which the services answer with INVALID_ARGUMENT before
the controller sees it. Everything that is well-formed but wrong (a bad topic name,
an unknown broker) is the managers' business: it becomes a per-item error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import attrs

from controller.api import admin_pb2 as apb
from controller.api import broker_pb2 as bpb
from controller.api.seam import (
    ClusterDescription,
    NodeDescription,
    QuorumDescription,
    ReplicaState,
    TransferOutcome,
    VoterChangeOutcome,
)
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    ApiError,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConfigType,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    DescribeConfigsResult,
    ElectionType,
    ElectLeadersResult,
    ErrorCode,
    FeatureDescription,
    FeatureUpdate,
    FeatureUpdateResult,
    OngoingReassignment,
    OpType,
    PartitionDescription,
    ReassignmentRequest,
    ReassignmentResult,
    ResourceType,
    TopicDescription,
    TopicListing,
    TopicPartition,
    UpgradeType,
)
from controller.records.domain import (
    BrokerRegistration,
    FeatureRange,
    LeaderRecoveryState,
    Listener,
    PartitionRegistration,
)

E = TypeVar("E")


class MalformedRequestError(ValueError):
    """The message is well-typed protobuf but means nothing (INVALID_ARGUMENT)."""


# -- shared pieces ---------------------------------------------------------------------

_CODES = {code.value: code for code in ErrorCode}


def error_to_pb(error: ApiError) -> apb.Error:
    return apb.Error(code=error.code.value, message=error.message)


def error_from_pb(msg: apb.Error | bpb.Error) -> ApiError:
    code = _CODES.get(msg.code or ErrorCode.NONE.value)
    if code is None:
        # A newer server may add codes; keep the one we do not know in the message.
        return ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{msg.code}: {msg.message}")
    return ApiError(code, msg.message)


def _ids(values: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _enum_from_pb(table: dict[int, E], value: int, what: str) -> E:
    found = table.get(value)
    if found is None:
        known = ", ".join(f"{k} ({getattr(v, 'name', v)})" for k, v in sorted(table.items()))
        raise MalformedRequestError(f"{what} must be one of {known}; got {value}")
    return found


def topic_partition_to_pb(tp: TopicPartition) -> apb.TopicPartition:
    return apb.TopicPartition(topic=tp.topic, partition=tp.partition)


def topic_partition_from_pb(msg: apb.TopicPartition) -> TopicPartition:
    return TopicPartition(msg.topic, msg.partition)


def _replica_lists(lists: Sequence[tuple[int, ...]]) -> list[apb.ReplicaList]:
    return [apb.ReplicaList(broker_ids=r) for r in lists]


# -- topics ----------------------------------------------------------------------------


def creatable_topic_to_pb(topic: CreatableTopic) -> apb.CreatableTopic:
    msg = apb.CreatableTopic(
        name=topic.name,
        assignments=_replica_lists(topic.assignments),
        configs=[apb.ConfigKeyValue(key=k, value=v) for k, v in topic.configs],
    )
    # -1 (the cluster default) is the field's absence on the wire.
    if topic.num_partitions != -1:
        msg.num_partitions = topic.num_partitions
    if topic.replication_factor != -1:
        msg.replication_factor = topic.replication_factor
    return msg


def creatable_topic_from_pb(msg: apb.CreatableTopic) -> CreatableTopic:
    return CreatableTopic(
        name=msg.name,
        num_partitions=msg.num_partitions if msg.HasField("num_partitions") else -1,
        replication_factor=msg.replication_factor if msg.HasField("replication_factor") else -1,
        assignments=tuple(_ids(r.broker_ids) for r in msg.assignments),
        configs=tuple((c.key, c.value) for c in msg.configs),
    )


def create_topic_result_to_pb(result: CreateTopicResult) -> apb.CreateTopicResult:
    return apb.CreateTopicResult(
        name=result.name,
        error=error_to_pb(result.error),
        topic_id=result.topic_id,
        num_partitions=result.num_partitions,
        replication_factor=result.replication_factor,
    )


def create_topic_result_from_pb(msg: apb.CreateTopicResult) -> CreateTopicResult:
    return CreateTopicResult(
        msg.name,
        error_from_pb(msg.error),
        msg.topic_id,
        msg.num_partitions,
        msg.replication_factor,
    )


def delete_topic_result_to_pb(result: DeleteTopicResult) -> apb.DeleteTopicResult:
    return apb.DeleteTopicResult(
        name=result.name, error=error_to_pb(result.error), topic_id=result.topic_id
    )


def delete_topic_result_from_pb(msg: apb.DeleteTopicResult) -> DeleteTopicResult:
    return DeleteTopicResult(msg.name, error_from_pb(msg.error), msg.topic_id)


def create_partitions_topic_to_pb(item: CreatePartitionsTopic) -> apb.CreatePartitionsTopic:
    msg = apb.CreatePartitionsTopic(
        name=item.name, count=item.count, assignments=_replica_lists(item.assignments)
    )
    if item.if_mod_offset is not None:
        msg.if_mod_offset = item.if_mod_offset
    return msg


def create_partitions_topic_from_pb(msg: apb.CreatePartitionsTopic) -> CreatePartitionsTopic:
    return CreatePartitionsTopic(
        msg.name, msg.count, tuple(_ids(r.broker_ids) for r in msg.assignments),
        _condition(msg, "if_mod_offset", -1),
    )


def _condition(msg: Any, field: str, minimum: int) -> int | None:
    """An optional condition field (None: absent); MalformedRequestError below
    `minimum`."""
    if not msg.HasField(field):
        return None
    value: int = getattr(msg, field)
    if value < minimum:
        raise MalformedRequestError(f"{field} {value} is below {minimum}")
    return value


def delete_conditions_from_pb(msg: apb.DeleteTopicsRequest) -> dict[str, int] | None:
    """DeleteTopics' conditions (None: none); a condition on a topic the request does
    not name is malformed."""
    if not msg.if_mod_offsets:
        return None
    unnamed = sorted(set(msg.if_mod_offsets) - set(msg.names))
    if unnamed:
        raise MalformedRequestError(f"if_mod_offsets names topics the request does not "
                                    f"delete: {', '.join(unnamed)}")
    for name, value in msg.if_mod_offsets.items():
        if value < 0:
            raise MalformedRequestError(f"if_mod_offsets[{name!r}] {value} is negative")
    return dict(msg.if_mod_offsets)


def create_partitions_result_to_pb(result: CreatePartitionsResult) -> apb.CreatePartitionsResult:
    return apb.CreatePartitionsResult(name=result.name, error=error_to_pb(result.error))


def create_partitions_result_from_pb(msg: apb.CreatePartitionsResult) -> CreatePartitionsResult:
    return CreatePartitionsResult(msg.name, error_from_pb(msg.error))


def topic_listing_to_pb(listing: TopicListing) -> apb.TopicListing:
    return apb.TopicListing(name=listing.name, topic_id=listing.topic_id)


def topic_listing_from_pb(msg: apb.TopicListing) -> TopicListing:
    return TopicListing(msg.name, msg.topic_id)


def partition_description_to_pb(desc: PartitionDescription) -> apb.PartitionDescription:
    part = desc.registration
    return apb.PartitionDescription(
        partition=desc.partition_id,
        leader=part.leader,
        leader_epoch=part.leader_epoch,
        partition_epoch=part.partition_epoch,
        replicas=part.replicas,
        isr=part.isr,
        adding_replicas=part.adding_replicas,
        removing_replicas=part.removing_replicas,
        leader_recovering=part.leader_recovery_state is LeaderRecoveryState.RECOVERING,
        eligible_leader_replicas=part.elr,
    )


def partition_description_from_pb(msg: apb.PartitionDescription) -> PartitionDescription:
    recovery = (
        LeaderRecoveryState.RECOVERING if msg.leader_recovering else LeaderRecoveryState.RECOVERED
    )
    registration = PartitionRegistration(
        replicas=_ids(msg.replicas),
        isr=_ids(msg.isr),
        removing_replicas=_ids(msg.removing_replicas),
        adding_replicas=_ids(msg.adding_replicas),
        leader=msg.leader,
        leader_recovery_state=recovery,
        leader_epoch=msg.leader_epoch,
        partition_epoch=msg.partition_epoch,
        elr=_ids(msg.eligible_leader_replicas),
    )
    return PartitionDescription(msg.partition, registration)


def topic_description_to_pb(desc: TopicDescription) -> apb.TopicDescription:
    return apb.TopicDescription(
        name=desc.name,
        error=error_to_pb(desc.error),
        topic_id=desc.topic_id,
        partitions=[partition_description_to_pb(p) for p in desc.partitions],
        mod_offset=desc.mod_offset,
    )


def topic_description_from_pb(msg: apb.TopicDescription) -> TopicDescription:
    return TopicDescription(
        msg.name,
        error_from_pb(msg.error),
        msg.topic_id,
        tuple(partition_description_from_pb(p) for p in msg.partitions),
        msg.mod_offset,
    )


# -- cluster ---------------------------------------------------------------------------


def broker_to_pb(broker: BrokerRegistration) -> apb.BrokerDescription:
    msg = apb.BrokerDescription(
        broker_id=broker.broker_id,
        broker_epoch=broker.broker_epoch,
        incarnation_id=broker.incarnation_id,
        listeners=[
            apb.Listener(
                name=li.name, host=li.host, port=li.port, security_protocol=li.security_protocol
            )
            for li in broker.listeners
        ],
        fenced=broker.fenced,
        in_controlled_shutdown=broker.in_controlled_shutdown,
        supported_features=[
            apb.SupportedFeature(name=f.name, min_version=f.min_version, max_version=f.max_version)
            for f in broker.supported_features
        ],
    )
    if broker.rack is not None:
        msg.rack = broker.rack
    return msg


def broker_from_pb(msg: apb.BrokerDescription) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=msg.broker_id,
        incarnation_id=msg.incarnation_id,
        broker_epoch=msg.broker_epoch,
        listeners=tuple(
            Listener(li.name, li.host, li.port, li.security_protocol) for li in msg.listeners
        ),
        rack=msg.rack if msg.HasField("rack") else None,
        fenced=msg.fenced,
        in_controlled_shutdown=msg.in_controlled_shutdown,
        supported_features=tuple(
            FeatureRange(f.name, f.min_version, f.max_version) for f in msg.supported_features
        ),
    )


def cluster_to_pb(desc: ClusterDescription) -> apb.DescribeClusterResponse:
    return apb.DescribeClusterResponse(
        cluster_id=desc.cluster_id,
        controller_id=desc.controller_id,
        brokers=[broker_to_pb(b) for b in desc.brokers],
    )


def cluster_from_pb(msg: apb.DescribeClusterResponse) -> ClusterDescription:
    return ClusterDescription(
        msg.cluster_id, msg.controller_id, tuple(broker_from_pb(b) for b in msg.brokers)
    )


# -- configs ---------------------------------------------------------------------------

_RESOURCE_TO_PB = {
    ResourceType.TOPIC: apb.RESOURCE_TYPE_TOPIC,
    ResourceType.BROKER: apb.RESOURCE_TYPE_BROKER,
    ResourceType.CLUSTER: apb.RESOURCE_TYPE_CLUSTER,
}
_RESOURCE_FROM_PB = {int(v): k for k, v in _RESOURCE_TO_PB.items()}
_OP_TO_PB = {
    OpType.SET: apb.ALTER_CONFIG_OP_TYPE_SET,
    OpType.DELETE: apb.ALTER_CONFIG_OP_TYPE_DELETE,
    OpType.APPEND: apb.ALTER_CONFIG_OP_TYPE_APPEND,
    OpType.SUBTRACT: apb.ALTER_CONFIG_OP_TYPE_SUBTRACT,
}
_OP_FROM_PB = {int(v): k for k, v in _OP_TO_PB.items()}


def config_resource_to_pb(resource: ConfigResource) -> apb.ConfigResource:
    return apb.ConfigResource(type=_RESOURCE_TO_PB[resource.type], name=resource.name)


def config_resource_from_pb(msg: apb.ConfigResource) -> ConfigResource:
    kind = _enum_from_pb(_RESOURCE_FROM_PB, msg.type, "config resource type")
    return ConfigResource(kind, msg.name)


def alter_configs_resource_to_pb(item: AlterConfigsResource) -> apb.AlterConfigsResource:
    ops = []
    for op in item.ops:
        msg = apb.AlterConfigOp(key=op.key, op=_OP_TO_PB[op.op])
        if op.value is not None:
            msg.value = op.value
        ops.append(msg)
    resource = apb.AlterConfigsResource(resource=config_resource_to_pb(item.resource), ops=ops)
    if item.if_mod_offset is not None:
        resource.if_mod_offset = item.if_mod_offset
    return resource


def alter_configs_resource_from_pb(msg: apb.AlterConfigsResource) -> AlterConfigsResource:
    if not msg.HasField("resource"):
        raise MalformedRequestError("every IncrementalAlterConfigs entry needs a resource")
    ops = tuple(
        AlterConfigOp(
            op.key,
            _enum_from_pb(_OP_FROM_PB, op.op, f"the operation on config {op.key!r}"),
            op.value if op.HasField("value") else None,
        )
        for op in msg.ops
    )
    return AlterConfigsResource(config_resource_from_pb(msg.resource), ops,
                                _condition(msg, "if_mod_offset", -1))


def alter_configs_result_to_pb(result: AlterConfigsResult) -> apb.AlterConfigsResult:
    return apb.AlterConfigsResult(
        resource=config_resource_to_pb(result.resource), error=error_to_pb(result.error)
    )


def alter_configs_result_from_pb(msg: apb.AlterConfigsResult) -> AlterConfigsResult:
    return AlterConfigsResult(config_resource_from_pb(msg.resource), error_from_pb(msg.error))


def describe_configs_result_to_pb(result: DescribeConfigsResult) -> apb.DescribeConfigsResult:
    return apb.DescribeConfigsResult(
        resource=config_resource_to_pb(result.resource),
        error=error_to_pb(result.error),
        entries=[
            apb.ConfigEntry(
                key=e.key, value=e.value, source=e.source.value, type=e.type.value, doc=e.doc
            )
            for e in result.entries
        ],
        mod_offset=result.mod_offset,
    )


def describe_configs_result_from_pb(msg: apb.DescribeConfigsResult) -> DescribeConfigsResult:
    return DescribeConfigsResult(
        config_resource_from_pb(msg.resource),
        error_from_pb(msg.error),
        tuple(
            ConfigEntry(e.key, e.value, ConfigSource(e.source), ConfigType(e.type), e.doc)
            for e in msg.entries
        ),
        msg.mod_offset,
    )


# -- reassignments and elections -------------------------------------------------------

_ELECTION_TO_PB = {
    ElectionType.PREFERRED: apb.ELECTION_TYPE_PREFERRED,
    ElectionType.UNCLEAN: apb.ELECTION_TYPE_UNCLEAN,
}
_ELECTION_FROM_PB = {int(v): k for k, v in _ELECTION_TO_PB.items()}


def election_type_to_pb(kind: ElectionType) -> apb.ElectionType.ValueType:
    return _ELECTION_TO_PB[kind]


def election_type_from_pb(value: int) -> ElectionType:
    return _enum_from_pb(_ELECTION_FROM_PB, value, "election_type")


def reassignment_request_to_pb(item: ReassignmentRequest) -> apb.ReassignablePartition:
    msg = apb.ReassignablePartition(
        topic=item.topic,
        partition=item.partition,
        replicas=item.replicas or (),
        cancel=item.replicas is None,
    )
    if item.if_partition_epoch is not None:
        msg.if_partition_epoch = item.if_partition_epoch
    return msg


def reassignment_request_from_pb(msg: apb.ReassignablePartition) -> ReassignmentRequest:
    if msg.cancel and msg.replicas:
        raise MalformedRequestError(
            f"{msg.topic}-{msg.partition}: a reassignment either cancels or names target "
            f"replicas, not both (got cancel and replicas {list(msg.replicas)})"
        )
    return ReassignmentRequest(msg.topic, msg.partition, None if msg.cancel else _ids(msg.replicas),
                               _condition(msg, "if_partition_epoch", 0))


def reassignment_result_to_pb(result: ReassignmentResult) -> apb.ReassignmentResult:
    return apb.ReassignmentResult(
        topic=result.topic, partition=result.partition, error=error_to_pb(result.error)
    )


def reassignment_result_from_pb(msg: apb.ReassignmentResult) -> ReassignmentResult:
    return ReassignmentResult(msg.topic, msg.partition, error_from_pb(msg.error))


def ongoing_reassignment_to_pb(item: OngoingReassignment) -> apb.OngoingReassignment:
    return apb.OngoingReassignment(
        topic=item.topic,
        partition=item.partition,
        replicas=item.replicas,
        adding_replicas=item.adding,
        removing_replicas=item.removing,
    )


def ongoing_reassignment_from_pb(msg: apb.OngoingReassignment) -> OngoingReassignment:
    return OngoingReassignment(
        msg.topic,
        msg.partition,
        _ids(msg.replicas),
        _ids(msg.adding_replicas),
        _ids(msg.removing_replicas),
    )


def elect_leaders_result_to_pb(result: ElectLeadersResult) -> apb.ElectLeadersResult:
    return apb.ElectLeadersResult(
        topic=result.topic, partition=result.partition, error=error_to_pb(result.error)
    )


def elect_leaders_result_from_pb(msg: apb.ElectLeadersResult) -> ElectLeadersResult:
    return ElectLeadersResult(msg.topic, msg.partition, error_from_pb(msg.error))


# -- quorum and features ---------------------------------------------------------------


def _replica_to_pb(state: ReplicaState) -> apb.ReplicaState:
    return apb.ReplicaState(
        replica_id=state.replica_id,
        log_end_offset=state.log_end_offset,
        last_fetch_timestamp_ms=state.last_fetch_timestamp_ms,
        last_caught_up_timestamp_ms=state.last_caught_up_timestamp_ms,
        directory_id=state.directory_id,
        endpoint=state.endpoint,
        min_supported_version=state.supported_versions[0],
        max_supported_version=state.supported_versions[1],
    )


def _replica_from_pb(msg: apb.ReplicaState) -> ReplicaState:
    return ReplicaState(
        msg.replica_id,
        msg.log_end_offset,
        msg.last_fetch_timestamp_ms,
        msg.last_caught_up_timestamp_ms,
        msg.directory_id,
        msg.endpoint,
        (msg.min_supported_version, msg.max_supported_version),
    )


def quorum_to_pb(desc: QuorumDescription) -> apb.DescribeQuorumResponse:
    return apb.DescribeQuorumResponse(
        leader_id=desc.leader_id,
        leader_epoch=desc.leader_epoch,
        high_watermark=desc.high_watermark,
        voters=[_replica_to_pb(v) for v in desc.voters],
        observers=[_replica_to_pb(o) for o in desc.observers],
        dynamic=desc.dynamic,
        node_id=desc.node_id,
        node_directory_id=desc.node_directory_id,
        node_endpoint=desc.node_endpoint,
        cluster_id=desc.cluster_id,
    )


def quorum_from_pb(msg: apb.DescribeQuorumResponse) -> QuorumDescription:
    return QuorumDescription(
        msg.leader_id,
        msg.leader_epoch,
        msg.high_watermark,
        tuple(_replica_from_pb(v) for v in msg.voters),
        tuple(_replica_from_pb(o) for o in msg.observers),
        msg.dynamic,
        msg.node_id,
        msg.node_directory_id,
        msg.node_endpoint,
        msg.cluster_id,
    )


def node_to_pb(desc: NodeDescription) -> apb.DescribeNodeResponse:
    return apb.DescribeNodeResponse(**attrs.asdict(desc))


def node_from_pb(msg: apb.DescribeNodeResponse) -> NodeDescription:
    return NodeDescription(**{f.name: getattr(msg, f.name) for f in attrs.fields(NodeDescription)})


def transfer_to_pb(outcome: TransferOutcome) -> apb.TransferLeadershipResponse:
    return apb.TransferLeadershipResponse(error=error_to_pb(outcome.error),
                                          leader_id=outcome.leader_id,
                                          leader_epoch=outcome.leader_epoch)


def transfer_from_pb(msg: apb.TransferLeadershipResponse) -> TransferOutcome:
    return TransferOutcome(error_from_pb(msg.error), msg.leader_id, msg.leader_epoch)


def voter_change_to_pb(outcome: VoterChangeOutcome) -> apb.RaftVoterChangeResponse:
    return apb.RaftVoterChangeResponse(error=error_to_pb(outcome.error), offset=outcome.offset,
                                       voters=[_replica_to_pb(v) for v in outcome.voters])


def voter_change_from_pb(msg: apb.RaftVoterChangeResponse) -> VoterChangeOutcome:
    return VoterChangeOutcome(error_from_pb(msg.error), msg.offset,
                              tuple(_replica_from_pb(v) for v in msg.voters))


def feature_description_to_pb(desc: FeatureDescription) -> apb.FeatureDescription:
    return apb.FeatureDescription(
        name=desc.name,
        finalized_level=desc.finalized_level,
        min_supported=desc.min_supported,
        max_supported=desc.max_supported,
    )


def feature_description_from_pb(msg: apb.FeatureDescription) -> FeatureDescription:
    return FeatureDescription(msg.name, msg.finalized_level, msg.min_supported, msg.max_supported)


_UPGRADE_TO_PB = {
    UpgradeType.UPGRADE: apb.UPGRADE_TYPE_UPGRADE,
    UpgradeType.SAFE_DOWNGRADE: apb.UPGRADE_TYPE_SAFE_DOWNGRADE,
    UpgradeType.UNSAFE_DOWNGRADE: apb.UPGRADE_TYPE_UNSAFE_DOWNGRADE,
}
_UPGRADE_FROM_PB = {int(v): k for k, v in _UPGRADE_TO_PB.items()}


def feature_update_to_pb(update: FeatureUpdate) -> apb.FeatureUpdate:
    return apb.FeatureUpdate(
        name=update.name, level=update.level, upgrade_type=_UPGRADE_TO_PB[update.upgrade_type]
    )


def feature_update_from_pb(msg: apb.FeatureUpdate) -> FeatureUpdate:
    kind = _enum_from_pb(_UPGRADE_FROM_PB, msg.upgrade_type, f"upgrade_type of {msg.name!r}")
    return FeatureUpdate(msg.name, msg.level, kind)


def feature_update_result_to_pb(result: FeatureUpdateResult) -> apb.FeatureUpdateResult:
    return apb.FeatureUpdateResult(name=result.name, error=error_to_pb(result.error))


def feature_update_result_from_pb(msg: apb.FeatureUpdateResult) -> FeatureUpdateResult:
    return FeatureUpdateResult(msg.name, error_from_pb(msg.error))
