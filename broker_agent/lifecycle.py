"""Broker lifecycle: registration, heartbeats, fencing, controlled shutdown -- the
asyncio + gRPC driver of `LifecycleMachine` (lifecycle_machine.py, which holds the
states and their transition table).

`ControllerChannel` finds the active controller the way `AdminClient` does: ask
the last one that answered, follow a "not controller" answer's
`x-metakraft-leader-address`, otherwise walk the [controllers] list with bounded
exponential backoff. A "stale broker epoch" answer (the controller lost or replaced
our registration) makes the broker register again with the same incarnation id.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import grpc
from grpc import aio

from broker_agent.image import REPLICATION_LISTENER
from broker_agent.lifecycle_machine import Action, LifecycleMachine, LifecycleState
from controller import rpc
from controller.api import broker_pb2 as bpb
from controller.api import broker_pb2_grpc as bpb_grpc
from controller.api.handlers import LEADER_ADDRESS_KEY, LEADER_ID_KEY
from controller.log import get_logger
from controller.metadata.features import METADATA_VERSION, SUPPORTED_FEATURES
from controller.security.tls import TlsCredentials

log = get_logger("metakraft.broker")

_CALL_TIMEOUT_S = 2.0


class NoControllerError(Exception):
    """No controller answered this round (the caller backs off and retries)."""


def _trailing(exc: grpc.RpcError) -> dict[str, str]:
    call: Any = exc
    try:
        return {k: str(v) for k, v in (call.trailing_metadata() or ())}
    except Exception:  # a transport error may carry no call
        return {}


class ControllerChannel:
    """Calls on the active controller's BrokerLifecycle service."""

    def __init__(self, controllers: Mapping[int, str],
                 tls: TlsCredentials | None = None) -> None:
        self._addresses = dict(controllers)
        self._tls = tls
        self._channels: dict[str, aio.Channel] = {}
        self.current: str | None = None
        self.current_id: int | None = None
        self._walk = 0

    def _stub(self, address: str) -> bpb_grpc.BrokerLifecycleStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = rpc.create_channel(address, tls=self._tls)
        return bpb_grpc.BrokerLifecycleStub(channel)

    async def call(self, method: str, request: Any) -> Any:
        """One attempt at the active controller, following up to 3 redirects."""
        ids = sorted(self._addresses)
        address = self.current or self._addresses[ids[self._walk % len(ids)]]
        for _ in range(3):
            try:
                reply = await getattr(self._stub(address), method)(request,
                                                                    timeout=_CALL_TIMEOUT_S)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                leader = _trailing(exc).get(LEADER_ADDRESS_KEY)
                if code == grpc.StatusCode.FAILED_PRECONDITION and leader:
                    self._set_current(leader, _trailing(exc).get(LEADER_ID_KEY))
                    address = leader
                    continue
                self.current = self.current_id = None
                self._walk += 1
                raise NoControllerError(f"{address}: {code}") from None
            if address != self.current:
                self._set_current(address, None)
            return reply
        self.current = None
        raise NoControllerError("redirected too often (election in progress)")

    def _set_current(self, address: str, node_id: str | None) -> None:
        if address != self.current:
            log.info("controller_found", address=address)
        self.current = address
        found = [i for i, a in self._addresses.items() if a == address]
        self.current_id = int(node_id) if node_id and node_id.isdigit() else \
            (found[0] if found else None)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()


class MetadataProgress(Protocol):
    @property
    def caught_up(self) -> bool: ...

    @property
    def applied_offset(self) -> int: ...


