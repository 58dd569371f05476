"""Wire conversions round-trip (through bytes), and malformed requests are refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.api import admin_pb2 as apb
from controller.api import broker_convert as bcv
from controller.api import broker_pb2 as bpb
from controller.api import convert as cv
from controller.api.seam import ClusterDescription, QuorumDescription, ReplicaState
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    ApiError,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
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

BAD = ApiError(ErrorCode.INVALID_CONFIG, "invalid value 'x' for config 'retention.ms'")
OK = ApiError(ErrorCode.NONE)
TOPIC = ConfigResource(ResourceType.TOPIC, "orders")
PART = PartitionRegistration(
    replicas=(3, 1, 2),
    isr=(3, 1),
    removing_replicas=(2,),
    adding_replicas=(1,),
    leader=3,
    leader_recovery_state=LeaderRecoveryState.RECOVERING,
    leader_epoch=4,
    partition_epoch=9,
)
BROKER = BrokerRegistration(
    broker_id=2,
    incarnation_id="inc",
    broker_epoch=17,
    listeners=(Listener("PLAINTEXT", "h", 9092, "PLAINTEXT"),),
    rack="r1",
    fenced=False,
    in_controlled_shutdown=True,
    supported_features=(FeatureRange("metadata.version", 1, 3),),
)

# (value, to_pb, from_pb): each must survive to_pb → bytes → from_pb unchanged.
CASES: list[tuple[Any, Callable[[Any], Any], Callable[[Any], Any]]] = [
    (BAD, cv.error_to_pb, cv.error_from_pb),
    (OK, cv.error_to_pb, cv.error_from_pb),
    (TopicPartition("t", 3), cv.topic_partition_to_pb, cv.topic_partition_from_pb),
    (CreatableTopic("t"), cv.creatable_topic_to_pb, cv.creatable_topic_from_pb),
    (
        CreatableTopic("t", 0, 3, configs=(("retention.ms", "1"), ("segment.ms", "2"))),
        cv.creatable_topic_to_pb,
        cv.creatable_topic_from_pb,
    ),
    (
        CreatableTopic("t", assignments=((1, 2), (2, 3))),
        cv.creatable_topic_to_pb,
        cv.creatable_topic_from_pb,
    ),
    (
        CreateTopicResult("t", OK, "id", 3, 2),
        cv.create_topic_result_to_pb,
        cv.create_topic_result_from_pb,
    ),
    (CreateTopicResult("t", BAD), cv.create_topic_result_to_pb, cv.create_topic_result_from_pb),
    (
        DeleteTopicResult("t", OK, "id"),
        cv.delete_topic_result_to_pb,
        cv.delete_topic_result_from_pb,
    ),
    (
        CreatePartitionsTopic("t", 5, ((1,), (2,))),
        cv.create_partitions_topic_to_pb,
        cv.create_partitions_topic_from_pb,
    ),
    (
        CreatePartitionsResult("t", BAD),
        cv.create_partitions_result_to_pb,
        cv.create_partitions_result_from_pb,
    ),
    (TopicListing("t", "id"), cv.topic_listing_to_pb, cv.topic_listing_from_pb),
    (
        TopicDescription("t", OK, "id", (PartitionDescription(0, PART),)),
        cv.topic_description_to_pb,
        cv.topic_description_from_pb,
    ),
    (TopicDescription("t", BAD), cv.topic_description_to_pb, cv.topic_description_from_pb),
    (BROKER, cv.broker_to_pb, cv.broker_from_pb),
    (BrokerRegistration(1, "i", 0), cv.broker_to_pb, cv.broker_from_pb),
    (ClusterDescription("c", -1, (BROKER,)), cv.cluster_to_pb, cv.cluster_from_pb),
    (TOPIC, cv.config_resource_to_pb, cv.config_resource_from_pb),
    (
        AlterConfigsResource(
            ConfigResource(ResourceType.BROKER, ""),
            (
                AlterConfigOp("a", OpType.SET, "1"),
                AlterConfigOp("b", OpType.DELETE),
                AlterConfigOp("c", OpType.APPEND, ""),
                AlterConfigOp("d", OpType.SUBTRACT, "x"),
            ),
        ),
        cv.alter_configs_resource_to_pb,
        cv.alter_configs_resource_from_pb,
    ),
    (
        AlterConfigsResult(ConfigResource(ResourceType.CLUSTER, ""), BAD),
        cv.alter_configs_result_to_pb,
        cv.alter_configs_result_from_pb,
    ),
    (
        DescribeConfigsResult(
            TOPIC,
            OK,
            (ConfigEntry("retention.ms", "5", ConfigSource.DYNAMIC_TOPIC, ConfigType.LONG, "d"),),
        ),
        cv.describe_configs_result_to_pb,
        cv.describe_configs_result_from_pb,
    ),
    (
        ReassignmentRequest("t", 1, (1, 2)),
        cv.reassignment_request_to_pb,
        cv.reassignment_request_from_pb,
    ),
    (
        ReassignmentRequest("t", 1, None),
        cv.reassignment_request_to_pb,
        cv.reassignment_request_from_pb,
    ),
    (
        ReassignmentResult("t", 1, BAD),
        cv.reassignment_result_to_pb,
        cv.reassignment_result_from_pb,
    ),
    (
        OngoingReassignment("t", 0, (1, 2, 3), (1,), (3,)),
        cv.ongoing_reassignment_to_pb,
        cv.ongoing_reassignment_from_pb,
    ),
    (
        ElectLeadersResult("t", 0, OK),
        cv.elect_leaders_result_to_pb,
        cv.elect_leaders_result_from_pb,
    ),
    (
        QuorumDescription(
            1, 5, 100, (ReplicaState(1, 100, 7, 7), ReplicaState(2)), (ReplicaState(9, 3),)
        ),
        cv.quorum_to_pb,
        cv.quorum_from_pb,
    ),
    (
        FeatureDescription("metadata.version", 3, 1, 3),
        cv.feature_description_to_pb,
        cv.feature_description_from_pb,
    ),
    (
        FeatureUpdate("metadata.version", 2, UpgradeType.UNSAFE_DOWNGRADE),
        cv.feature_update_to_pb,
        cv.feature_update_from_pb,
    ),
    (
        FeatureUpdateResult("metadata.version", BAD),
        cv.feature_update_result_to_pb,
        cv.feature_update_result_from_pb,
    ),
    (
        BrokerRegistrationRequest(
            3,
            "inc",
            "cluster",
            (Listener("P", "h", 1, "PLAINTEXT"),),
            None,
            (FeatureRange("f", 1, 2),),
        ),
        bcv.registration_request_to_pb,
        bcv.registration_request_from_pb,
    ),
    (
        BrokerRegistrationReply(ApiError(ErrorCode.DUPLICATE_BROKER_REGISTRATION, "m"), -1),
        bcv.registration_reply_to_pb,
        bcv.registration_reply_from_pb,
    ),
    (
        BrokerHeartbeatRequest(3, 17, 40, want_fence=True, want_shutdown=True),
        lambda r: bcv.heartbeat_request_to_pb(r, "cluster"),
        bcv.heartbeat_request_from_pb,
    ),
    (
        BrokerHeartbeatReply(OK, True, False, True, True),
        lambda r: bcv.heartbeat_reply_to_pb(r, 17),
        bcv.heartbeat_reply_from_pb,
    ),
]


def _through_bytes(msg: Any) -> Any:
    return type(msg).FromString(msg.SerializeToString())


@pytest.mark.parametrize(("value", "to_pb", "from_pb"), CASES, ids=lambda v: type(v).__name__)
def test_round_trip(value: Any, to_pb: Callable[[Any], Any], from_pb: Callable[[Any], Any]) -> None:
    assert from_pb(_through_bytes(to_pb(value))) == value


names = st.text(min_size=0, max_size=20)
ids = st.lists(st.integers(min_value=-1, max_value=2**31 - 1), max_size=5).map(tuple)


@given(
    name=names,
    partitions=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    factor=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    assignments=st.lists(ids, max_size=4).map(tuple),
    configs=st.lists(st.tuples(names, names), max_size=4).map(tuple),
)
def test_creatable_topic_round_trips(
    name: str,
    partitions: int,
    factor: int,
    assignments: tuple[tuple[int, ...], ...],
    configs: tuple[tuple[str, str], ...],
) -> None:
    topic = CreatableTopic(name, partitions, factor, assignments, configs)
    assert cv.creatable_topic_from_pb(_through_bytes(cv.creatable_topic_to_pb(topic))) == topic


@given(
    replicas=ids,
    isr=ids,
    leader=st.integers(min_value=-1, max_value=100),
    epochs=st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)),
    recovering=st.booleans(),
)
def test_partition_description_round_trips(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    leader: int,
    epochs: tuple[int, int],
    recovering: bool,
) -> None:
    state = LeaderRecoveryState.RECOVERING if recovering else LeaderRecoveryState.RECOVERED
    part = PartitionRegistration(replicas, isr, isr, replicas, leader, state, *epochs)
    desc = PartitionDescription(7, part)
    assert (
        cv.partition_description_from_pb(_through_bytes(cv.partition_description_to_pb(desc)))
        == desc
    )


def test_every_error_code_round_trips_and_an_unknown_one_is_kept_readable() -> None:
    for code in ErrorCode:
        error = ApiError(code, "" if code is ErrorCode.NONE else "why")
        assert cv.error_from_pb(cv.error_to_pb(error)) == error
    future = cv.error_from_pb(apb.Error(code="SOMETHING_NEW", message="details"))
    assert future.code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert "SOMETHING_NEW" in future.message and "details" in future.message
    assert cv.error_from_pb(apb.Error()).ok  # an unset error is success


def test_absent_counts_mean_the_cluster_default() -> None:
    msg = apb.CreatableTopic(name="t")
    assert not msg.HasField("num_partitions")
    topic = cv.creatable_topic_from_pb(msg)
    assert (topic.num_partitions, topic.replication_factor) == (-1, -1)
    assert not cv.creatable_topic_to_pb(topic).HasField("replication_factor")


def test_election_types_map_both_ways() -> None:
    for kind in ElectionType:
        assert cv.election_type_from_pb(cv.election_type_to_pb(kind)) is kind


@pytest.mark.parametrize(
    ("convert", "message", "fragment"),
    [
        (cv.config_resource_from_pb, apb.ConfigResource(name="t"), "config resource type"),
        (cv.config_resource_from_pb, apb.ConfigResource(type=42), "got 42"),
        (
            cv.alter_configs_resource_from_pb,
            apb.AlterConfigsResource(
                resource=apb.ConfigResource(type=apb.RESOURCE_TYPE_TOPIC, name="t"),
                ops=[apb.AlterConfigOp(key="retention.ms")],
            ),
            "'retention.ms'",
        ),
        (cv.alter_configs_resource_from_pb, apb.AlterConfigsResource(), "needs a resource"),
        (
            cv.reassignment_request_from_pb,
            apb.ReassignablePartition(topic="t", replicas=[1], cancel=True),
            "not both",
        ),
        (cv.election_type_from_pb, 0, "election_type"),
        (cv.feature_update_from_pb, apb.FeatureUpdate(name="f", level=2), "upgrade_type"),
        (
            bcv.registration_request_from_pb,
            bpb.RegisterBrokerRequest(
                features=[bpb.SupportedFeature(name="f", min_version=3, max_version=1)]
            ),
            "above",
        ),
    ],
)
def test_malformed_requests_are_refused_with_a_reason(
    convert: Callable[[Any], Any], message: Any, fragment: str
) -> None:
    with pytest.raises(cv.MalformedRequestError, match=fragment):
        convert(message)
