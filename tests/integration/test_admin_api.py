"""The Admin and BrokerLifecycle services on a real grpc.aio server (loopback, free
port) with a InMemoryController behind them, driven by the real AdminClient.

Every bad request (malformed, oversized, out of range) gets its error code and leaves no record behind
(the InMemoryController's log length is checked); the status-code contract of
admin.proto and the client's retry policy are checked end to end.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller import rpc
from controller.api import admin_pb2 as apb
from controller.api import admin_pb2_grpc as apb_grpc
from controller.api import broker_pb2 as bpb
from controller.api import broker_pb2_grpc as bpb_grpc
from controller.api.client import (
    AdminClient,
    ControllerOverloadedError,
    ControllerUnreachableError,
    OutcomeUnknownError,
    RequestFailedError,
)
from controller.api.seam import ControllerBusyError, ControllerTimeoutError, NotControllerError
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    ConfigSource,
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
    ErrorCode,
    FeatureUpdate,
    OpType,
    ReassignmentRequest,
    ResourceType,
    TopicPartition,
)
from controller.security.principal import ANONYMOUS
from tests.support.api_server import (
    LOCAL_CLUSTER,
    ApiServer,
    dead_address,
    register_brokers,
    serving,
)
from tests.support.in_memory_controller import InMemoryController
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

CLUSTER = LOCAL_CLUSTER


@pytest.fixture
def client(server: ApiServer) -> Iterator[AdminClient]:
    with AdminClient([server.address], timeout_ms=5_000) as admin:
        yield admin


def _topic(client: AdminClient, name: str, partitions: int = 2, rf: int = 2) -> None:
    (result,) = client.create_topics([CreatableTopic(name, partitions, rf)])
    assert result.error.ok, result.error


# -- every RPC -------------------------------------------------------------------------


def test_every_admin_rpc(client: AdminClient, controller: InMemoryController) -> None:
    (created,) = client.create_topics(
        [CreatableTopic("orders", 3, 2, configs=(("retention.ms", "1000"),))]
    )
    assert created.error.ok and created.num_partitions == 3 and created.replication_factor == 2
    batch = controller.batches[-1]
    assert batch.origin.principal == ANONYMOUS  # plaintext: no identity
    assert batch.origin.request_id == client.last_request_id
    assert batch.origin.client_address.startswith("ipv4:127.0.0.1")

    assert [t.name for t in client.list_topics()] == ["orders"]
    (desc,) = client.describe_topics(["orders"])
    assert desc.topic_id == created.topic_id and len(desc.partitions) == 3
    assert all(len(p.registration.isr) == 2 for p in desc.partitions)

    (grown,) = client.create_partitions([CreatePartitionsTopic("orders", 5)])
    assert grown.error.ok
    assert len(client.describe_topics()[0].partitions) == 5

    topic = ConfigResource(ResourceType.TOPIC, "orders")
    (altered,) = client.incremental_alter_configs(
        [AlterConfigsResource(topic, (AlterConfigOp("cleanup.policy", OpType.APPEND, "compact"),))]
    )
    assert altered.error.ok
    (configs,) = client.describe_configs([topic])
    entries = {e.key: e for e in configs.entries}
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC

    part = desc.partitions[0].registration
    target = tuple(b for b in (1, 2, 3) if b not in part.replicas) + part.replicas[:1]
    (moved,) = client.alter_partition_reassignments([ReassignmentRequest("orders", 0, target)])
    assert moved.error.ok
    client.list_partition_reassignments()  # may already be complete (brokers are in sync)
    (not_moving,) = client.alter_partition_reassignments([ReassignmentRequest("orders", 1, None)])
    assert not_moving.error.code is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS

    elected = client.elect_leaders([TopicPartition("orders", 1)], ElectionType.PREFERRED)
    assert elected[0].error.code in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)
    assert client.elect_leaders(None, ElectionType.UNCLEAN) == ()

    cluster = client.describe_cluster()
    assert cluster.cluster_id == CLUSTER and [b.broker_id for b in cluster.brokers] == [1, 2, 3]
    assert not any(b.fenced for b in cluster.brokers)
    assert cluster.brokers[0].listeners[0].port == 9001

    quorum = client.describe_quorum()
    assert quorum.leader_id == controller.node_id and quorum.high_watermark > 0

    features = {f.name: f for f in client.describe_features()}
    feature = features["metadata.version"]
    assert feature.finalized_level == feature.max_supported
    # The Raft layer's own level: this quorum was formatted static (no initial controllers).
    assert features["kraft.version"].finalized_level == 0
    assert set(features) == {"metadata.version", "kraft.version"}
    (same,) = client.update_features([FeatureUpdate("metadata.version", feature.max_supported)])
    assert same.error.ok

    # The quorum's voter RPCs travel end to end (this in-process double is static).
    for outcome in (client.add_raft_voter(9, "A" * 22, "127.0.0.1:1"),
                    client.remove_raft_voter(1, "A" * 22),
                    client.update_raft_voter(1, "A" * 22, "127.0.0.1:2", validate_only=True)):
        assert outcome.error.code is ErrorCode.UNSUPPORTED_VERSION and outcome.offset == -1

    # The answering controller's own state, never redirected.
    node = client.describe_node()
    assert (node.node_id, node.role, node.controller_mode) == (controller.node_id, "leader",
                                                              "active")
    assert node.cluster_id == CLUSTER and node.voter and node.leader_id == controller.node_id
    assert node.applied_offset == node.high_watermark == controller.record_count
    # Leadership transfers: to the leader itself is done already; to a non-voter refused.
    same_leader = client.transfer_leadership(controller.node_id)
    assert same_leader.error.ok and same_leader.leader_id == controller.node_id
    assert client.transfer_leadership(7).error.code is ErrorCode.VOTER_NOT_FOUND

    register_brokers(client.leader_address or "", [4])
    assert client.unregister_broker(4).ok
    assert client.unregister_broker(4).code is ErrorCode.BROKER_ID_NOT_REGISTERED

    (deleted,) = client.delete_topics(["orders"])
    assert deleted.error.ok and deleted.topic_id == created.topic_id
    assert client.list_topics() == ()


def test_health_and_reflection_are_served(server: ApiServer) -> None:
    channel = rpc.create_sync_channel(server.address)
    try:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("metakraft.admin.v1.Admin", "metakraft.broker.v1.BrokerLifecycle", ""):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()


# -- bad inputs: their codes, and no record ---------------------------------------------

BAD_CREATES = [
    (CreatableTopic("", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (CreatableTopic(".", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (CreatableTopic("..", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (CreatableTopic("x" * 250, 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (CreatableTopic("bad/name", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (CreatableTopic("existing", 1, 1), ErrorCode.TOPIC_ALREADY_EXISTS),
    (CreatableTopic("zero", 0, 1), ErrorCode.INVALID_PARTITIONS),
    (CreatableTopic("negative", -5, 1), ErrorCode.INVALID_PARTITIONS),
    (CreatableTopic("too-wide", 1, 4), ErrorCode.INVALID_REPLICATION_FACTOR),
    (CreatableTopic("ghost-broker", assignments=((1, 9),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (CreatableTopic("twice", assignments=((1, 1),)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (CreatableTopic("ragged", assignments=((1, 2), (3,))), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (CreatableTopic("cfg", 1, 1, configs=(("no.such.key", "1"),)), ErrorCode.INVALID_CONFIG),
    (CreatableTopic("cfg2", 1, 1, configs=(("retention.ms", "soon"),)), ErrorCode.INVALID_CONFIG),
]


@pytest.mark.parametrize(("topic", "code"), BAD_CREATES, ids=lambda v: str(v)[:30])
def test_bad_create_gets_its_code_and_no_record(
    client: AdminClient, controller: InMemoryController, topic: CreatableTopic, code: ErrorCode
) -> None:
    _topic(client, "existing")
    before = controller.record_count
    (result,) = client.create_topics([topic])
    assert result.error.code is code, result.error
    assert result.error.message  # a person can act on it
    assert controller.record_count == before


def test_other_bad_inputs_get_their_codes_and_no_record(
    client: AdminClient, controller: InMemoryController, server: ApiServer
) -> None:
    _topic(client, "t", partitions=2)
    before = controller.record_count
    dup = client.create_topics([CreatableTopic("d", 1, 1), CreatableTopic("d", 1, 1)])
    assert [r.error.code for r in dup] == [ErrorCode.DUPLICATE_RESOURCE] * 2
    assert client.delete_topics(["missing"])[0].error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert client.describe_topics(["missing"])[0].error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (shrink,) = client.create_partitions([CreatePartitionsTopic("t", 1)])
    assert shrink.error.code is ErrorCode.INVALID_PARTITIONS
    (same,) = client.create_partitions([CreatePartitionsTopic("t", 2)])
    assert same.error.code is ErrorCode.INVALID_PARTITIONS
    (missing,) = client.create_partitions([CreatePartitionsTopic("nope", 3)])
    assert missing.error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    topic = ConfigResource(ResourceType.TOPIC, "t")
    bad_configs = [
        AlterConfigsResource(topic, (AlterConfigOp("no.such.key", OpType.SET, "1"),)),
        AlterConfigsResource(
            ConfigResource(ResourceType.BROKER, "1"),
            (AlterConfigOp("min.insync.replicas", OpType.SET, "0"),),
        ),
        AlterConfigsResource(
            ConfigResource(ResourceType.TOPIC, "nope"),
            (AlterConfigOp("retention.ms", OpType.SET, "1"),),
        ),
    ]
    codes = [r.error.code for r in client.incremental_alter_configs(bad_configs)]
    assert codes == [
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_CONFIG,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    (unknown_broker,) = client.alter_partition_reassignments([ReassignmentRequest("t", 0, (1, 42))])
    assert unknown_broker.error.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    (no_partition,) = client.alter_partition_reassignments([ReassignmentRequest("t", 7, (1,))])
    assert no_partition.error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (down,) = client.update_features([FeatureUpdate("metadata.version", 1)])
    assert down.error.code is ErrorCode.INVALID_UPDATE_VERSION
    assert controller.record_count == before

    channel = rpc.create_sync_channel(server.address)
    try:
        brokers = bpb_grpc.BrokerLifecycleStub(channel)
        beat = brokers.BrokerHeartbeat(
            bpb.BrokerHeartbeatRequest(
                cluster_id=CLUSTER, broker_id=1, broker_epoch=0, metadata_offset=1
            ),
            timeout=5,
        )
        assert beat.error.code == ErrorCode.STALE_BROKER_EPOCH.value and beat.broker_epoch == -1
        wrong = brokers.RegisterBroker(
            bpb.RegisterBrokerRequest(cluster_id="other", broker_id=7, incarnation_id="x"),
            timeout=5,
        )
        assert wrong.error.code == ErrorCode.INCONSISTENT_CLUSTER_ID.value
        assert "other" in wrong.error.message and CLUSTER in wrong.error.message
        wrong_beat = brokers.BrokerHeartbeat(
            bpb.BrokerHeartbeatRequest(cluster_id="other", broker_id=1, broker_epoch=1),
            timeout=5,
        )
        assert wrong_beat.error.code == ErrorCode.INCONSISTENT_CLUSTER_ID.value
        unknown = brokers.BrokerHeartbeat(
            bpb.BrokerHeartbeatRequest(cluster_id=CLUSTER, broker_id=77, broker_epoch=1),
            timeout=5,
        )
        assert unknown.error.code == ErrorCode.BROKER_ID_NOT_REGISTERED.value
    finally:
        channel.close()
    assert controller.record_count == before
    assert "register_broker" not in controller.calls[-3:]  # wrong cluster never reached it


def test_items_are_independent(client: AdminClient, controller: InMemoryController) -> None:
    results = client.create_topics(
        [CreatableTopic("a", 1, 1), CreatableTopic("b/", 1, 1), CreatableTopic("c", 2, 3)]
    )
    assert [r.error.code for r in results] == [
        ErrorCode.NONE,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.NONE,
    ]
    assert [t.name for t in client.list_topics()] == ["a", "c"]
    deleted = client.delete_topics(["a", "ghost"])
    assert [r.error.code for r in deleted] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_validate_only_leaves_no_record(client: AdminClient, controller: InMemoryController) -> None:
    _topic(client, "t")
    before = controller.record_count
    (check,) = client.create_topics([CreatableTopic("new", 3, 2)], validate_only=True)
    assert check.error.ok and check.num_partitions == 3
    (grow,) = client.create_partitions([CreatePartitionsTopic("t", 4)], validate_only=True)
    assert grow.error.ok
    resource = ConfigResource(ResourceType.TOPIC, "t")
    (alter,) = client.incremental_alter_configs(
        [AlterConfigsResource(resource, (AlterConfigOp("retention.ms", OpType.SET, "5"),))],
        validate_only=True,
    )
    assert alter.error.ok
    (bad,) = client.create_topics([CreatableTopic("x/", 1, 1)], validate_only=True)
    assert bad.error.code is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert controller.record_count == before
    assert [t.name for t in client.list_topics()] == ["t"]


# -- malformed and oversized requests ---------------------------------------------------


def test_malformed_and_oversized_requests_are_refused_and_the_server_serves_on(
    server: ApiServer, controller: InMemoryController, client: AdminClient
) -> None:
    before = controller.record_count
    channel = rpc.create_sync_channel(server.address)
    try:
        raw = channel.unary_unary("/metakraft.admin.v1.Admin/CreateTopics")
        with pytest.raises(grpc.RpcError) as garbage:
            raw(b"\xff\xff\xff\xff", timeout=5)
        assert garbage.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "does not decode" in (garbage.value.details() or "")

        stub = apb_grpc.AdminStub(channel)
        big = apb.CreateTopicsRequest(topics=[apb.CreatableTopic(name="x" * 100_000)])
        with pytest.raises(grpc.RpcError) as oversized:
            stub.CreateTopics(big, timeout=5)
        assert oversized.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED

        malformed = [
            (stub.DescribeConfigs, apb.DescribeConfigsRequest(resources=[apb.ConfigResource()])),
            (
                stub.AlterPartitionReassignments,
                apb.AlterPartitionReassignmentsRequest(
                    partitions=[
                        apb.ReassignablePartition(topic="t", partition=0, replicas=[1], cancel=True)
                    ]
                ),
            ),
            (
                stub.ElectLeaders,
                apb.ElectLeadersRequest(
                    election_type=apb.ELECTION_TYPE_PREFERRED,
                    all_partitions=True,
                    partitions=[apb.TopicPartition(topic="t")],
                ),
            ),
            (stub.ElectLeaders, apb.ElectLeadersRequest(all_partitions=True)),
            # A read may not ask for state older than offset 0.
            (stub.ListTopics, apb.ListTopicsRequest(header=apb.RequestHeader(min_offset=-1))),
            (
                stub.UpdateFeatures,
                apb.UpdateFeaturesRequest(updates=[apb.FeatureUpdate(name="metadata.version")]),
            ),
            (
                stub.IncrementalAlterConfigs,
                apb.IncrementalAlterConfigsRequest(resources=[apb.AlterConfigsResource()]),
            ),
        ]
        for method, request in malformed:
            with pytest.raises(grpc.RpcError) as refused:
                method(request, timeout=5)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT, request
            assert "malformed" in (refused.value.details() or "")
    finally:
        channel.close()
    assert controller.record_count == before
    _topic(client, "still-serving")


def test_unexpected_exception_is_internal_with_an_error_id(
    client: AdminClient, controller: InMemoryController, caplog: pytest.LogCaptureFixture
) -> None:
    controller.fail_next(RuntimeError("boom"))
    with pytest.raises(RequestFailedError) as failed:
        client.list_topics()
    assert failed.value.code is grpc.StatusCode.INTERNAL
    assert "error id" in failed.value.details
    error_id = failed.value.details.split("error id ")[1].split(",")[0]
    assert any(error_id in r.getMessage() for r in caplog.records)
    assert client.list_topics() == ()


# -- not controller, busy, timeouts: the retry policy -----------------------------------


def test_not_controller_redirects_to_the_named_leader() -> None:
    standby, leader = InMemoryController(cluster_id=CLUSTER), InMemoryController(cluster_id=CLUSTER)
    with serving(leader) as lead, serving(standby) as stand:
        register_brokers(lead.address, [1])
        standby.fail_always(NotControllerError(2, lead.address))
        with AdminClient([stand.address], timeout_ms=5_000) as admin:
            before = standby.record_count
            (result,) = admin.create_topics([CreatableTopic("t", 1, 1)])
            assert result.error.ok
            assert admin.leader_address == lead.address and admin.leader_id == 2
            assert standby.calls == ["CreateTopics"] and standby.record_count == before
            assert [t.name for t in admin.list_topics()] == ["t"]
            assert standby.calls == ["CreateTopics"]  # the client stays on the leader


def test_unknown_leader_walks_the_bootstrap_addresses() -> None:
    standby, leader = InMemoryController(cluster_id=CLUSTER), InMemoryController(cluster_id=CLUSTER)
    with serving(leader) as lead, serving(standby) as stand:
        register_brokers(lead.address, [1])
        standby.fail_always(NotControllerError(None, None))
        bootstrap = [dead_address(), stand.address, lead.address]
        with AdminClient(bootstrap, timeout_ms=5_000, sleep=lambda _: None) as admin:
            (result,) = admin.create_topics([CreatableTopic("t", 1, 1)])
            assert result.error.ok and admin.leader_address == lead.address
            assert leader.calls[-1] == "CreateTopics"


def test_busy_is_retried_for_reads_only(client: AdminClient, controller: InMemoryController) -> None:
    controller.fail_next(ControllerBusyError("queue full"), times=2)
    assert client.list_topics() == ()
    assert controller.calls[-3:] == ["ListTopics"] * 3
    before = controller.record_count
    controller.fail_next(ControllerBusyError("queue full"))
    with pytest.raises(ControllerOverloadedError, match="not applied"):
        client.create_topics([CreatableTopic("t", 1, 1)])
    assert controller.calls[-1] == "CreateTopics" and controller.calls.count("CreateTopics") == 1
    assert controller.record_count == before


def test_a_write_without_an_answer_is_resent_under_its_request_id(
    client: AdminClient, controller: InMemoryController
) -> None:
    controller.fail_next(ControllerTimeoutError("commit took too long"))
    assert client.create_topics([CreatableTopic("t", 1, 1)])[0].error.ok
    assert controller.calls.count("CreateTopics") == 2
    assert client.outcome_unknown_retries == 1
    # Unknown until the deadline: OutcomeUnknownError with the one request id.
    controller.fail_always(ControllerTimeoutError("commit took too long"))
    with AdminClient([client.leader_address or ""], timeout_ms=500) as short:
        with pytest.raises(OutcomeUnknownError) as unknown:
            short.create_topics([CreatableTopic("u", 1, 1)])
        assert unknown.value.request_id == short.last_request_id
    controller.fail_always(None)
    controller.fail_next(ControllerTimeoutError("slow"))
    assert [t.name for t in client.list_topics()] == ["t"]  # a read is simply asked again


def test_no_controller_reachable_is_reported_in_time() -> None:
    with AdminClient([dead_address(), dead_address()], timeout_ms=400) as admin:
        with pytest.raises(ControllerUnreachableError, match="failed to connect"):
            admin.create_topics([CreatableTopic("t", 1, 1)])
        with pytest.raises(ControllerUnreachableError):
            admin.list_topics()


def test_a_write_after_the_leader_went_away_is_sent_to_another_controller() -> None:
    first, second = InMemoryController(cluster_id=CLUSTER), InMemoryController(cluster_id=CLUSTER)
    with serving(second) as other:
        register_brokers(other.address, [1])
        gone = ApiServer(first).start()
        register_brokers(gone.address, [1])
        with AdminClient([gone.address, other.address], timeout_ms=5_000) as admin:
            assert admin.create_topics([CreatableTopic("a", 1, 1)])[0].error.ok
            assert admin.leader_address == gone.address
            gone.stop()
            # Once the client has seen its stream end, a new connection is refused:
            # gRPC never sends the call, so the client may (and does) send it to the
            # next controller. (Before it has seen the end, the write would be
            # reported unknown: test_admin_stream covers a write in flight.)
            wait_until(lambda: not admin.streaming_to(gone.address), 10, "the stream's end")
            assert admin.create_topics([CreatableTopic("b", 1, 1)])[0].error.ok
            assert admin.leader_address == other.address
            assert [t.name for t in second.state.replication.list_topics()] == ["b"]
