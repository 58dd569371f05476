"""The server side of the Raft gRPC service, and the matching of replies.

A handler never touches the Raft node: it converts the request, checks the
cluster id and the addressee, hands the message to the driver (a bounded
queue) and awaits the future that the driver completes when the core emits the
response to it. Which response answers which request is decided by
`request_key` / `response_key`:

- Fetch and FetchSnapshot carry a `seq` the response echoes: (kind, peer, seq);
- a VoteResponse echoes the request's epoch and pre-vote flag;
- Begin/EndQuorumEpoch carry nothing to correlate on, so waiters of one peer
  are answered first in, first out (the core answers those requests at once
  and in order, so this is exact; see the report on adding `seq` to them).

`FetchStream` carries many fetches on one call; each goes through the same
admission (`admit`) and the same `submit_request` as a `Fetch` call.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Hashable
from typing import Any, Protocol, TypeVar

import attrs
import grpc
from grpc import aio

from controller.log import get_logger
from controller.quorum import raft_service_pb2 as pb
from controller.quorum import raft_service_pb2_grpc as pb_grpc
from controller.quorum.wire import PbMessage, StoredBatchCache, WireError, from_pb, to_pb
from controller.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from controller.rpc import add_decoding_service
from controller.security.access import Access, UnauthenticatedError, cluster_action
from controller.security.acl import Operation

log = get_logger(__name__)

ReplyKey = Hashable
_P = TypeVar("_P", bound=PbMessage)


def request_key(req: Request) -> ReplyKey:
    """The key of the response that will answer `req` (sent by `req.src`)."""
    match req:
        case FetchRequest():
            return ("fetch", req.src, req.seq)
        case FetchSnapshotRequest():
            return ("snapshot", req.src, req.seq)
        case VoteRequest():
            return ("vote", req.src, req.epoch, req.pre_vote)
        case BeginQuorumEpochRequest():
            return ("begin", req.src)
        case EndQuorumEpochRequest():
            return ("end", req.src)
    raise TypeError(type(req).__name__)


def response_key(resp: Response) -> ReplyKey:
    """The key of the request `resp` answers (its addressee sent that request)."""
    match resp:
        case FetchResponse():
            return ("fetch", resp.dst, resp.seq)
        case FetchSnapshotResponse():
            return ("snapshot", resp.dst, resp.seq)
        case VoteResponse():
            return ("vote", resp.dst, resp.vote_epoch, resp.pre_vote)
        case BeginQuorumEpochResponse():
            return ("begin", resp.dst)
        case EndQuorumEpochResponse():
            return ("end", resp.dst)
    raise TypeError(type(resp).__name__)


class ReplyWaiters:
    """Futures of handlers waiting for the core's response, by `ReplyKey`."""

    def __init__(self) -> None:
        self._waiting: defaultdict[ReplyKey, deque[asyncio.Future[Response]]] = defaultdict(deque)

    def register(self, key: ReplyKey) -> asyncio.Future[Response]:
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiting[key].append(fut)
        return fut

    def discard(self, key: ReplyKey, fut: asyncio.Future[Response]) -> None:
        queue = self._waiting.get(key)
        if queue is not None:
            if fut in queue:
                queue.remove(fut)
            if not queue:
                del self._waiting[key]

    def resolve(self, resp: Response) -> bool:
        """Complete the oldest live waiter for `resp`; False if nobody waits (the
        handler gave up: the response is dropped, as the network could have)."""
        key = response_key(resp)
        queue = self._waiting.get(key)
        while queue:
            fut = queue.popleft()
            if not fut.done():
                fut.set_result(resp)
                if not queue:
                    del self._waiting[key]
                return True
        self._waiting.pop(key, None)
        return False

    def fail_all(self, exc: BaseException) -> None:
        for queue in self._waiting.values():
            for fut in queue:
                if not fut.done():
                    fut.set_exception(exc)
        self._waiting.clear()

    def __len__(self) -> int:
        return sum(len(q) for q in self._waiting.values())


class RequestSink(Protocol):
    """What the service needs from the driver."""

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def batch_cache(self) -> StoredBatchCache: ...

    # Set once the driver stopped: open fetch streams then end.
    @property
    def stopped(self) -> asyncio.Event: ...

    def reply_timeout_s(self, req: Request) -> float: ...

    async def submit_request(self, req: Request, timeout_s: float) -> Response:
        """Hand `req` to the core; the response it emits. Raises `QueueFullError`
        when the driver's inbox is full, `TimeoutError` when the core stays silent,
        `DriverStoppedError` when the driver is not running."""
        ...


class QueueFullError(Exception):
    """The driver's inbox is full: back-pressure, the caller retries later."""


class DriverStoppedError(Exception):
    """The driver is not running (not started yet, stopping, or failed)."""


