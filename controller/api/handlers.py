"""What every API handler shares: request decoding, the caller, and the mapping of
the seam's errors to gRPC status codes (the contract in admin.proto's header).

Services are registered from their descriptors with raw-bytes deserializers, so a
request that does not decode is answered INVALID_ARGUMENT by us, with the parse
error, instead of by gRPC's generic deserialization failure.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import message as pb_message
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from grpc import aio

from controller import rpc
from controller.api.audit_log import RequestAudit
from controller.api.convert import MalformedRequestError
from controller.api.seam import (
    HIGH_WATERMARK,
    READ_OFFSET,
    BehindError,
    ControllerBusyError,
    ControllerTimeoutError,
    NotControllerError,
    RequestIdReusedError,
    ResultNotKeptError,
)
from controller.api.stream import Context, RawHandler, StreamMultiplexer
from controller.log import get_logger
from controller.security.access import PermissionDeniedError, UnauthenticatedError

log = get_logger(__name__)

# Trailing metadata of a FAILED_PRECONDITION "not controller" answer.
LEADER_ID_KEY = "x-metakraft-leader-id"
LEADER_ADDRESS_KEY = "x-metakraft-leader-address"
# Trailing metadata of an UNAVAILABLE "busy" answer: the request was not accepted.
BUSY_KEY = "x-metakraft-busy"
# Trailing metadata of a successful read: the committed end offset it read at.
READ_OFFSET_KEY = "x-metakraft-read-offset"
# A stale read's answer: the Raft high watermark the controller knew.
HIGH_WATERMARK_KEY = "x-metakraft-high-watermark"
# A read refused as BEHIND (its min_offset not applied in time): how far this
# controller had applied.
APPLIED_OFFSET_KEY = "x-metakraft-applied-offset"

_Resp = TypeVar("_Resp", bound=pb_message.Message)


async def guarded(context: Context, method: str, body: Callable[[], Awaitable[_Resp]],
                  audit: RequestAudit | None = None) -> _Resp:
    """Run one handler body; map every failure to a status. Never lets an exception
    escape as a crash: an unexpected one is logged with an id and answered INTERNAL.
    `audit`, if given, is told the outcome (logged and counted)."""
    trailing: tuple[tuple[str, str], ...] = ()
    READ_OFFSET.set(None)  # this task's own: set again by a read the body makes
    try:
        response = await body()
        read_offset = READ_OFFSET.get()
        if read_offset is not None:
            high_watermark = HIGH_WATERMARK.get()
            context.set_trailing_metadata(((READ_OFFSET_KEY, str(read_offset)),) + (
                () if high_watermark is None else
                ((HIGH_WATERMARK_KEY, str(high_watermark)),)))
        if audit is not None:
            audit.finish("OK", response)
        return response
    except MalformedRequestError as exc:
        code, details = grpc.StatusCode.INVALID_ARGUMENT, f"malformed {method} request: {exc}"
    except PermissionDeniedError as exc:
        log.info("access_denied", method=method, principal=exc.principal, peer=context.peer(),
                 operation=exc.action.operation.name,
                 resource=f"{exc.action.resource_type.name}:{exc.action.resource_name}")
        code, details = grpc.StatusCode.PERMISSION_DENIED, f"{method}: {exc}"
    except UnauthenticatedError as exc:
        code, details = grpc.StatusCode.UNAUTHENTICATED, f"{method}: {exc}"
    except NotControllerError as exc:
        code, details = grpc.StatusCode.FAILED_PRECONDITION, f"NOT_CONTROLLER: {exc}"
        if exc.leader_id is not None:
            trailing += ((LEADER_ID_KEY, str(exc.leader_id)),)
        if exc.leader_address:
            trailing += ((LEADER_ADDRESS_KEY, exc.leader_address),)
    except RequestIdReusedError as exc:
        code, details = grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {exc}"
    except ResultNotKeptError as exc:
        code, details = grpc.StatusCode.ALREADY_EXISTS, f"{method}: {exc}"
    except ControllerBusyError as exc:
        code = grpc.StatusCode.UNAVAILABLE
        details = f"CONTROLLER_BUSY: the controller is overloaded, retry later ({exc})"
        trailing = ((BUSY_KEY, "true"),)
    except BehindError as exc:
        code = grpc.StatusCode.UNAVAILABLE
        details = f"BEHIND: {exc}; retry, or read at another controller"
        trailing = ((APPLIED_OFFSET_KEY, str(exc.applied_offset)),)
    except ControllerTimeoutError as exc:
        code = grpc.StatusCode.DEADLINE_EXCEEDED
        details = (
            f"the controller did not answer {method} in time ({exc}); a write may still be "
            "applied: check its effect before retrying"
        )
    except Exception:
        error_id = uuid.uuid4().hex[:12]
        log.exception("internal_error", error_id=error_id, method=method)
        code = grpc.StatusCode.INTERNAL
        details = f"internal error in {method} (error id {error_id}, see the controller log)"
    if audit is not None:
        audit.finish(code.name, None)
    await context.abort(code, details, trailing_metadata=trailing)


def decoding(
    method: str, request_class: type[pb_message.Message], impl: Callable[..., Awaitable[Any]]
) -> RawHandler:
    """``impl`` behind our own decoding of the raw request (a unary call, or one item
    of the multiplexed stream: the same code answers both)."""

    async def handle(raw: bytes, context: Context) -> Any:
        return await impl(await rpc.decode_request(method, request_class, raw, context), context)

    return handle


def _serialize(msg: pb_message.Message) -> bytes:
    return msg.SerializeToString()


def register_service(
    server: aio.Server,
    service: ServiceDescriptor,
    unary: dict[str, RawHandler],
    *,
    stream_method: str | None = None,
    closing: asyncio.Event | None = None,
    server_streams: dict[str, Callable[[bytes, Any], Awaitable[None]]] | None = None,
) -> str:
    """Register `unary` (method name -> handler of raw request bytes, see `decoding`)
    for `service`; every unary method of the service must have one (a method without
    a handler, hence without its authorization, is a bug found at start).
    `stream_method` names the bidi-streaming method that multiplexes them all
    (``controller.api.stream``; `closing` ends its open streams before a stop).
    `server_streams`: server-streaming methods (name -> handler of the raw request
    that writes its responses, serialized, on the context). Returns the service's full name."""
    expected = {m.name for m in service.methods
                if not (m.client_streaming or m.server_streaming)}
    assert set(unary) == expected, (sorted(expected ^ set(unary)), service.full_name)
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        name: grpc.unary_unary_rpc_method_handler(
            handle,
            request_deserializer=None,  # raw bytes: decoded by `decoding`
            response_serializer=_serialize,
        )
        for name, handle in unary.items()
    }
    if stream_method is not None:
        assert service.methods_by_name[stream_method].client_streaming, stream_method
        handlers[stream_method] = grpc.stream_stream_rpc_method_handler(
            StreamMultiplexer(unary, closing).serve,
            request_deserializer=None,  # raw bytes: a bad message gets our own status
            response_serializer=_serialize,
        )
    for name, serve in (server_streams or {}).items():
        assert service.methods_by_name[name].server_streaming, name
        handlers[name] = grpc.unary_stream_rpc_method_handler(
            serve, request_deserializer=None, response_serializer=None)
    generic = grpc.method_handlers_generic_handler(service.full_name, handlers)
    server.add_generic_rpc_handlers((generic,))
    return service.full_name


def servicer_handlers(service: ServiceDescriptor, servicer: object) -> dict[str, RawHandler]:
    """`decoding` handlers for the methods of `servicer` named as in the .proto."""
    return {method.name: decoding(method.name,
                                  message_factory.GetMessageClass(method.input_type),
                                  getattr(servicer, method.name))
            for method in service.methods
            if not (method.client_streaming or method.server_streaming)}
