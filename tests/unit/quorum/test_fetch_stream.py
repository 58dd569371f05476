"""The Raft FetchStream RPC: the server's handling of each streamed fetch (against a
scripted RequestSink), and the fetcher's streams (PeerClients against scripted
servers): answers, lost messages, broken and stuck streams, the unary fallback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from grpc import aio

from controller.quorum import raft_service_pb2 as pb
from controller.quorum import raft_service_pb2_grpc as pb_grpc
from controller.quorum.peers import PeerClients
from controller.quorum.service import (
    DriverStoppedError,
    QueueFullError,
    add_raft_service,
)
from controller.quorum.wire import StoredBatchCache, to_pb
from controller.raft import messages as m
from controller.rpc import RpcLimits, bind, create_channel, create_server

pytestmark = pytest.mark.timeout(60)

CLUSTER = "fetch-stream-cluster"


def fetch(seq: int, *, src: int = 2, dst: int = 1, cluster_id: str = CLUSTER) -> m.FetchRequest:
    return m.FetchRequest(cluster_id=cluster_id, epoch=1, src=src, dst=dst, seq=seq,
                          fetch_offset=0, last_fetched_epoch=0, high_watermark=0,
                          max_wait_ms=100)


def answer_to(req: m.FetchRequest) -> m.FetchResponse:
    return m.FetchResponse(cluster_id=req.cluster_id, epoch=req.epoch, src=req.dst, dst=req.src,
                           seq=req.seq, error=m.Errors.NONE, leader_id=req.dst,
                           fetch_offset=req.fetch_offset,
                           last_fetched_epoch=req.last_fetched_epoch, high_watermark=7,
                           log_start_offset=0)


def fetch_pb(seq: int, **kw: Any) -> pb.FetchRequest:
    out = to_pb(fetch(seq, **kw))
    assert isinstance(out, pb.FetchRequest)
    return out


class ScriptedSink:
    """A RequestSink whose answer to each fetch is scripted by its seq."""

    def __init__(self) -> None:
        self.node_id = 1
        self.cluster_id = CLUSTER
        self.batch_cache = StoredBatchCache()
        # seq -> "full" | "timeout" | "stopped" | "hold" (answered once `gate` is set)
        self.script: dict[int, str] = {}
        self.gate = asyncio.Event()
        self.stopped = asyncio.Event()
        self.seen: list[int] = []

    def reply_timeout_s(self, req: m.Request) -> float:
        return 10.0

    async def submit_request(self, req: m.Request, timeout_s: float) -> m.Response:
        assert isinstance(req, m.FetchRequest)
        self.seen.append(req.seq)
        what = self.script.get(req.seq)
        if what == "full":
            raise QueueFullError("full")
        if what == "timeout":
            raise TimeoutError
        if what == "stopped":
            raise DriverStoppedError("stopped")
        if what == "hold":
            await self.gate.wait()
        return answer_to(req)


async def wait_until(cond: Callable[[], object], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


def serve(sink: ScriptedSink, body: Callable[[pb_grpc.RaftStub, aio.Channel],
                                             Awaitable[None]],
          limits: RpcLimits | None = None) -> None:
    """Run `body` against a real server whose Raft service feeds `sink`."""

    async def main() -> None:
        server = create_server(limits or RpcLimits())
        port = bind(server, "127.0.0.1:0", None)
        add_raft_service(server, sink)
        await server.start()
        channel = create_channel(f"127.0.0.1:{port}")
        try:
            await body(pb_grpc.RaftStub(channel), channel)
        finally:
            await channel.close(grace=None)
            await server.stop(grace=None)

    asyncio.run(main())


# ------------------------------------------------------------------- server side


def test_each_streamed_fetch_is_answered_by_seq_in_the_order_the_core_answers() -> None:
    sink = ScriptedSink()
    sink.script[1] = "hold"

    async def body(stub: pb_grpc.RaftStub, _: aio.Channel) -> None:
        call: Any = stub.FetchStream()  # type: ignore[call-arg]
        await call.write(fetch_pb(1))
        await call.write(fetch_pb(2))
        first = await call.read()
        assert first.seq == 2 and first.header.src == 1 and first.high_watermark == 7
        sink.gate.set()
        second = await call.read()
        assert second.seq == 1
        await call.done_writing()
        assert await call.read() is aio.EOF  # type: ignore[attr-defined]
        assert await call.code() is grpc.StatusCode.OK

    serve(sink, body)
    assert sink.seen == [1, 2]


def test_a_fetch_the_core_cannot_take_is_lost_and_the_stream_goes_on() -> None:
    sink = ScriptedSink()
    sink.script.update({1: "full", 2: "timeout"})

    async def body(stub: pb_grpc.RaftStub, _: aio.Channel) -> None:
        call: Any = stub.FetchStream()  # type: ignore[call-arg]
        for seq in (1, 2, 3):
            await call.write(fetch_pb(seq))
        # Only the third is answered; the others are dropped, like lost messages.
        assert (await call.read()).seq == 3
        await call.done_writing()
        assert await call.read() is aio.EOF  # type: ignore[attr-defined]

    serve(sink, body)
    assert sink.seen == [1, 2, 3]


@pytest.mark.parametrize(("request_kw", "message", "code", "details"), [
    ({"cluster_id": "another-cluster"}, None, grpc.StatusCode.FAILED_PRECONDITION,
     "inconsistent cluster id"),
    ({"dst": 5}, None, grpc.StatusCode.INVALID_ARGUMENT, "addressed to node 5"),
    ({}, pb.FetchRequest(header=pb.Header(cluster_id=CLUSTER, src=2, dst=1), seq=-1),
     grpc.StatusCode.INVALID_ARGUMENT, "malformed request: seq must be in"),
    ({}, pb.FetchRequest(header=pb.Header(cluster_id=CLUSTER, src=2, dst=1), seq=1,
                         max_wait_ms=-5),
     grpc.StatusCode.INVALID_ARGUMENT, "malformed request: max_wait_ms must be in"),
])
def test_bad_input_ends_the_stream_with_the_unary_calls_status(
        request_kw: dict[str, Any], message: pb.FetchRequest | None, code: grpc.StatusCode,
        details: str) -> None:
    sink = ScriptedSink()

    async def body(stub: pb_grpc.RaftStub, _: aio.Channel) -> None:
        call: Any = stub.FetchStream()  # type: ignore[call-arg]
        await call.write(fetch_pb(1))
        assert (await call.read()).seq == 1
        await call.write(message if message is not None else fetch_pb(2, **request_kw))
        with pytest.raises(aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() is code
        assert details in (info.value.details() or "")

    serve(sink, body)
    assert sink.seen == [1]  # the bad request never reached the core


def test_a_stopped_node_ends_the_stream_unavailable() -> None:
    sink = ScriptedSink()
    sink.script[1] = "stopped"

    async def body(stub: pb_grpc.RaftStub, _: aio.Channel) -> None:
        call: Any = stub.FetchStream()  # type: ignore[call-arg]
        await call.write(fetch_pb(1))
        with pytest.raises(aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "not running" in (info.value.details() or "")

    serve(sink, body)


def raw_fetch_stream(channel: aio.Channel) -> Any:
    """FetchStream with bytes as requests (to send what no client would)."""
    return channel.stream_stream("/metakraft.raft.v1.Raft/FetchStream", request_serializer=None,
                                 response_deserializer=pb.FetchResponse.FromString)()  # type: ignore[call-arg]


def test_an_oversized_message_ends_the_stream_resource_exhausted() -> None:
    sink = ScriptedSink()

    async def body(_: pb_grpc.RaftStub, channel: aio.Channel) -> None:
        call = raw_fetch_stream(channel)
        await call.write(fetch_pb(1).SerializeToString() + b"\x00" * 2048)
        with pytest.raises(aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in (info.value.details() or "")

    serve(sink, body, RpcLimits(max_message_bytes=1024))
    assert sink.seen == []


def test_a_message_that_is_no_fetch_request_ends_the_stream_invalid_argument() -> None:
    sink = ScriptedSink()

    async def body(_: pb_grpc.RaftStub, channel: aio.Channel) -> None:
        call = raw_fetch_stream(channel)
        await call.write(fetch_pb(1).SerializeToString())
        assert (await call.read()).seq == 1
        await call.write(b"\xff\xff\xff")
        with pytest.raises(aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed FetchStream request" in (info.value.details() or "")

    serve(sink, body)
    assert sink.seen == [1]


# ------------------------------------------------------------------- client side


class ScriptedFetchServer:
    """A FetchStream server whose handling of each fetch is scripted by seq:
    "answer" (default), "swallow" (never answered), "abort" (the stream ends
    UNAVAILABLE), "impostor" (answered as node 9). With `streams=False` it is an older server without FetchStream."""

    def __init__(self, *, streams: bool = True) -> None:
        self.script: dict[int, str] = {}
        self.streams_opened = 0
        self.unary_fetches: list[int] = []
        self.streamed_fetches: list[int] = []
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "Fetch": grpc.unary_unary_rpc_method_handler(
                self._fetch, request_deserializer=pb.FetchRequest.FromString,
                response_serializer=pb.FetchResponse.SerializeToString)}
        if streams:
            handlers["FetchStream"] = grpc.stream_stream_rpc_method_handler(
                self._fetch_stream, request_deserializer=pb.FetchRequest.FromString,
                response_serializer=pb.FetchResponse.SerializeToString)
        self.handler = grpc.method_handlers_generic_handler("metakraft.raft.v1.Raft", handlers)

    def _answer(self, request: pb.FetchRequest) -> pb.FetchResponse:
        impostor = self.script.get(request.seq) == "impostor"
        req = fetch(request.seq, src=request.header.src,
                    dst=9 if impostor else request.header.dst)
        out = to_pb(answer_to(req))
        assert isinstance(out, pb.FetchResponse)
        return out

    async def _fetch(self, request: pb.FetchRequest, _: Any) -> pb.FetchResponse:
        self.unary_fetches.append(request.seq)
        return self._answer(request)

    async def _fetch_stream(self, requests: AsyncIterator[pb.FetchRequest],
                            context: Any) -> AsyncIterator[pb.FetchResponse]:
        self.streams_opened += 1
        async for request in requests:
            self.streamed_fetches.append(request.seq)
            what = self.script.get(request.seq, "answer")
            if what == "abort":
                await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")
            if what in ("answer", "impostor"):
                yield self._answer(request)


class FakeClock:
    """The streams' monotonic clock, moved by hand (deadlines without sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def with_peers(server: ScriptedFetchServer,
               body: Callable[[PeerClients, list[m.Message]], Awaitable[None]],
               clock: Callable[[], float] | None = None) -> None:
    async def main() -> None:
        grpc_server = create_server()
        port = bind(grpc_server, "127.0.0.1:0", None)
        grpc_server.add_generic_rpc_handlers((server.handler,))
        await grpc_server.start()
        received: list[m.Message] = []

        async def deliver(message: m.Message) -> None:
            received.append(message)

        peers = PeerClients({1: f"127.0.0.1:{port}"}, CLUSTER, StoredBatchCache(),
                            RpcLimits(), 4, deliver, clock=clock or FakeClock())
        try:
            await body(peers, received)
        finally:
            await peers.close()
            await grpc_server.stop(grace=None)

    asyncio.run(main())


