"""The BrokerStatus gRPC service (status.proto) and its client-side helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import grpc
from grpc import aio

from broker_agent import status_pb2 as spb
from broker_agent import status_pb2_grpc as spb_grpc
from broker_agent.lifecycle_machine import LifecycleState
from broker_agent.reconciler import LocalReplica, ReplicaRole
from controller import rpc
from controller.security.tls import TlsCredentials

SERVICE_NAME = "metakraft.broker_agent.v1.BrokerStatus"


@attrs.frozen
class BrokerStatusView:
    """A snapshot of one broker's state, for the RPC."""

    broker_id: int
    state: LifecycleState
    broker_epoch: int
    metadata_offset: int
    replicas: tuple[LocalReplica, ...]
    controller_id: int | None
    incarnation_id: str


def status_to_pb(view: BrokerStatusView) -> spb.GetStatusResponse:
    return spb.GetStatusResponse(
        broker_id=view.broker_id,
        state=view.state.value,  # type: ignore[arg-type]  # enum values = wire values
        broker_epoch=view.broker_epoch,
        metadata_offset=view.metadata_offset,
        replicas=[spb.LocalReplica(
            topic=r.topic, topic_id=r.topic_id, partition=r.partition,
            role=spb.REPLICA_ROLE_LEADER if r.role is ReplicaRole.LEADER
            else spb.REPLICA_ROLE_FOLLOWER,
            leader=r.leader, leader_epoch=r.leader_epoch, partition_epoch=r.partition_epoch)
            for r in sorted(view.replicas, key=lambda r: (r.topic, r.partition))],
        controller_id=-1 if view.controller_id is None else view.controller_id,
        incarnation_id=view.incarnation_id)


def status_to_dict(msg: spb.GetStatusResponse) -> dict[str, Any]:
    """JSON-ready form (what `metakraft broker-status --output json` prints)."""
    return {
        "broker_id": msg.broker_id,
        "state": spb.LifecycleState.Name(msg.state).removeprefix("LIFECYCLE_STATE_"),
        "broker_epoch": msg.broker_epoch,
        "metadata_offset": msg.metadata_offset,
        "controller_id": msg.controller_id,
        "incarnation_id": msg.incarnation_id,
        "replicas": [{
            "topic": r.topic, "topic_id": r.topic_id, "partition": r.partition,
            "role": spb.ReplicaRole.Name(r.role).removeprefix("REPLICA_ROLE_"),
            "leader": r.leader, "leader_epoch": r.leader_epoch,
            "partition_epoch": r.partition_epoch} for r in msg.replicas],
    }


class _Servicer(spb_grpc.BrokerStatusServicer):
    def __init__(self, view: Callable[[], BrokerStatusView]) -> None:
        self._view = view

    async def GetStatus(self, request: spb.GetStatusRequest,
                        context: aio.ServicerContext[Any, Any]) -> spb.GetStatusResponse:
        return status_to_pb(self._view())


def add_status_service(server: aio.Server, view: Callable[[], BrokerStatusView]) -> str:
    rpc.add_decoding_service(server, spb.DESCRIPTOR.services_by_name["BrokerStatus"],
                             _Servicer(view))
    return SERVICE_NAME


def get_status(address: str, timeout_s: float = 5.0,
               tls: TlsCredentials | None = None) -> spb.GetStatusResponse:
    """Blocking call (the CLI, tests). Raises grpc.RpcError."""
    channel = rpc.create_sync_channel(address, tls=tls)
    try:
        stub = spb_grpc.BrokerStatusStub(channel)
        reply: spb.GetStatusResponse = stub.GetStatus(spb.GetStatusRequest(), timeout=timeout_s)
        return reply
    finally:
        channel.close()


__all__ = ["SERVICE_NAME", "BrokerStatusView", "add_status_service", "get_status", "grpc",
           "status_to_dict", "status_to_pb"]
