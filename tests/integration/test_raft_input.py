"""Raft input hardening against real controller processes, as the attacks were found
from outside: a Raft Fetch from an unknown node (9999) with the right cluster id (which
DescribeCluster gives anyone) and epoch 2^31-1 once made every voter adopt and persist
that epoch, after which no election could succeed, even across restarts. Now it is
refused; the quorum keeps its epoch and elects after the leader dies."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controller.api.client import AdminClient
from controller.metadata import CreatableTopic, ErrorCode
from controller.quorum import raft_service_pb2 as pb
from controller.quorum import raft_service_pb2_grpc as pb_grpc
from controller.rpc import create_sync_channel
from controller.storage.meta_properties import DataDir
from tests.support.controller_processes import ControllerCluster
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

EPOCH_MAX = 2**31 - 1
INTRUDER = 9999


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ControllerCluster]:
    c = ControllerCluster(tmp_path, 3)
    try:
        c.start()
        wait_until(c.active_node, 20.0, "an active controller")
        c.register_brokers([1, 2, 3])
        # A quorum is two of three: the tests call every controller, so each must be
        # listening (one still starting refused a connection in a loaded CI run).
        wait_until(lambda: all(map(accepts, c.addresses.values())), 20.0,
                   "every controller listening")
        yield c
    finally:
        c.close()


def accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
    except OSError:
        return False
    return True


def header(c: ControllerCluster, dst: int, epoch: int) -> pb.Header:
    return pb.Header(cluster_id=c.cluster_id, src=INTRUDER, dst=dst, epoch=epoch)


def call(address: str, method: str, request: object) -> object:
    channel = create_sync_channel(address)
    try:
        return getattr(pb_grpc.RaftStub(channel), method)(request, timeout=5)
    finally:
        channel.close()


def stored_epoch(c: ControllerCluster, node_id: int) -> str:
    return DataDir(c.nodes[node_id].data_dir).quorum_state.read_text()


def test_a_forged_epoch_cannot_wedge_the_quorum(cluster: ControllerCluster) -> None:
    for node_id, address in cluster.addresses.items():
        reply = call(address, "Fetch", pb.FetchRequest(
            header=header(cluster, node_id, EPOCH_MAX), seq=1, fetch_offset=0,
            last_fetched_epoch=0, high_watermark=0, max_wait_ms=0))
        assert reply.error == pb.ERROR_INVALID_REQUEST, reply  # type: ignore[attr-defined]
        assert reply.header.epoch < 10, reply  # type: ignore[attr-defined]
        # Nor may a non-voter make itself leader or depose one.
        begin = call(address, "BeginQuorumEpoch", pb.BeginQuorumEpochRequest(
            header=header(cluster, node_id, 5)))
        assert begin.error == pb.ERROR_NOT_VOTER, begin  # type: ignore[attr-defined]
        assert str(EPOCH_MAX) not in stored_epoch(cluster, node_id)
    # The quorum still fails over and commits: kill -9 the leader, twice.
    for _ in range(2):
        active = wait_until(cluster.active_node, 20.0, "an active controller")
        active.kill()
        wait_until(lambda a=active: (n := cluster.active_node()) is not None and n is not a,
                   20.0, "a new active controller")
        active.start()
    with AdminClient(cluster.bootstrap, timeout_ms=10_000) as admin:
        [result] = admin.create_topics([CreatableTopic("after", 1, 3)])
    assert result.error.code is ErrorCode.NONE
    for node_id in cluster.nodes:
        assert str(EPOCH_MAX) not in stored_epoch(cluster, node_id)


def test_an_observer_fetch_in_a_newer_epoch_is_not_adopted(
        cluster: ControllerCluster) -> None:
    follower = next(n for n in cluster.nodes.values() if n is not cluster.active_node())
    before = stored_epoch(cluster, follower.node_id)
    reply = call(follower.address, "Fetch", pb.FetchRequest(
        header=header(cluster, follower.node_id, 1000), seq=1, fetch_offset=0,
        last_fetched_epoch=0, high_watermark=0, max_wait_ms=0))
    assert reply.error == pb.ERROR_NOT_LEADER, reply  # type: ignore[attr-defined]
    assert stored_epoch(cluster, follower.node_id) == before
    # Undecodable bytes get INVALID_ARGUMENT, not UNKNOWN.
    channel = create_sync_channel(follower.address)
    try:
        raw = channel.unary_unary("/metakraft.raft.v1.Raft/Fetch")
        with pytest.raises(grpc.RpcError) as info:
            raw(b"\xff\xff\xff\xff", timeout=5)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    finally:
        channel.close()


def test_a_broker_cannot_register_with_a_controllers_id(cluster: ControllerCluster) -> None:
    from controller.api import broker_pb2 as bpb
    from controller.api import broker_pb2_grpc as bpb_grpc

    controller_id = min(cluster.nodes)
    active = wait_until(cluster.active_node, 20.0, "an active controller")
    channel = create_sync_channel(active.address)
    try:
        reply = bpb_grpc.BrokerLifecycleStub(channel).RegisterBroker(bpb.RegisterBrokerRequest(
            cluster_id=cluster.cluster_id, broker_id=controller_id, incarnation_id="x",
            listeners=[bpb.Listener(name="PLAINTEXT", host="h", port=9092)]), timeout=5)
    finally:
        channel.close()
    assert reply.error.code == "INVALID_REQUEST", reply
    assert "controller's node id" in reply.error.message


def test_random_bytes_on_fetch_stream_get_one_warning_and_no_error(
        cluster: ControllerCluster) -> None:
    active = wait_until(cluster.active_node, 20.0, "an active controller")
    before = len(active.log_text())
    channel = grpc.insecure_channel(active.address)
    try:
        stream = channel.stream_stream(f"/{pb.DESCRIPTOR.package}.Raft/FetchStream",
                                       request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
        # Twice: once the second call's line is there, the first call's handler has
        # logged all it ever will (one event loop serves both, in order).
        for _ in range(2):
            with pytest.raises(grpc.RpcError) as info:
                list(stream(iter([bytes(range(7, 71))]), timeout=5))
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore
    finally:
        channel.close()

    def warnings() -> list[str]:
        return [line for line in active.log_text()[before:].splitlines()
                if "event=undecodable_request" in line]

    wait_until(lambda: len(warnings()) == 2, 5.0, "a warning per bad stream")
    assert all("level=warning" in line for line in warnings())
    assert "level=error" not in active.log_text()[before:]