def seqs(received: list[m.Message]) -> list[int]:
    return [r.seq for r in received if isinstance(r, m.FetchResponse)]


def test_fetches_share_one_stream_and_answers_are_delivered() -> None:
    server = ScriptedFetchServer()

    async def body(peers: PeerClients, received: list[m.Message]) -> None:
        for seq in (1, 2, 3):
            assert peers.send(fetch(seq), 5.0) is None  # streamed: no unary call task
            await wait_until(lambda n=seq: len(received) == n)  # type: ignore[misc]
        assert seqs(received) == [1, 2, 3]
        assert received[0] == answer_to(fetch(1))
        assert peers.streaming_to(1)

    with_peers(server, body)
    assert server.streams_opened == 1 and server.unary_fetches == []


def test_a_broken_stream_drops_its_fetch_and_the_next_fetch_opens_another() -> None:
    server = ScriptedFetchServer()
    server.script[2] = "abort"

    async def body(peers: PeerClients, received: list[m.Message]) -> None:
        peers.send(fetch(1), 5.0)
        await wait_until(lambda: seqs(received) == [1])
        peers.send(fetch(2), 5.0)
        await wait_until(lambda: not peers.streaming_to(1))
        assert peers.dropped["unavailable"] == 1  # the lost fetch; never resent
        peers.send(fetch(3), 5.0)
        await wait_until(lambda: seqs(received) == [1, 3])

    with_peers(server, body)
    assert server.streams_opened == 2
    assert server.streamed_fetches == [1, 2, 3] and server.unary_fetches == []


