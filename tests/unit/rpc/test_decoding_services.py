"""Every service registered through `controller.rpc.add_decoding_service` answers bytes
that do not decode with INVALID_ARGUMENT and one log line (found from outside: the
Raft, BrokerStatus and Health services answered UNKNOWN with the Python exception text
and logged a traceback per request), and still serves valid calls of every kind."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pytest
from grpc import aio
from grpc_health.v1 import health_pb2

from broker_agent import status_pb2 as spb
from broker_agent.lifecycle_machine import LifecycleState
from broker_agent.status import BrokerStatusView, add_status_service
from controller import rpc

GARBAGE = b"\xff\xff\xff\xff\x0f"


def run(body: Any) -> None:
    async def main() -> None:
        server = rpc.create_server()
        port = rpc.bind(server, "127.0.0.1:0", None)
        name = add_status_service(server, lambda: BrokerStatusView(
            7, next(iter(LifecycleState)), 3, 10, (), 1, "inc"))
        rpc.add_health_and_reflection(server, [name])
        await server.start()
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await body(channel)
        finally:
            await server.stop(None)

    asyncio.run(main())


@pytest.mark.parametrize("method", ["/metakraft.broker_agent.v1.BrokerStatus/GetStatus",
                                    "/grpc.health.v1.Health/Check"])
def test_undecodable_unary_requests_are_invalid_argument(method: str, caplog: Any) -> None:
    async def body(channel: aio.Channel) -> None:
        call = channel.unary_unary(method)
        with (caplog.at_level(logging.WARNING, logger="metakraft.rpc"),
              pytest.raises(aio.AioRpcError) as info):
            await call(GARBAGE, timeout=5)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "does not decode" in (info.value.details() or "")
        assert caplog.text.count("event=undecodable_request") == 1
        assert "Traceback" not in caplog.text

    run(body)


def test_undecodable_stream_request_is_invalid_argument_and_valid_calls_work() -> None:
    async def body(channel: aio.Channel) -> None:
        watch = channel.unary_stream("/grpc.health.v1.Health/Watch")
        with pytest.raises(aio.AioRpcError) as info:
            async for _ in watch(GARBAGE, timeout=5):
                pass
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        # Valid calls of each kind still work.
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                    response_deserializer=health_pb2.HealthCheckResponse.FromString)
        reply = await check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stream = channel.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)
        async for first in stream(health_pb2.HealthCheckRequest(service=""), timeout=5):
            assert first.status == health_pb2.HealthCheckResponse.SERVING
            break
        status = channel.unary_unary(
            "/metakraft.broker_agent.v1.BrokerStatus/GetStatus",
            request_serializer=spb.GetStatusRequest.SerializeToString,
            response_deserializer=spb.GetStatusResponse.FromString)
        got = await status(spb.GetStatusRequest(), timeout=5)
        assert got.broker_id == 7

    run(body)
