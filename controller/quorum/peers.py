"""The client side: unary calls to peers, whose answers become received messages.

Raft tolerates lost messages (the core retries on its own timers), so every
failure here -- deadline, UNAVAILABLE, a malformed answer, too many calls in
flight -- is just a dropped message, counted and logged at debug level.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from grpc import aio

from controller.quorum import raft_service_pb2_grpc as pb_grpc
from controller.quorum.wire import RPC_METHODS, StoredBatchCache, WireError, from_pb, to_pb
from controller.raft.messages import Message, Request
from controller.rpc import RpcLimits, create_channel

logger = logging.getLogger(__name__)


class PeerClients:
    """One channel per peer, opened lazily; at most `max_inflight` calls per peer."""

    def __init__(self, addresses: Mapping[int, str], cluster_id: str, cache: StoredBatchCache,
                 limits: RpcLimits, max_inflight: int) -> None:
        assert max_inflight > 0
        self._addresses = dict(addresses)
        self._cluster_id = cluster_id
        self._cache = cache
        self._limits = limits
        self._max_inflight = max_inflight
        self._channels: dict[int, aio.Channel] = {}
        self._stubs: dict[int, Any] = {}
        self._inflight: Counter[int] = Counter()
        # Why messages were dropped, for status and tests.
        self.dropped: Counter[str] = Counter()

    def _stub(self, peer: int) -> Any:
        stub = self._stubs.get(peer)
        if stub is None:
            channel = create_channel(self._addresses[peer], self._limits)
            self._channels[peer] = channel
            stub = self._stubs[peer] = pb_grpc.RaftStub(channel)
        return stub

    def can_send(self, req: Request) -> bool:
        if req.dst not in self._addresses:
            self.dropped["unknown_peer"] += 1
            return False
        if self._inflight[req.dst] >= self._max_inflight:
            self.dropped["too_many_inflight"] += 1
            return False
        return True

    async def call(self, req: Request, timeout_s: float,
                   deliver: Callable[[Message], Awaitable[None]]) -> None:
        """Send `req` and deliver the peer's answer; failures drop it silently.

        The caller checked `can_send` first (synchronously, so the in-flight
        bound is exact).
        """
        peer = req.dst
        method, _ = RPC_METHODS[type(req)]
        self._inflight[peer] += 1
        try:
            response = await getattr(self._stub(peer), method)(to_pb(req, self._cache),
                                                               timeout=timeout_s)
        except aio.AioRpcError as exc:
            self.dropped[exc.code().name.lower()] += 1
            if exc.code() is grpc.StatusCode.FAILED_PRECONDITION:
                # A peer of another cluster: a configuration error, say it loudly.
                logger.error("peer %d refused %s: %s", peer, method, exc.details())
            else:
                logger.debug("%s to %d failed: %s", method, peer, exc.code().name)
            return
        finally:
            self._inflight[peer] -= 1
        try:
            reply = from_pb(response, self._cache)
        except WireError as exc:
            self.dropped["malformed_reply"] += 1
            logger.warning("malformed %s reply from %d: %s", method, peer, exc)
            return
        if reply.src != peer or reply.cluster_id != self._cluster_id:
            self.dropped["misaddressed_reply"] += 1
            return
        await deliver(reply)

    def inflight(self, peer: int) -> int:
        return self._inflight[peer]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(grace=None)
        self._channels.clear()
        self._stubs.clear()