def test_a_stream_silent_past_a_fetch_deadline_is_replaced_a_working_one_kept() -> None:
    server = ScriptedFetchServer()
    server.script[1] = "swallow"
    clock = FakeClock()

    async def body(peers: PeerClients, received: list[m.Message]) -> None:
        peers.send(fetch(1), 0.3)
        await wait_until(lambda: server.streamed_fetches == [1])
        clock.now += 0.2  # before fetch 1's deadline: the stream is kept
        peers.send(fetch(2), 5.0)
        await wait_until(lambda: seqs(received) == [2])
        clock.now += 0.1  # fetch 1 is now overdue, but the stream answered since
        peers.send(fetch(3), 5.0)
        await wait_until(lambda: seqs(received) == [2, 3])
        assert server.streams_opened == 1 and peers.dropped["deadline_exceeded"] == 0
        server.script[4] = "swallow"
        peers.send(fetch(4), 0.3)
        await wait_until(lambda: server.streamed_fetches == [1, 2, 3, 4])
        clock.now += 0.3  # past fetch 4's deadline and nothing came back since it went
        peers.send(fetch(5), 5.0)
        await wait_until(lambda: seqs(received) == [2, 3, 5])
        assert peers.dropped["deadline_exceeded"] == 1  # fetch 4, on the replaced stream

    with_peers(server, body, clock)
    assert server.streams_opened == 2


