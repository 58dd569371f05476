"""Every gRPC server and channel in metakraft is created here, never ad hoc.

One place that puts limits on message sizes and keepalives, and one place that
decides between mutual TLS (`TlsCredentials`: the server requires a client
certificate from its CA, the client verifies the server's) and plaintext (`None`,
only when a config says so explicitly).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import attrs
import grpc
from google.protobuf import message as pb_message
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from grpc import aio
from grpc_health.v1 import _async as health_async
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from controller.log import get_logger
from controller.security.tls import TlsCredentials

# Fetch responses carry up to a few batches of at most 8 MiB each; snapshot chunks are
# smaller. Anything larger than this is refused by gRPC with RESOURCE_EXHAUSTED.
DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024


@attrs.frozen
class RpcLimits:
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    keepalive_time_ms: int = 10_000
    keepalive_timeout_ms: int = 5_000

    def __attrs_post_init__(self) -> None:
        assert self.max_message_bytes > 0
        assert self.keepalive_time_ms > 0 and self.keepalive_timeout_ms > 0

    def channel_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            # Reconnect quickly after a peer restarts: failover time depends on it.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1_000),
        ]

    def server_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", self.keepalive_time_ms // 2),
            ("grpc.so_reuseport", 0),
        ]


def create_server(limits: RpcLimits = RpcLimits()) -> aio.Server:
    """A grpc.aio server with our limits; `bind` it to an address."""
    return aio.server(options=limits.server_options())


def bind(server: aio.Server, address: str, tls: TlsCredentials | None) -> int:
    """Bind `address` (host:port, port 0 = pick a free one) with mutual TLS, or
    plaintext when `tls` is None; returns the bound port."""
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        credentials = grpc.ssl_server_credentials(
            [(tls.key_pem, tls.cert_pem)], root_certificates=tls.ca_pem,
            require_client_auth=True)
        port = server.add_secure_port(address, credentials)
    if port == 0:
        raise OSError(f"could not bind gRPC server to {address}")
    return port


def _channel_credentials(tls: TlsCredentials) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(tls.ca_pem, tls.key_pem, tls.cert_pem)


def create_channel(target: str, limits: RpcLimits = RpcLimits(),
                   tls: TlsCredentials | None = None) -> aio.Channel:
    """A grpc.aio channel to `target` (host:port) with our limits."""
    if tls is None:
        return aio.insecure_channel(target, options=limits.channel_options())
    return aio.secure_channel(target, _channel_credentials(tls), options=limits.channel_options())


def create_sync_channel(target: str, limits: RpcLimits = RpcLimits(),
                        tls: TlsCredentials | None = None) -> grpc.Channel:
    """A blocking channel, for the CLI and tests that do not run an event loop."""
    if tls is None:
        return grpc.insecure_channel(target, options=limits.channel_options())
    return grpc.secure_channel(target, _channel_credentials(tls),
                               options=limits.channel_options())


log = get_logger("metakraft.rpc")


async def decode_request(method: str, request_class: type[pb_message.Message], raw: bytes,
                         context: Any) -> Any:
    """`raw` decoded as `request_class`; bytes that do not decode end the call with
    INVALID_ARGUMENT and one warning (no traceback: bad input from a client is not a
    server error). Every service decodes its requests through here."""
    try:
        return request_class.FromString(raw)
    except pb_message.DecodeError as exc:
        log.warning("undecodable_request", method=method, peer=context.peer(), error=str(exc))
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"malformed {method.rpartition('/')[2]} request: the message "
                            f"does not decode ({exc})")
        raise  # abort raises; this keeps the type checker sure of it


def add_decoding_service(server: aio.Server, service: ServiceDescriptor,
                         servicer: object) -> str:
    """Register `servicer` (methods named as in the .proto) for every method of
    `service`, decoding the requests ourselves: undecodable bytes get INVALID_ARGUMENT
    and one log line, where gRPC's own deserializer answers UNKNOWN with the Python
    exception text and logs a traceback per request. Returns the service's name."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        request_class = message_factory.GetMessageClass(method.input_type)
        impl = getattr(servicer, method.name)
        name, full = method.name, f"{service.full_name}/{method.name}"
        if method.client_streaming:
            handlers[name] = _stream_in_handler(full, request_class, impl,
                                                method.server_streaming)
        elif method.server_streaming:
            handlers[name] = grpc.unary_stream_rpc_method_handler(
                _unary_stream(full, request_class, impl), request_deserializer=None,
                response_serializer=_serialize)
        else:
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                _unary_unary(full, request_class, impl), request_deserializer=None,
                response_serializer=_serialize)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))
    return service.full_name


