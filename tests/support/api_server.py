"""A real grpc.aio server with the API services, on loopback, in a background thread.

The admin client is synchronous, so the server needs its own event loop: this runs
one in a thread and hands coroutines to it. Used by the API unit and integration
tests with an ``InMemoryController`` (the real controller on an in-memory quorum)
behind the services.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from grpc import aio

from controller import rpc
from controller.api import broker_pb2 as bpb
from controller.api import broker_pb2_grpc as bpb_grpc
from controller.api.admin_service import add_api_services
from controller.api.seam import ControllerFacade
from tests.support.ports import free_ports

T = TypeVar("T")

# The cluster id of the in-memory controllers the API tests serve.
LOCAL_CLUSTER = "local-cluster"


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _shared_loop() -> asyncio.AbstractEventLoop:
    """One event loop thread for every test server of the process: grpc.aio keeps
    per-loop pollers, and closing loops under it makes it complain at exit."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="api-test-loop", daemon=True).start()
        return _LOOP


class ApiServer:
    def __init__(self, facade: ControllerFacade, *, limits: rpc.RpcLimits | None = None) -> None:
        self.facade = facade
        self._limits = limits or rpc.RpcLimits()
        self._loop = _shared_loop()
        self._server: aio.Server | None = None
        self.address = ""

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        """Run ``coro`` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _start(self) -> str:
        opener = getattr(self.facade, "open", None)
        if opener is not None:
            await opener()  # an InMemoryController starts on this loop
        server = rpc.create_server(self._limits)
        add_api_services(server, self.facade)
        port = rpc.bind(server, "127.0.0.1:0", None)
        await server.start()
        self._server = server
        return f"127.0.0.1:{port}"

    def start(self) -> ApiServer:
        self.address = self.run(self._start())
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.run(self._server.stop(None))
            self._server = None


@contextmanager
def serving(
    facade: ControllerFacade, *, limits: rpc.RpcLimits | None = None
) -> Iterator[ApiServer]:
    server = ApiServer(facade, limits=limits).start()
    try:
        yield server
    finally:
        server.stop()


def register_brokers(
    address: str,
    broker_ids: list[int],
    *,
    cluster_id: str = "local-cluster",
    racks: dict[int, str] | None = None,
) -> dict[int, int]:
    """Register and unfence brokers through the BrokerLifecycle service, as broker
    agents would; returns broker id -> broker epoch."""
    channel = rpc.create_sync_channel(address)
    try:
        stub = bpb_grpc.BrokerLifecycleStub(channel)
        epochs: dict[int, int] = {}
        for broker_id in broker_ids:
            request = bpb.RegisterBrokerRequest(
                cluster_id=cluster_id,
                broker_id=broker_id,
                incarnation_id=f"incarnation-{broker_id}",
                listeners=[bpb.Listener(name="PLAINTEXT", host="localhost", port=9000 + broker_id)],
            )
            if racks and broker_id in racks:
                request.rack = racks[broker_id]
            reply = stub.RegisterBroker(request, timeout=10)
            assert reply.error.code == "NONE", reply
            epochs[broker_id] = reply.broker_epoch
        for broker_id, epoch in epochs.items():
            # A metadata offset far ahead: the broker has caught up, so it is unfenced.
            beat = stub.BrokerHeartbeat(
                bpb.BrokerHeartbeatRequest(
                    cluster_id=cluster_id,
                    broker_id=broker_id,
                    broker_epoch=epoch,
                    metadata_offset=1 << 40,
                ),
                timeout=10,
            )
            assert beat.error.code == "NONE" and not beat.is_fenced, beat
        return epochs
    finally:
        channel.close()


def dead_address() -> str:
    """A loopback address nothing listens on: a free port of this test process's own
    block, below the ephemeral range (a port released by a `bind(0)` could be taken by
    any server or connection on the machine at once: a CI run once found a test
    server there, and a write to the "dead" address timed out instead of failing)."""
    return f"127.0.0.1:{free_ports(1)[0]}"
