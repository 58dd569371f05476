"""The PartitionData gRPC service (data.proto) on every broker's listener.

Thin: requests are decoded by `rpc.add_decoding_service` (undecodable bytes get
INVALID_ARGUMENT), the caller's principal comes from its client certificate as on
the admin API, the broker's authorizer (its `[authorizer]` table, over the ACLs of
the committed metadata) decides, and the manager answers. Who may do what, as
Kafka's: Produce needs WRITE on the topic, a consumer's Fetch READ, ListOffsets
DESCRIBE, a follower's Fetch CLUSTER_ACTION on the cluster and a certificate that
names that broker (`tls.broker_id_pattern`, as the controllers bind it). Refusals are answers
with a DataError code (TOPIC_AUTHORIZATION_FAILED here) and a message, never
gRPC failures, so a client can follow a leader and tell a denial from a fault.
"""

from __future__ import annotations

from typing import Any

from grpc import aio

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.manager import ReplicaManager
from controller import rpc
from controller.log import get_logger
from controller.security.access import (
    Access,
    Caller,
    PermissionDeniedError,
    UnauthenticatedError,
    cluster_action,
    topic_action,
)
from controller.security.acl import Operation
from controller.security.authorizer import Action

SERVICE_NAME = "metakraft.data.v1.PartitionData"
log = get_logger("metakraft.broker.data")


class _Servicer:
    def __init__(self, manager: ReplicaManager, access: Access) -> None:
        self._manager = manager
        self._access = access

    def _denial(self, context: Any, action: Action) -> tuple[Caller | None, str | None]:
        """(the caller, None) if it may do `action`; else (it or None, why not)."""
        try:
            caller = self._access.caller(context)
        except UnauthenticatedError as exc:
            return None, f"unauthenticated: {exc}"
        if self._access.allowed(caller, action):
            return caller, None
        log.info("data_denied", principal=caller.principal, action=action.describe(),
                 peer=caller.address)
        return caller, f"{caller.principal} is not allowed {action.describe()}"

    async def Produce(self, request: dpb.ProduceRequest, context: Any) -> dpb.ProduceResponse:
        caller, denied = self._denial(context, topic_action(Operation.WRITE, request.topic))
        if denied is not None or caller is None:
            return dpb.ProduceResponse(error=dpb.TOPIC_AUTHORIZATION_FAILED,
                                       message=denied or "", base_offset=-1)
        return await self._manager.produce(request, caller.principal, caller.address)

    async def Fetch(self, request: dpb.FetchRequest, context: Any) -> dpb.FetchResponse:
        if request.replica_id >= 0:
            caller, denied = self._denial(context, cluster_action(Operation.CLUSTER_ACTION))
            if denied is None and caller is not None:
                try:  # a broker fetches only as itself
                    self._access.require_broker(caller, request.replica_id)
                except PermissionDeniedError as exc:
                    denied = str(exc)
            if denied is not None:
                return dpb.FetchResponse(error=dpb.TOPIC_AUTHORIZATION_FAILED, message=denied)
            return await self._manager.fetch(request)
        refused: list[dpb.FetchedPartition] = []
        allowed = dpb.FetchRequest()
        allowed.CopyFrom(request)
        del allowed.partitions[:]
        for p in request.partitions:
            topic = p.topic or self._manager.topic_name(p.topic_id)
            _, denied = self._denial(context, topic_action(Operation.READ, topic))
            if denied is None:
                allowed.partitions.append(p)
            else:
                refused.append(dpb.FetchedPartition(
                    topic=p.topic, topic_id=p.topic_id, partition=p.partition,
                    error=dpb.TOPIC_AUTHORIZATION_FAILED, message=denied))
        if not allowed.partitions:
            return dpb.FetchResponse(partitions=refused)
        response = await self._manager.fetch(allowed)
        response.partitions.extend(refused)
        return response

    async def ListOffsets(self, request: dpb.ListOffsetsRequest,
                          context: Any) -> dpb.ListOffsetsResponse:
        _, denied = self._denial(context, topic_action(Operation.DESCRIBE, request.topic))
        if denied is not None:
            return dpb.ListOffsetsResponse(error=dpb.TOPIC_AUTHORIZATION_FAILED, message=denied)
        return self._manager.list_offsets(request)


def add_data_service(server: aio.Server, manager: ReplicaManager,
                     access: Access | None = None) -> str:
    rpc.add_decoding_service(server, dpb.DESCRIPTOR.services_by_name["PartitionData"],
                             _Servicer(manager, access or Access()))
    return SERVICE_NAME
