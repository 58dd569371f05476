"""Broker lifecycle: registration, heartbeats, fencing, controlled shutdown.

States (reported by the status RPC):

    STARTING ─register─▶ CATCHING_UP ─caught up + unfenced─▶ RUNNING
                              ▲                 │ fenced (missed session)
                              └── re-register ◀─┴─▶ FENCED ─unfenced─▶ RUNNING
    any ─SIGTERM─▶ PENDING_CONTROLLED_SHUTDOWN ─should_shut_down or timeout─▶ SHUTTING_DOWN

`ControllerChannel` finds the active controller the way `AdminClient` does: ask
the last one that answered, follow a "not controller" answer's
`x-metakraft-leader-address`, otherwise walk the [controllers] list with bounded
exponential backoff. A "stale broker epoch" answer (the controller lost or replaced
our registration) makes the broker register again with the same incarnation id.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import grpc
from grpc import aio

from controller import rpc
from controller.api import broker_pb2 as bpb
from controller.api import broker_pb2_grpc as bpb_grpc
from controller.api.handlers import LEADER_ADDRESS_KEY, LEADER_ID_KEY
from controller.security.tls import TlsCredentials

logger = logging.getLogger("metakraft.broker")

_BACKOFF_FIRST_MS = 50
_BACKOFF_MAX_MS = 1_000
_CALL_TIMEOUT_S = 2.0
STALE_BROKER_EPOCH = "STALE_BROKER_EPOCH"
# Heartbeat answers meaning "your registration is gone or replaced": register again.
_REREGISTER_CODES = frozenset({STALE_BROKER_EPOCH, "BROKER_ID_NOT_REGISTERED"})


class LifecycleState(enum.Enum):
    STARTING = 1
    CATCHING_UP = 2
    FENCED = 3
    RUNNING = 4
    PENDING_CONTROLLED_SHUTDOWN = 5
    SHUTTING_DOWN = 6


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
            logger.info("event=controller_found address=%s", address)
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
    """Runs registration and heartbeats until a controlled shutdown completes."""

    def __init__(self, *, cluster_id: str, broker_id: int, listen: str, rack: str | None,
                 controllers: Mapping[int, str], heartbeat_interval_ms: int,
                 controlled_shutdown_timeout_ms: int, metadata: MetadataProgress,
                 clock_s: Callable[[], float] = time.monotonic,
                 tls: TlsCredentials | None = None) -> None:
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.incarnation_id = str(uuid.uuid4())
        self.listen = listen
        self.rack = rack
        self.channel = ControllerChannel(controllers, tls)
        self.heartbeat_interval_s = heartbeat_interval_ms / 1e3
        self.shutdown_timeout_s = controlled_shutdown_timeout_ms / 1e3
        self.metadata = metadata
        self._clock = clock_s
        self.state = LifecycleState.STARTING
        self.broker_epoch = -1
        self._shutdown_requested = asyncio.Event()
        self._shutdown_deadline: float | None = None
        self._backoff_ms = _BACKOFF_FIRST_MS

    def request_shutdown(self) -> None:
        if not self._shutdown_requested.is_set():
            logger.info("event=controlled_shutdown_requested broker=%d", self.broker_id)
            self._shutdown_deadline = self._clock() + self.shutdown_timeout_s
            self._shutdown_requested.set()

    async def run(self) -> None:
        """Returns once the broker may stop (controlled shutdown done or timed out)."""
        try:
            while True:
                if self._shutdown_requested.is_set():
                    assert self._shutdown_deadline is not None
                    if self.broker_epoch < 0 or self._clock() >= self._shutdown_deadline:
                        if self.broker_epoch >= 0:
                            logger.warning("event=controlled_shutdown_timeout broker=%d",
                                           self.broker_id)
                        break
                    self.state = LifecycleState.PENDING_CONTROLLED_SHUTDOWN
                try:
                    if self.broker_epoch < 0:
                        await self._register()
                    else:
                        if await self._heartbeat():
                            break
                    self._backoff_ms = _BACKOFF_FIRST_MS
                    wait_s = self.heartbeat_interval_s
                except NoControllerError as exc:
                    logger.debug("event=controller_unreachable error=%r", str(exc))
                    wait_s = self._backoff_ms / 1e3
                    self._backoff_ms = min(self._backoff_ms * 2, _BACKOFF_MAX_MS)
                await self._sleep(wait_s)
        finally:
            self.state = LifecycleState.SHUTTING_DOWN
            await self.channel.close()

    async def _sleep(self, seconds: float) -> None:
        # A shutdown request cuts the wait short: its first heartbeat goes at once.
        if self._shutdown_requested.is_set():
            await asyncio.sleep(min(seconds, 0.1))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._shutdown_requested.wait(), seconds)

    async def _register(self) -> None:
        host, _, port = self.listen.rpartition(":")
        request = bpb.RegisterBrokerRequest(
            cluster_id=self.cluster_id, broker_id=self.broker_id,
            incarnation_id=self.incarnation_id,
            listeners=[bpb.Listener(name="PLAINTEXT", host=host, port=int(port),
                                    security_protocol="PLAINTEXT")])
        if self.rack is not None:
            request.rack = self.rack
        reply = await self.channel.call("RegisterBroker", request)
        if reply.error.code not in ("", "NONE"):
            logger.warning("event=register_refused code=%s message=%r", reply.error.code,
                           reply.error.message)
            raise NoControllerError(reply.error.code)
        self.broker_epoch = reply.broker_epoch
        if self.state is LifecycleState.STARTING:
            self.state = LifecycleState.CATCHING_UP
        logger.info("event=registered broker=%d epoch=%d incarnation=%s controller=%s",
                    self.broker_id, self.broker_epoch, self.incarnation_id,
                    self.channel.current)

    async def _heartbeat(self) -> bool:
        """One heartbeat; True when the controlled shutdown is complete."""
        caught_up = self.metadata.caught_up
        shutting = self._shutdown_requested.is_set()
        request = bpb.BrokerHeartbeatRequest(
            cluster_id=self.cluster_id, broker_id=self.broker_id,
            broker_epoch=self.broker_epoch, metadata_offset=self.metadata.applied_offset,
            want_fence=not caught_up and not shutting, want_shutdown=shutting)
        reply = await self.channel.call("BrokerHeartbeat", request)
        code = reply.error.code
        if code in _REREGISTER_CODES:
            logger.warning("event=reregister broker=%d code=%s message=%r", self.broker_id,
                           code, reply.error.message)
            self.broker_epoch = -1
            return False
        if code not in ("", "NONE"):
            logger.warning("event=heartbeat_error code=%s message=%r", code, reply.error.message)
            raise NoControllerError(code)
        if shutting:
            self.state = LifecycleState.PENDING_CONTROLLED_SHUTDOWN
            if reply.should_shut_down:
                logger.info("event=controlled_shutdown_complete broker=%d", self.broker_id)
                return True
            return False
        previous = self.state
        if not caught_up:
            self.state = LifecycleState.CATCHING_UP
        elif reply.is_fenced:
            self.state = LifecycleState.FENCED
        else:
            self.state = LifecycleState.RUNNING
        if self.state is not previous:
            logger.info("event=state_change broker=%d from=%s to=%s epoch=%d offset=%d",
                        self.broker_id, previous.name, self.state.name, self.broker_epoch,
                        self.metadata.applied_offset)
        return False
