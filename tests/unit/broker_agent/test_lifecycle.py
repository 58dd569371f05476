"""Broker lifecycle against fake controllers (in-process gRPC): following "not
controller", re-registering on a stale epoch, unfencing, controlled shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from broker_agent.lifecycle import BrokerLifecycle
from broker_agent.lifecycle_machine import LifecycleState
from controller import rpc
from controller.api import broker_pb2 as bpb
from controller.api import broker_pb2_grpc as bpb_grpc
from controller.api.handlers import LEADER_ADDRESS_KEY, LEADER_ID_KEY


class Standby(bpb_grpc.BrokerLifecycleServicer):
    def __init__(self) -> None:
        self.leader_address = ""

    async def _redirect(self, context: Any) -> None:
        context.set_trailing_metadata(((LEADER_ID_KEY, "3001"),
                                       (LEADER_ADDRESS_KEY, self.leader_address)))
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not the controller")

    async def RegisterBroker(self, request: Any, context: Any) -> Any:
        await self._redirect(context)

    async def BrokerHeartbeat(self, request: Any, context: Any) -> Any:
        await self._redirect(context)


class Active(bpb_grpc.BrokerLifecycleServicer):
    def __init__(self) -> None:
        self.registrations: list[bpb.RegisterBrokerRequest] = []
        self.beats: list[bpb.BrokerHeartbeatRequest] = []
        self.epoch = 10

    async def RegisterBroker(self, request: Any, context: Any) -> Any:
        self.registrations.append(request)
        self.epoch += 10
        return bpb.RegisterBrokerResponse(error=bpb.Error(code="NONE"), broker_epoch=self.epoch)

    async def BrokerHeartbeat(self, request: Any, context: Any) -> Any:
        self.beats.append(request)
        if len(self.registrations) == 1:  # forget the first registration once
            return bpb.BrokerHeartbeatResponse(error=bpb.Error(code="STALE_BROKER_EPOCH"))
        assert request.broker_epoch == self.epoch
        return bpb.BrokerHeartbeatResponse(
            error=bpb.Error(code="NONE"), broker_epoch=self.epoch, is_caught_up=True,
            is_fenced=request.want_fence, should_shut_down=request.want_shutdown)


def _state(life: BrokerLifecycle) -> LifecycleState:
    # A call, so mypy does not narrow the state across awaits.
    return life.state


class Progress:
    caught_up = False
    applied_offset = 5


def test_register_follow_leader_reregister_unfence_and_shut_down() -> None:
    async def main() -> None:
        standby, active = Standby(), Active()
        servers = []
        addresses = []
        for servicer in (standby, active):
            server = rpc.create_server()
            port = rpc.bind(server, "127.0.0.1:0", None)
            bpb_grpc.add_BrokerLifecycleServicer_to_server(servicer, server)
            await server.start()
            servers.append(server)
            addresses.append(f"127.0.0.1:{port}")
        standby.leader_address = addresses[1]
        progress = Progress()
        life = BrokerLifecycle(cluster_id="c", broker_id=1, listen="127.0.0.1:7000", rack="r1",
                               controllers={3000: addresses[0], 3001: addresses[1]},
                               heartbeat_interval_ms=20, controlled_shutdown_timeout_ms=5000,
                               metadata=progress)
        task = asyncio.create_task(life.run())
        try:
            async def until(cond: Any) -> None:
                for _ in range(300):
                    if cond():
                        return
                    await asyncio.sleep(0.01)
                raise AssertionError("condition not reached")

            await until(lambda: len(active.registrations) == 2)  # re-registered
            assert life.state is LifecycleState.CATCHING_UP
            assert active.beats[-1].want_fence and active.beats[-1].metadata_offset == 5
            assert life.channel.current_id == 3001
            progress.caught_up = True
            await until(lambda: _state(life) is LifecycleState.RUNNING)
            reg = active.registrations[0]
            assert reg.rack == "r1" and reg.listeners[0].port == 7000
            assert reg.incarnation_id == active.registrations[1].incarnation_id
            life.request_shutdown()
            await asyncio.wait_for(task, 5)
            assert active.beats[-1].want_shutdown
            assert _state(life) is LifecycleState.SHUTTING_DOWN
        finally:
            task.cancel()
            for server in servers:
                await server.stop(None)

    asyncio.run(main())


def test_shutdown_gives_up_after_its_timeout_when_no_controller_answers() -> None:
    async def main() -> None:
        life = BrokerLifecycle(cluster_id="c", broker_id=1, listen="127.0.0.1:7000", rack=None,
                               controllers={3000: "127.0.0.1:1"}, heartbeat_interval_ms=20,
                               controlled_shutdown_timeout_ms=300, metadata=Progress())
        life.machine.broker_epoch = 3  # as if registered before the controller went away
        task = asyncio.create_task(life.run())
        await asyncio.sleep(0.05)
        life.request_shutdown()
        await asyncio.wait_for(task, 5)
        assert life.state is LifecycleState.SHUTTING_DOWN

    asyncio.run(main())