def _serialize(message: pb_message.Message) -> bytes:
    return message.SerializeToString()


def _unary_unary(method: str, request_class: type[pb_message.Message],
                 impl: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handle(raw: bytes, context: Any) -> Any:
        return await impl(await decode_request(method, request_class, raw, context), context)

    return handle


def _unary_stream(method: str, request_class: type[pb_message.Message],
                  impl: Callable[..., Any]) -> Callable[..., Any]:
    if not inspect.isasyncgenfunction(impl):
        # A handler that answers with `context.write` (grpc_health's Watch): the
        # wrapper must not yield, gRPC refuses a mix of the two.
        async def writing(raw: bytes, context: Any) -> None:
            await impl(await decode_request(method, request_class, raw, context), context)

        return writing

    async def handle(raw: bytes, context: Any) -> AsyncIterator[Any]:
        request = await decode_request(method, request_class, raw, context)
        async for item in impl(request, context):
            yield item

    return handle


def _stream_in_handler(method: str, request_class: type[pb_message.Message],
                       impl: Callable[..., Any], server_streaming: bool
                       ) -> grpc.RpcMethodHandler[Any, Any]:
    def decoded(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async def each() -> AsyncIterator[Any]:
            async for raw in requests:
                yield await decode_request(method, request_class, raw, context)
        return each()

    if server_streaming:
        async def stream(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
            async for item in impl(decoded(requests, context), context):
                yield item

        return grpc.stream_stream_rpc_method_handler(stream, request_deserializer=None,
                                                     response_serializer=_serialize)

    async def unary(requests: AsyncIterator[bytes], context: Any) -> Any:
        return await impl(decoded(requests, context), context)

    return grpc.stream_unary_rpc_method_handler(unary, request_deserializer=None,
                                                response_serializer=_serialize)


def add_health_and_reflection(
    server: aio.Server, service_names: Sequence[str]
) -> health_async.HealthServicer:
    """Register grpc.health.v1 and server reflection; every service starts SERVING."""
    health_servicer = health_async.HealthServicer()
    # The async servicer's `set` is a coroutine and this runs before the loop serves;
    # with no watcher yet, writing the status table is all `set` would do.
    for name in service_names:
        health_servicer._server_status[name] = health_pb2.HealthCheckResponse.SERVING
    add_decoding_service(server, health_pb2.DESCRIPTOR.services_by_name["Health"],
                         health_servicer)
    names = [*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME]
    reflection.enable_server_reflection(names, server)
    return health_servicer


SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health_statuses(address: str, tls: TlsCredentials | None, services: Sequence[str],
                    timeout_ms: int = 2_000) -> dict[str, str]:
    """What grpc.health.v1 at `address` says of each of `services` ("": the whole
    server), over one channel: SERVING, NOT_SERVING, SERVICE_UNKNOWN ..., or
    UNREACHABLE (no answer in time; the rest are not asked)."""
    channel = create_sync_channel(address, tls=tls)
    out: dict[str, str] = {}
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in services:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service),
                                   timeout=timeout_ms / 1000)
                out[service] = str(health_pb2.HealthCheckResponse.ServingStatus.Name(
                    reply.status))
            except grpc.RpcError as exc:
                if exc.code() is not grpc.StatusCode.NOT_FOUND:
                    return {name: "UNREACHABLE" for name in services}
                out[service] = "SERVICE_UNKNOWN"
        return out
    finally:
        channel.close()


def health_status(address: str, tls: TlsCredentials | None, service: str = "",
                  timeout_ms: int = 2_000) -> str:
    """`health_statuses` of one service."""
    return health_statuses(address, tls, [service], timeout_ms)[service]


class RoleHealth:
    """A grpc.health.v1 service `name` that is SERVING only while this process holds
    a role (the active controller, a running broker): a load balancer or a probe
    asks for it to find the process in that role. NOT_SERVING until `update(True)`."""

    def __init__(self, servicer: health_async.HealthServicer, name: str) -> None:
        self.name = name
        self._servicer = servicer
        self._serving = False
        self._pending: set[asyncio.Task[None]] = set()
        # Written directly, as in `add_health_and_reflection`: nothing watches yet.
        servicer._server_status[name] = NOT_SERVING

    def update(self, serving: bool) -> None:
        """The role was taken (True) or lost; call on the event loop."""
        if serving == self._serving:
            return
        self._serving = serving
        task = asyncio.get_running_loop().create_task(
            self._servicer.set(self.name, SERVING if serving else NOT_SERVING))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