def test_unanswered_streamed_fetches_are_bounded() -> None:
    server = ScriptedFetchServer()
    server.script.update({s: "swallow" for s in range(1, 6)})

    async def body(peers: PeerClients, received: list[m.Message]) -> None:
        for seq in range(1, 6):  # the bound is 4
            peers.send(fetch(seq), 5.0)
        assert peers.dropped["too_many_inflight"] == 1
        await wait_until(lambda: server.streamed_fetches == [1, 2, 3, 4])

    with_peers(server, body)


def test_a_server_without_fetch_stream_gets_unary_fetches_and_loses_none() -> None:
    server = ScriptedFetchServer(streams=False)

    async def body(peers: PeerClients, received: list[m.Message]) -> None:
        peers.send(fetch(1), 5.0)
        # The fetch the stream could not carry is sent again, unary, at once.
        await wait_until(lambda: seqs(received) == [1])
        assert peers.unary_fetch == {1} and not peers.streaming_to(1)
        task = peers.send(fetch(2), 5.0)
        assert task is not None
        await task
        assert seqs(received) == [1, 2]
        assert sum(peers.dropped.values()) == 0

    with_peers(server, body)
    assert server.unary_fetches == [1, 2]


def test_a_swallowed_fetch_past_its_deadline_is_not_sent_again_unary() -> None:
    server = ScriptedFetchServer(streams=False)
    clock = FakeClock()

    async def body(peers: PeerClients, received: list[m.Message]) -> None:
        peers.send(fetch(1), 0.3)
        clock.now += 0.5  # past its deadline before UNIMPLEMENTED comes back
        await wait_until(lambda: peers.unary_fetch == {1})
        assert peers.dropped["deadline_exceeded"] == 1  # the core has retried it by now
        task = peers.send(fetch(2), 5.0)
        assert task is not None
        await task
        assert seqs(received) == [2]

    with_peers(server, body, clock)
    assert server.unary_fetches == [2]


def test_answers_from_another_node_or_cluster_are_dropped() -> None:
    server = ScriptedFetchServer()
    server.script[1] = "impostor"

    async def body(peers: PeerClients, received: list[m.Message]) -> None:
        peers.send(fetch(1), 5.0)
        await wait_until(lambda: peers.dropped["misaddressed_reply"] == 1)
        peers.send(fetch(2), 5.0)
        await wait_until(lambda: seqs(received) == [2])

    with_peers(server, body)
