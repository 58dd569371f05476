"""The BrokerLifecycle gRPC service: broker registration, heartbeats, and partition
leaders' ISR reports (AlterPartition).

The cluster id is checked here, before the controller sees the request: a broker
formatted for another cluster gets INCONSISTENT_CLUSTER_ID in the response (it is
the broker's configuration that is wrong, not the transport), and nothing is
queued. Everything else (stale epochs, duplicate live incarnations) is the cluster
manager's answer. Every call needs CLUSTER_ACTION on the cluster (brokers' certificates
get it by an ACL or as super users), and a principal that names a broker may call
only for that broker (`Access.require_broker`); the batch origin is the broker's
principal.
"""

from __future__ import annotations

from google.protobuf.descriptor import ServiceDescriptor

from controller.api import broker_convert as bcv
from controller.api import broker_pb2 as bpb
from controller.api.handlers import guarded
from controller.api.seam import ControllerFacade, Origin
from controller.api.stream import Context
from controller.metadata import ApiError, ErrorCode
from controller.security.access import Access


def _wrong_cluster(facade: ControllerFacade, broker_id: int, cluster_id: str) -> ApiError | None:
    if cluster_id == facade.cluster_id:
        return None
    return ApiError(
        ErrorCode.INCONSISTENT_CLUSTER_ID,
        f"broker {broker_id} belongs to cluster {cluster_id!r} but this controller serves "
        f"cluster {facade.cluster_id!r}; check the broker's meta.properties and its "
        "controller addresses",
    )


class BrokerLifecycleService:
    DESCRIPTOR: ServiceDescriptor = bpb.DESCRIPTOR.services_by_name["BrokerLifecycle"]

    def __init__(self, facade: ControllerFacade, access: Access) -> None:
        self._facade = facade
        self._access = access

    def _origin(self, context: Context, broker_id: int) -> Origin:
        """The authorized caller as the batch origin (CLUSTER_ACTION, and that its
        principal may act as `broker_id`, checked here)."""
        caller = self._access.caller(context)
        self._access.require_broker(caller, broker_id)
        return Origin(principal=caller.principal, client_address=caller.address)

    async def RegisterBroker(
        self, request: bpb.RegisterBrokerRequest, context: Context
    ) -> bpb.RegisterBrokerResponse:
        async def body() -> bpb.RegisterBrokerResponse:
            origin = self._origin(context, request.broker_id)
            wrong = _wrong_cluster(self._facade, request.broker_id, request.cluster_id)
            if wrong is not None:
                return bpb.RegisterBrokerResponse(
                    error=bcv.broker_error_to_pb(wrong), broker_epoch=-1
                )
            registration = bcv.registration_request_from_pb(request)
            reply = await self._facade.register_broker(
                registration, origin=origin
            )
            return bcv.registration_reply_to_pb(reply)

        return await guarded(context, "RegisterBroker", body)

    async def BrokerHeartbeat(
        self, request: bpb.BrokerHeartbeatRequest, context: Context
    ) -> bpb.BrokerHeartbeatResponse:
        async def body() -> bpb.BrokerHeartbeatResponse:
            origin = self._origin(context, request.broker_id)
            wrong = _wrong_cluster(self._facade, request.broker_id, request.cluster_id)
            if wrong is not None:
                return bpb.BrokerHeartbeatResponse(
                    error=bcv.broker_error_to_pb(wrong), broker_epoch=-1, is_fenced=True
                )
            heartbeat = bcv.heartbeat_request_from_pb(request)
            reply = await self._facade.broker_heartbeat(
                heartbeat, origin=origin
            )
            return bcv.heartbeat_reply_to_pb(reply, request.broker_epoch)

        return await guarded(context, "BrokerHeartbeat", body)

    async def AlterPartition(
        self, request: bpb.AlterPartitionRequest, context: Context
    ) -> bpb.AlterPartitionResponse:
        async def body() -> bpb.AlterPartitionResponse:
            origin = self._origin(context, request.broker_id)
            wrong = _wrong_cluster(self._facade, request.broker_id, request.cluster_id)
            if wrong is not None:
                return bpb.AlterPartitionResponse(error=bcv.broker_error_to_pb(wrong))
            results = await self._facade.alter_partition(
                bcv.alter_partition_from_pb(request), origin=origin)
            return bcv.alter_partition_results_to_pb(results)

        return await guarded(context, "AlterPartition", body)
