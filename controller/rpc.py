"""Every gRPC server and channel in metakraft is created here, never ad hoc.

One place means one change when mutual TLS and authenticated clients arrive
(DESIGN.md §11), and one place that puts limits on message sizes and keepalives.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import grpc
from grpc import aio
from grpc_health.v1 import _async as health_async
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

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
    """A grpc.aio server with our limits. Bind with `bind_insecure` (TLS comes here later)."""
    return aio.server(options=limits.server_options())


def bind_insecure(server: aio.Server, address: str) -> int:
    """Bind `address` (host:port, port 0 = pick a free one); returns the bound port."""
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"could not bind gRPC server to {address}")
    return port


def create_channel(target: str, limits: RpcLimits = RpcLimits()) -> aio.Channel:
    """A grpc.aio channel to `target` (host:port) with our limits."""
    return aio.insecure_channel(target, options=limits.channel_options())


def create_sync_channel(target: str, limits: RpcLimits = RpcLimits()) -> grpc.Channel:
    """A blocking channel, for the CLI and tests that do not run an event loop."""
    return grpc.insecure_channel(target, options=limits.channel_options())


def add_health_and_reflection(
    server: aio.Server, service_names: Sequence[str]
) -> health_async.HealthServicer:
    """Register grpc.health.v1 and server reflection; every service starts SERVING."""
    health_servicer = health_async.HealthServicer()
    # The async servicer's `set` is a coroutine and this runs before the loop serves;
    # with no watcher yet, writing the status table is all `set` would do.
    for name in service_names:
        health_servicer._server_status[name] = health_pb2.HealthCheckResponse.SERVING
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME]
    reflection.enable_server_reflection(names, server)
    return health_servicer


SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