class RefusedError(Exception):
    """A request refused before the core sees it: the status to end its call with."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


@attrs.frozen
class RaftGate:
    """Who may speak Raft to this node, from its TLS identity: the controllers
    (`controller_principals`) may send everything; any other principal only
    Fetch / FetchSnapshot as an observer (a node id that is not a voter), and only if
    `access` allows it CLUSTER_ACTION on the cluster. So a broker certificate can
    follow the log but never vote, and nobody without a controller certificate can
    fetch as a voter and be counted toward the high watermark. Every sender speaks
    only as the node its principal names (`access.identities`, security/identity.py): a
    controller's certificate cannot claim another voter's id, a broker's cannot
    follow the log as another broker."""

    access: Access
    controller_principals: frozenset[str]
    voter_ids: frozenset[int]

    def check(self, message: Request, context: Any) -> None:
        try:
            caller = self.access.caller(context)
        except UnauthenticatedError as exc:
            raise RefusedError(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
        principal = caller.principal
        kind = type(message).__name__.removesuffix("Request")
        if principal in self.controller_principals:
            refusal = self.access.identities.controller_refusal(principal, message.src)
            if refusal is not None:
                raise RefusedError(grpc.StatusCode.PERMISSION_DENIED,
                                   f"Raft {kind} claiming node {message.src}: {refusal}")
            return
        if not isinstance(message, (FetchRequest, FetchSnapshotRequest)):
            raise RefusedError(grpc.StatusCode.PERMISSION_DENIED,
                               f"{principal} may not send Raft {kind}: only the controllers "
                               f"({', '.join(sorted(self.controller_principals))}) may")
        if message.src in self.voter_ids:
            raise RefusedError(grpc.StatusCode.PERMISSION_DENIED,
                               f"{principal} may not fetch as voter {message.src}: only the "
                               "controllers may; observers fetch under their own node id")
        broker_id = self.access.identities.names_broker(principal)
        if broker_id is not None and broker_id != message.src:
            raise RefusedError(grpc.StatusCode.PERMISSION_DENIED,
                               f"{principal} is broker {broker_id}: it follows the log as "
                               f"node {broker_id}, not {message.src}")
        if not self.access.allowed(caller, cluster_action(Operation.CLUSTER_ACTION)):
            raise RefusedError(grpc.StatusCode.PERMISSION_DENIED,
                               f"{principal} may not follow the metadata log (needs "
                               "CLUSTER_ACTION on the cluster)")


def log_refusal(context: Any, exc: RefusedError, method: str) -> None:
    """One `access_denied` line for a sender the gate refused (bad input is the
    caller's own business: its status says what was wrong)."""
    if exc.code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
        log.warning("access_denied", method=f"Raft/{method}", peer=context.peer(),
                    reason=exc.details)


def admit(request: PbMessage, sink: RequestSink, gate: RaftGate | None = None,
          context: Any = None) -> Request:
    """The core request for `request`; `RefusedError` for bad input: another
    cluster, malformed, addressed to another node, or from a sender `gate` refuses."""
    header = request.header
    if header.cluster_id != sink.cluster_id:
        raise RefusedError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"inconsistent cluster id: this node (id {sink.node_id}) belongs to cluster "
            f"{sink.cluster_id!r}, the request is for {header.cluster_id!r}")
    try:
        message: Message = from_pb(request)
    except WireError as exc:
        raise RefusedError(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {exc}") from None
    if message.dst != sink.node_id:
        raise RefusedError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"request addressed to node {message.dst}, this is node "
                           f"{sink.node_id}")
    assert isinstance(message, (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest,
                                FetchRequest, FetchSnapshotRequest)), message
    if gate is not None:
        gate.check(message, context)
    return message


# What FetchStream's reader hands its writer: a response; a refusal to end the call
# with; the abort the request decoder already made (it logged the bad input; a
# second abort is a gRPC usage error); None when the caller half-closed.
_Answer = Response | RefusedError | aio.AbortError | None

# Fetches of one stream handed to the core at once; more wait unread in the stream
# (HTTP/2 flow control pushes back). A follower has one fetch outstanding.
MAX_STREAMED_FETCHES = 32


async def _read_fetches(requests: AsyncIterator[pb.FetchRequest], sink: RequestSink,
                        answers: asyncio.Queue[_Answer],
                        gate: RaftGate | None, context: Any) -> None:
    """FetchStream's reading side: admits each request, answers it through
    `answers` (None: the caller half-closed and every answer is out)."""
    slots = asyncio.Semaphore(MAX_STREAMED_FETCHES)
    in_flight: set[asyncio.Task[None]] = set()

    async def answer(message: Request) -> None:
        try:
            answers.put_nowait(await sink.submit_request(message,
                                                         sink.reply_timeout_s(message)))
        except (QueueFullError, TimeoutError):
            pass  # dropped, as the network could have
        except DriverStoppedError:
            answers.put_nowait(RefusedError(grpc.StatusCode.UNAVAILABLE,
                                            "raft node is not running"))
        finally:
            slots.release()

    try:
        async for request in requests:
            try:
                message = admit(request, sink, gate, context)
            except RefusedError as exc:
                answers.put_nowait(exc)
                return
            await slots.acquire()
            task = asyncio.create_task(answer(message))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
        answers.put_nowait(None)
    except aio.AbortError as exc:
        answers.put_nowait(exc)
    except Exception as exc:
        # gRPC could not read the next message (it does not decode as a FetchRequest).
        answers.put_nowait(RefusedError(grpc.StatusCode.INVALID_ARGUMENT,
                                        f"malformed FetchStream message: {exc!r}"))
    finally:
        # Cancelled (the stream ended): nobody is left to answer.
        for task in in_flight:
            task.cancel()


