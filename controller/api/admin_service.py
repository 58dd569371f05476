"""The Admin gRPC service, served from the table of RPCs (`controller.api.rpcs`).

For each request: decode (malformed → INVALID_ARGUMENT), find the caller (the
principal from its certificate), redirect what a standby would not serve
(FAILED_PRECONDITION with the leader, before authorizing: a standby's ACLs may lag),
authorize it by the RPC's rule (PERMISSION_DENIED, nothing written), then the RPC's
operation through the facade (`rpcs.handle`), converted back. The status-code contract is
in admin.proto's header; ``handlers.guarded`` implements it. ``add_api_services``
registers Admin, BrokerLifecycle, health and reflection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from grpc import aio
from grpc_health.v1 import _async as health_async

from controller import rpc
from controller.api import admin_pb2 as apb
from controller.api import rpcs
from controller.api.audit_log import ApiMetrics, RequestAudit
from controller.api.authorization import Call
from controller.api.broker_service import BrokerLifecycleService
from controller.api.convert import MalformedRequestError
from controller.api.handlers import guarded, register_service, servicer_handlers
from controller.api.rpcs import ADMIN_RPCS, AdminRpc
from controller.api.seam import ControllerFacade, Origin, ReadConsistency
from controller.api.stream import Context, RawHandler
from controller.security.access import OPEN, Access


def admin_handler(spec: AdminRpc, facade: ControllerFacade, access: Access,
                  metrics: ApiMetrics | None = None) -> RawHandler:
    """The raw-bytes handler of one Admin RPC (a unary call or a stream item)."""

    async def handle(raw: bytes, context: Context) -> Any:
        request = await rpc.decode_request(spec.name, spec.request_class, raw, context)
        audit = RequestAudit(spec.name, spec.write, request, metrics)

        async def body() -> Any:
            caller = access.caller(context)
            header = getattr(request, "header", None)
            origin = Origin(caller.principal, caller.address,
                            header.request_id if header is not None else "",
                            _consistency(header), _min_offset(header))
            audit.principal, audit.request_id = origin.principal, origin.request_id
            if not spec.local:
                facade.check_serves(write=spec.write, consistency=origin.consistency)
            return await rpcs.handle(spec, facade, request, Call(caller, access, origin))

        return await guarded(context, spec.name, body, audit)

    return handle


def _consistency(header: apb.RequestHeader | None) -> ReadConsistency:
    value = 0 if header is None else header.consistency
    if value == apb.READ_CONSISTENCY_LINEARIZABLE:
        return ReadConsistency.LINEARIZABLE
    if value == apb.READ_CONSISTENCY_STALE:
        return ReadConsistency.STALE
    raise MalformedRequestError(f"unknown read consistency {value} (0: linearizable, 1: stale)")


def _min_offset(header: apb.RequestHeader | None) -> int:
    value = 0 if header is None else header.min_offset
    if value < 0:
        raise MalformedRequestError(f"min_offset {value} is negative (0: any offset)")
    return value


def add_api_services(
    server: aio.Server,
    facade: ControllerFacade,
    *,
    access: Access = OPEN,
    other_service_names: Sequence[str] = (),
    metrics: ApiMetrics | None = None,
    closing: asyncio.Event | None = None,
    watch: Callable[[bytes, Any], Awaitable[None]] | None = None,
) -> health_async.HealthServicer:
    """Register Admin and BrokerLifecycle on ``server`` (made by ``rpc.create_server``,
    whose ``RpcLimits`` bound message sizes), plus health and reflection. `access`
    authenticates and authorizes every call (`OPEN`: everyone may do everything).

    ``other_service_names``: services registered on the same server by others (the
    Raft service), so reflection lists them too; reflection and health can be added
    to a server only once, so this call does it for everyone. `metrics`: count
    requests per method; `closing`: set it before stopping the server, so open Admin
    streams end normally (see `StreamMultiplexer`). `watch`: the Watch handler
    (`controller.watch.service.WatchService.serve`; UNIMPLEMENTED without one).
    """
    broker = BrokerLifecycleService(facade, access)
    names = [
        register_service(
            server,
            apb.DESCRIPTOR.services_by_name["Admin"],
            {spec.name: admin_handler(spec, facade, access, metrics) for spec in ADMIN_RPCS},
            stream_method="Stream",
            closing=closing,
            server_streams=None if watch is None else {"Watch": watch},
        ),
        register_service(server, BrokerLifecycleService.DESCRIPTOR,
                         servicer_handlers(BrokerLifecycleService.DESCRIPTOR, broker)),
    ]
    return rpc.add_health_and_reflection(server, [*names, *other_service_names])
