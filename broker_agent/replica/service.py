"""The PartitionData gRPC service (data.proto) on every broker's listener.

Thin: requests are decoded by `rpc.add_decoding_service` (undecodable bytes get
INVALID_ARGUMENT), the caller's principal comes from its client certificate as on
the admin API, and the manager answers. Refusals are answers with a DataError
code and a message, never gRPC failures, so a client can follow a leader.
"""

from __future__ import annotations

from typing import Any

from grpc import aio

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.manager import ReplicaManager
from controller import rpc
from controller.security.access import Access, UnauthenticatedError

SERVICE_NAME = "metakraft.data.v1.PartitionData"


class _Servicer:
    def __init__(self, manager: ReplicaManager, access: Access) -> None:
        self._manager = manager
        self._access = access

    def _principal(self, context: Any) -> tuple[str, str]:
        try:
            caller = self._access.caller(context)
        except UnauthenticatedError:
            return "", context.peer() or ""
        return caller.principal, caller.address

    async def Produce(self, request: dpb.ProduceRequest,
                      context: Any) -> dpb.ProduceResponse:
        principal, address = self._principal(context)
        return await self._manager.produce(request, principal, address)

    async def Fetch(self, request: dpb.FetchRequest,
                    context: Any) -> dpb.FetchResponse:
        return await self._manager.fetch(request)

    async def ListOffsets(self, request: dpb.ListOffsetsRequest,
                          context: Any) -> dpb.ListOffsetsResponse:
        return self._manager.list_offsets(request)


def add_data_service(server: aio.Server, manager: ReplicaManager,
                     access: Access | None = None) -> str:
    rpc.add_decoding_service(server, dpb.DESCRIPTOR.services_by_name["PartitionData"],
                             _Servicer(manager, access or Access()))
    return SERVICE_NAME