class RaftService(pb_grpc.RaftServicer):
    def __init__(self, sink: RequestSink, gate: RaftGate | None = None) -> None:
        self._sink = sink
        self._gate = gate
        # The answer queues of the open FetchStreams: ended (None) when the driver
        # stops, so none is still open when the server stops (gRPC would cancel it
        # and log the CancelledError as an ERROR with a traceback).
        self._streams: set[asyncio.Queue[_Answer]] = set()
        self._watcher: asyncio.Task[None] | None = None

    async def _end_streams_when_stopped(self) -> None:
        await self._sink.stopped.wait()
        for answers in self._streams:
            answers.put_nowait(None)

    async def _handle(self, request: _P, context: aio.ServicerContext[_P, PbMessage]) -> PbMessage:
        sink = self._sink
        try:
            message = admit(request, sink, self._gate, context)
        except RefusedError as exc:
            log_refusal(context, exc, type(request).__name__.removesuffix("Request"))
            await context.abort(exc.code, exc.details)
        try:
            reply = await sink.submit_request(message, sink.reply_timeout_s(message))
        except QueueFullError:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "raft inbox full, retry")
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer from the raft core")
        except DriverStoppedError:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "raft node is not running")
        return to_pb(reply, sink.batch_cache)

    async def FetchStream(self, request_iterator: AsyncIterator[pb.FetchRequest],
                          context: pb_grpc._ServicerContext) -> AsyncIterator[pb.FetchResponse]:
        """Fetch calls on one stream: each request is admitted and handed to the core
        exactly as a Fetch call's, and its response written when the core emits it.
        What a unary call would end with QueueFull or a timeout gets no answer (a lost
        message: the follower's timer retries); bad input and a stopped node end the
        stream with the status the unary call would get."""
        sink = self._sink
        if sink.stopped.is_set():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "raft node is not running")
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._end_streams_when_stopped())
        answers: asyncio.Queue[_Answer] = asyncio.Queue()
        self._streams.add(answers)
        reader = asyncio.create_task(_read_fetches(request_iterator, sink, answers,
                                                   self._gate, context))
        try:
            while (answer := await answers.get()) is not None:
                if isinstance(answer, aio.AbortError):
                    raise answer  # gRPC ends the call with the status already set
                if isinstance(answer, RefusedError):
                    log_refusal(context, answer, "FetchStream")
                    await context.abort(answer.code, answer.details)
                out = to_pb(answer, sink.batch_cache)
                assert isinstance(out, pb.FetchResponse)
                yield out
        finally:
            self._streams.discard(answers)
            reader.cancel()

    # The generated servicer types each method separately; they all share _handle.
    async def Vote(self, request: pb.VoteRequest, context: pb_grpc._ServicerContext
                   ) -> pb.VoteResponse:
        out = await self._handle(request, context)
        assert isinstance(out, pb.VoteResponse)
        return out

    async def BeginQuorumEpoch(self, request: pb.BeginQuorumEpochRequest,
                               context: pb_grpc._ServicerContext
                               ) -> pb.BeginQuorumEpochResponse:
        out = await self._handle(request, context)
        assert isinstance(out, pb.BeginQuorumEpochResponse)
        return out

    async def EndQuorumEpoch(self, request: pb.EndQuorumEpochRequest,
                             context: pb_grpc._ServicerContext) -> pb.EndQuorumEpochResponse:
        out = await self._handle(request, context)
        assert isinstance(out, pb.EndQuorumEpochResponse)
        return out

    async def Fetch(self, request: pb.FetchRequest, context: pb_grpc._ServicerContext
                    ) -> pb.FetchResponse:
        out = await self._handle(request, context)
        assert isinstance(out, pb.FetchResponse)
        return out

    async def FetchSnapshot(self, request: pb.FetchSnapshotRequest,
                            context: pb_grpc._ServicerContext) -> pb.FetchSnapshotResponse:
        out = await self._handle(request, context)
        assert isinstance(out, pb.FetchSnapshotResponse)
        return out


SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Raft"].full_name


def add_raft_service(server: aio.Server, sink: RequestSink, gate: RaftGate | None = None) -> str:
    """Register the Raft service for `sink` on `server` (`gate`: who may speak Raft;
    None: anyone who can connect); returns its full name."""
    add_decoding_service(server, pb.DESCRIPTOR.services_by_name["Raft"],
                         RaftService(sink, gate))
    return SERVICE_NAME