class BrokerLifecycle:
    """The asyncio + gRPC driver of the `LifecycleMachine`: sends what it says to
    send, to the active controller, and waits as long as it says."""

    def __init__(self, *, cluster_id: str, broker_id: int, listen: str, rack: str | None,
                 controllers: Mapping[int, str], heartbeat_interval_ms: int,
                 controlled_shutdown_timeout_ms: int, metadata: MetadataProgress,
                 clock_s: Callable[[], float] = time.monotonic,
                 tls: TlsCredentials | None = None,
                 replication_address: str | None = None) -> None:
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.incarnation_id = str(uuid.uuid4())
        self.listen = listen
        # Registered as the REPLICATION listener: where followers fetch from.
        self.replication_address = replication_address
        self.rack = rack
        self.channel = ControllerChannel(controllers, tls)
        # The broker serves with the same credentials it dials with (daemon.py): its
        # listener is SSL on a TLS cluster, as Kafka names it.
        self.security_protocol = "PLAINTEXT" if tls is None else "SSL"
        self.machine = LifecycleMachine(broker_id, heartbeat_interval_s=heartbeat_interval_ms / 1e3,
                                        shutdown_timeout_s=controlled_shutdown_timeout_ms / 1e3,
                                        jitter=random.random)
        self.metadata = metadata
        self._clock = clock_s
        self._shutdown_requested = asyncio.Event()

    @property
    def state(self) -> LifecycleState:
        return self.machine.state

    @property
    def broker_epoch(self) -> int:
        return self.machine.broker_epoch

    def request_shutdown(self) -> None:
        self.machine.shutdown_requested(self._clock())
        self._shutdown_requested.set()

    async def run(self) -> None:
        """Returns once the broker may stop (controlled shutdown done or timed out)."""
        machine = self.machine
        try:
            while (action := machine.next_action(self._clock())) is not Action.STOP:
                try:
                    if action is Action.REGISTER:
                        await self._register()
                    else:
                        await self._heartbeat()
                except NoControllerError as exc:
                    log.debug("controller_unreachable", error=str(exc))
                    machine.unreachable()
                await self._sleep(machine.wait_s)
        finally:
            machine.stopped()
            await self.channel.close()

    async def _sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        # A shutdown request cuts the wait short: its first heartbeat goes at once.
        if self._shutdown_requested.is_set():
            await asyncio.sleep(min(seconds, 0.1))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._shutdown_requested.wait(), seconds)

    async def _register(self) -> None:
        named = [(self.security_protocol, self.listen)]
        if self.replication_address is not None:
            named.append((REPLICATION_LISTENER, self.replication_address))
        listeners = []
        for name, address in named:
            host, _, port = address.rpartition(":")
            listeners.append(bpb.Listener(name=name, host=host, port=int(port),
                                          security_protocol=self.security_protocol))
        request = bpb.RegisterBrokerRequest(
            cluster_id=self.cluster_id, broker_id=self.broker_id,
            incarnation_id=self.incarnation_id, listeners=listeners,
            # What this software reads: the controller refuses to raise the cluster's
            # level past it, and refuses us if the cluster is already past it.
            features=[bpb.SupportedFeature(name=METADATA_VERSION, min_version=low,
                                           max_version=high)
                      for low, high in (SUPPORTED_FEATURES[METADATA_VERSION],)])
        if self.rack is not None:
            request.rack = self.rack
        reply = await self.channel.call("RegisterBroker", request)
        self.machine.registered(reply.error.code, reply.broker_epoch)
        if self.machine.broker_epoch == reply.broker_epoch >= 0:
            log.info("registered", broker=self.broker_id, epoch=reply.broker_epoch,
                     incarnation=self.incarnation_id, controller=self.channel.current)

    async def _heartbeat(self) -> None:
        caught_up = self.metadata.caught_up
        flags = self.machine.heartbeat_flags(caught_up)
        request = bpb.BrokerHeartbeatRequest(
            cluster_id=self.cluster_id, broker_id=self.broker_id,
            broker_epoch=self.machine.broker_epoch,
            metadata_offset=self.metadata.applied_offset,
            want_fence=flags.want_fence, want_shutdown=flags.want_shutdown)
        reply = await self.channel.call("BrokerHeartbeat", request)
        self.machine.heartbeat_answered(
            reply.error.code, is_fenced=reply.is_fenced,
            should_shut_down=reply.should_shut_down, caught_up=caught_up,
            applied_offset=self.metadata.applied_offset)
