"""The Admin service's multiplexed ``Stream`` RPC: many unary requests on one stream.

Why: a unary call costs grpc.aio far more than a stream message (call setup, a
task, metadata, status), and at a few thousand small requests a second that cost
was half of the active controller's CPU. Each item is handed to the very handler
its unary call would run (``handlers.decoding`` + the service method), with a
per-item context whose ``abort`` ends only that item: validation, limits, origin
and the error contract are the unary ones by construction. The framing is
documented with ``StreamRequest`` in admin.proto.

Items run concurrently (at most ``MAX_IN_FLIGHT`` per stream; beyond that the
stream is not read, so HTTP/2 flow control pushes back); answers are written as
they finish, one write at a time (gRPC allows one outstanding send per call).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, Protocol

import grpc
from google.protobuf import message as pb_message

from controller.api import admin_pb2 as apb
from controller.log import get_logger

# Items of one stream handled at once; more wait unread in the stream.
MAX_IN_FLIGHT = 128


class Context(Protocol):
    """What a handler uses of its gRPC context (a unary call's, or one stream item's)."""

    def peer(self) -> str: ...

    def auth_context(self) -> Mapping[str, Sequence[bytes]]: ...

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str]] = (),
    ) -> NoReturn: ...

    def set_trailing_metadata(self, trailing_metadata: Sequence[tuple[str, str]]) -> None: ...


# A unary method behind our own request decoding: raw request bytes in, message out.
RawHandler = Callable[[bytes, Context], Awaitable[Any]]


class ItemAborted(Exception):
    """A stream item's handler aborted: the status its unary call would end with."""

    def __init__(
        self, code: grpc.StatusCode, details: str, trailing: Sequence[tuple[str, str]]
    ) -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.trailing = trailing

log = get_logger(__name__)


class ItemContext:
    """The context of one stream item: the stream's peer and TLS identity; ``abort``
    ends this item only."""

    def __init__(self, peer: str, auth: Mapping[str, Sequence[bytes]]) -> None:
        self._peer = peer
        self._auth = auth
        # What a successful answer carries as its unary call's trailing metadata.
        self.trailing: Sequence[tuple[str, str]] = ()

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> Mapping[str, Sequence[bytes]]:
        return self._auth

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str]] = (),
    ) -> NoReturn:
        raise ItemAborted(code, details, trailing_metadata)

    def set_trailing_metadata(self, trailing_metadata: Sequence[tuple[str, str]]) -> None:
        self.trailing = tuple(trailing_metadata)


def _status(
    item_id: int, code: grpc.StatusCode, details: str, trailing: Sequence[tuple[str, str]] = ()
) -> apb.StreamResponse:
    return apb.StreamResponse(
        id=item_id, status_code=code.value[0], status_details=details, trailing=dict(trailing)
    )


class StreamMultiplexer:
    """Serves ``Stream`` over a table of unary handlers (method name -> handler)."""

    def __init__(self, unary: Mapping[str, RawHandler],
                 closing: asyncio.Event | None = None) -> None:
        """`closing`: set when the server is about to stop; open streams then answer
        what they already read and end normally (OK), instead of being cancelled by
        the server's stop (which gRPC logs as an ERROR with a traceback)."""
        self._unary = dict(unary)
        self._closing = closing

    async def answer(self, item: apb.StreamRequest, context: ItemContext) -> apb.StreamResponse:
        """One item's answer; never raises (but is cancellable)."""
        handler = self._unary.get(item.method)
        if handler is None:
            return _status(
                item.id,
                grpc.StatusCode.UNIMPLEMENTED,
                f"unknown method {item.method!r}; the stream carries: {', '.join(self._unary)}",
            )
        try:
            if item.timeout_ms:
                async with asyncio.timeout(item.timeout_ms / 1000):
                    response = await handler(item.payload, context)
            else:
                response = await handler(item.payload, context)
        except ItemAborted as exc:
            return _status(item.id, exc.code, exc.details, exc.trailing)
        except TimeoutError:
            return _status(
                item.id,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the controller did not answer {item.method} within {item.timeout_ms} ms; "
                "a write may still be applied: check its effect before retrying",
            )
        return apb.StreamResponse(id=item.id, payload=response.SerializeToString(),
                                  trailing=dict(context.trailing))

    async def serve(self, requests: AsyncIterator[bytes], context: Any) -> None:
        """The ``Stream`` handler (raw request bytes; answers written on ``context``)."""
        peer = context.peer() or ""
        auth = context.auth_context()  # one TLS session per stream: read it once
        write_lock = asyncio.Lock()
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        in_flight: dict[int, asyncio.Task[None]] = {}

        async def run(item: apb.StreamRequest) -> None:
            try:
                response = await self.answer(item, ItemContext(peer, auth))
                async with write_lock:
                    try:
                        await context.write(response)
                    except Exception as exc:
                        # The caller went away (its call ended): nobody to answer, and
                        # nobody awaits this task to hear of it. A write may still
                        # be applied, as when a unary call is cancelled.
                        log.info("stream_answer_dropped", peer=peer, method=item.method,
                                 id=item.id, error=type(exc).__name__)
            finally:
                del in_flight[item.id]
                slots.release()

        async def read() -> str:
            async for raw in requests:
                try:
                    item = apb.StreamRequest.FromString(raw)
                except pb_message.DecodeError as exc:
                    return f"a stream message does not decode as a StreamRequest ({exc})"
                if item.id in in_flight:
                    return f"request id {item.id} is already in flight on this stream"
                await slots.acquire()
                in_flight[item.id] = asyncio.create_task(run(item))
            return ""

        problem = ""
        reader = asyncio.create_task(read())
        try:
            if self._closing is None:
                problem = await reader
            else:
                closing = asyncio.create_task(self._closing.wait())
                try:
                    await asyncio.wait((reader, closing), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    closing.cancel()
                if reader.done():
                    problem = reader.result()
                else:  # the server is stopping: read no more
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reader
            # The caller half-closed (or sent garbage, or the server stops): answer
            # what it already sent.
            if in_flight:
                await asyncio.gather(*in_flight.values(), return_exceptions=True)
        finally:
            reader.cancel()
            # Cancelled (the caller went away): nobody is left to answer. A cancelled
            # write may still be applied, exactly as when a unary call is cancelled.
            for task in list(in_flight.values()):
                task.cancel()
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed Stream: {problem}")
