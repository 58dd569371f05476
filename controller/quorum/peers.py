"""The client side: calls to peers, whose answers become received messages.

Raft tolerates lost messages (the core retries on its own timers), so every
failure here -- deadline, UNAVAILABLE, a malformed answer, too many calls in
flight, a stream that ended -- is just a dropped message, counted and logged at
debug level.

Fetches go over one `FetchStream` per peer (`fetch_stream.FetchStream`), far
cheaper for both ends than a unary call each; a peer that answers the stream
UNIMPLEMENTED (an older server) gets unary `Fetch` calls from then on, and the
fetches that stream swallowed are sent again that way (never handled, so
nothing is duplicated). Every other request is a unary call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from grpc import aio

from controller.quorum import raft_service_pb2 as pb
from controller.quorum import raft_service_pb2_grpc as pb_grpc
from controller.quorum.fetch_stream import FetchStream, Unanswered
from controller.quorum.wire import (
    RPC_METHODS,
    PbMessage,
    StoredBatchCache,
    WireError,
    from_pb,
    to_pb,
)
from controller.raft.messages import FetchRequest, Message, Request
from controller.rpc import RpcLimits, create_channel
from controller.security.tls import TlsCredentials

logger = logging.getLogger(__name__)

Deliver = Callable[[Message], Awaitable[None]]


class PeerClients:
    """One channel per peer, opened lazily; at most `max_inflight` calls (or
    unanswered streamed fetches) per peer."""

    def __init__(self, addresses: Mapping[int, str], cluster_id: str, cache: StoredBatchCache,
                 limits: RpcLimits, max_inflight: int, deliver: Deliver, *,
                 clock: Callable[[], float] = time.monotonic,
                 tls: TlsCredentials | None = None) -> None:
        assert max_inflight > 0
        self._addresses = dict(addresses)
        self._cluster_id = cluster_id
        self._cache = cache
        self._limits = limits
        self._tls = tls
        self._max_inflight = max_inflight
        self._deliver = deliver
        self._clock = clock  # the streams' deadlines (tests pass their own)
        self._channels: dict[int, aio.Channel] = {}
        self._stubs: dict[int, Any] = {}
        self._inflight: Counter[int] = Counter()
        self._streams: dict[int, FetchStream] = {}
        # Peers that answered FetchStream UNIMPLEMENTED: fetched with unary calls.
        self.unary_fetch: set[int] = set()
        # Unary calls in flight (cancelled on close).
        self._tasks: set[asyncio.Task[None]] = set()
        # Why messages were dropped, for status and tests.
        self.dropped: Counter[str] = Counter()

    def _stub(self, peer: int) -> Any:
        stub = self._stubs.get(peer)
        if stub is None:
            channel = create_channel(self._addresses[peer], self._limits, self._tls)
            self._channels[peer] = channel
            stub = self._stubs[peer] = pb_grpc.RaftStub(channel)
        return stub

    def set_address(self, peer: int, address: str) -> None:
        """A voter's endpoint learnt from the log (a new voter, or one that moved):
        calls go there from now on, over a new channel."""
        if self._addresses.get(peer) == address:
            return
        self._addresses[peer] = address
        self._stubs.pop(peer, None)
        stream = self._streams.pop(peer, None)
        channel = self._channels.pop(peer, None)

        async def close_old() -> None:
            if stream is not None:
                await stream.close()
            if channel is not None:
                await channel.close(grace=None)

        task = asyncio.create_task(close_old())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def send(self, req: Request, timeout_s: float) -> asyncio.Task[None] | None:
        """Send `req`; its answer goes to `deliver`. Returns the unary call's task
        (None when it went on a stream or was dropped)."""
        peer = req.dst
        if peer not in self._addresses:
            self.dropped["unknown_peer"] += 1
            return None
        if isinstance(req, FetchRequest) and peer not in self.unary_fetch:
            self._stream_fetch(req, timeout_s)
            return None
        if self._inflight[peer] >= self._max_inflight:
            self.dropped["too_many_inflight"] += 1
            return None
        task = asyncio.create_task(self._call(req, timeout_s))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _stream_fetch(self, req: FetchRequest, timeout_s: float) -> None:
        peer = req.dst
        message = to_pb(req, self._cache)
        assert isinstance(message, pb.FetchRequest)
        stream = self._streams.get(peer)
        outcome = "ended" if stream is None else stream.send(req, message, timeout_s,
                                                             self._max_inflight)
        if outcome == "ended":
            # No stream yet, or it ended (or was stuck): a new one for this fetch.
            stream = self._streams[peer] = FetchStream(
                self._stub(peer), lambda answer: self._answered(peer, answer),
                lambda ended, code, left: self._stream_ended(peer, ended, code, left),
                clock=self._clock)
            outcome = stream.send(req, message, timeout_s, self._max_inflight)
        if outcome == "full":
            self.dropped["too_many_inflight"] += 1

    def _stream_ended(self, peer: int, stream: FetchStream, code: grpc.StatusCode,
                      unanswered: list[Unanswered]) -> None:
        if self._streams.get(peer) is stream:
            del self._streams[peer]
        if code is grpc.StatusCode.UNIMPLEMENTED:
            # An older server: the stream never reached a handler, so nothing was
            # handled; the same fetches go unary now (and every later one).
            logger.info("peer %d has no FetchStream; fetching with unary calls", peer)
            self.unary_fetch.add(peer)
            now = self._clock()
            for fetch in unanswered:
                # Within what is left of its own deadline; past it, the core has
                # already retried it under another seq.
                if now < fetch.deadline:
                    self.send(fetch.request, fetch.deadline - now)
                else:
                    self.dropped["deadline_exceeded"] += 1
            return
        if unanswered:
            self.dropped[code.name.lower()] += len(unanswered)
        if code is grpc.StatusCode.FAILED_PRECONDITION:
            logger.error("peer %d ended the fetch stream: %s", peer, code.name)
        else:
            logger.debug("fetch stream to %d ended: %s", peer, code.name)

    async def _answered(self, peer: int, answer: pb.FetchResponse) -> None:
        await self._received(peer, "Fetch", answer)

    async def _call(self, req: Request, timeout_s: float) -> None:
        peer = req.dst
        method, _ = RPC_METHODS[type(req)]
        try:
            message = to_pb(req, self._cache)
        except ValueError as exc:
            # A value the wire cannot carry: a bug, but never a silent dead task.
            logger.error("cannot send %s to %d: %s", method, peer, exc)
            self.dropped["unencodable"] += 1
            return
        self._inflight[peer] += 1
        try:
            response = await getattr(self._stub(peer), method)(message, timeout=timeout_s)
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
        await self._received(peer, method, response)

    async def _received(self, peer: int, method: str, response: PbMessage) -> None:
        try:
            reply = from_pb(response, self._cache)
        except WireError as exc:
            self.dropped["malformed_reply"] += 1
            logger.warning("malformed %s reply from %d: %s", method, peer, exc)
            return
        if reply.src != peer or reply.cluster_id != self._cluster_id:
            self.dropped["misaddressed_reply"] += 1
            return
        await self._deliver(reply)

    def streaming_to(self, peer: int) -> bool:
        """Whether fetches to `peer` go over a live stream (diagnostics, tests)."""
        stream = self._streams.get(peer)
        return stream is not None and not stream.ended

    async def close(self) -> None:
        for stream in list(self._streams.values()):
            await stream.close()
        self._streams.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for channel in self._channels.values():
            await channel.close(grace=None)
        self._channels.clear()
        self._stubs.clear()
