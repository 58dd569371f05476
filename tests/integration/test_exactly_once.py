"""Exactly-once admin writes on real controller processes: a write whose answer was
lost is retried with the same request id after the leader died, after snapshots and
after every controller restarted, and is applied once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controller.api import admin_pb2 as apb
from controller.api import admin_pb2_grpc as apb_grpc
from controller.api.client import AdminClient
from controller.api.rpcs import ADMIN_RPCS_BY_NAME
from controller.api.seam import Args
from controller.metadata import CreatableTopic, ErrorCode
from controller.rpc import create_sync_channel
from tests.support.controller_processes import ControllerCluster
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ControllerCluster]:
    # Small snapshots: the table must survive being loaded from one.
    c = ControllerCluster(tmp_path, 3, snapshot_interval_bytes=4096)
    try:
        c.start()
        yield c
    finally:
        c.close()


def _create(cluster: ControllerCluster, name: str, request_id: str) -> apb.CreateTopicsResponse:
    """CreateTopics as any client sends it, with our own request id, to whichever
    controller is active (retried until one answers)."""
    request = apb.CreateTopicsRequest(header=apb.RequestHeader(request_id=request_id),
                                      topics=[apb.CreatableTopic(name=name, num_partitions=1,
                                                                 replication_factor=1)])

    def attempt() -> apb.CreateTopicsResponse | None:
        for address in cluster.bootstrap:
            channel = create_sync_channel(address)
            try:
                response: apb.CreateTopicsResponse = apb_grpc.AdminStub(channel).CreateTopics(
                    request, timeout=5)
                return response
            except grpc.RpcError:
                continue
            finally:
                channel.close()
        return None

    return wait_until(attempt, 30, f"an answer to {request_id}")


def _code(response: apb.CreateTopicsResponse) -> ErrorCode:
    (result,) = ADMIN_RPCS_BY_NAME["CreateTopics"].decode_answer(response, Args())
    return result.error.code  # type: ignore[no-any-return]


def test_a_create_whose_answer_was_lost_is_applied_once_across_failover_and_restarts(
        cluster: ControllerCluster) -> None:
    leader = wait_until(cluster.active_node, 30, "an active controller")
    cluster.register_brokers([1])
    first = _create(cluster, "once", "lost-answer-1")
    assert _code(first) is ErrorCode.NONE
    # The answer is "lost": the client never saw it. The leader dies.
    leader.kill()
    with AdminClient(cluster.bootstrap, timeout_ms=30_000) as admin:
        for i in range(40):  # enough records for every live controller to snapshot
            assert admin.create_topics([CreatableTopic(f"filler{i}", 1, 1)])[0].error.ok
    # The retry after the failover: the first answer (run again, it would have been
    # TOPIC_ALREADY_EXISTS), from the table the next leader replicated.
    again = _create(cluster, "once", "lost-answer-1")
    assert again == first
    # Every controller restarts (from its snapshot and log); the retry still knows.
    cluster.close()
    for node in cluster.nodes.values():
        assert "event=snapshot_written" in node.log_text() or node is leader
        node.start()
    assert _create(cluster, "once", "lost-answer-1") == first
    # A new request id is a new request.
    assert _code(_create(cluster, "once", "another-id")) is ErrorCode.TOPIC_ALREADY_EXISTS
    with AdminClient(cluster.bootstrap, timeout_ms=30_000) as admin:
        assert sum(1 for t in admin.list_topics() if t.name == "once") == 1
