"""`FetchStream`: a fetcher's end of the Raft `FetchStream` RPC, one per peer.

Why: a follower fetches from the leader a few times per commit (the batch, then
the high watermark that commits it), and each unary call costs grpc.aio far more
CPU on both ends than a message on a stream that stays open (the Admin service's
`Stream` was added for the same reason).

The Raft contract is unchanged: a fetch written here whose answer never comes is
a lost message, which the core's own request timeout retries with a new `seq`.
Answers go to `on_answer` as they come (matched to their fetch by `seq`, by the
core). The stream never resends anything by itself.

Ending. The stream ends when its call does (the peer went away, refused bad
input, or is an older server without `FetchStream`: UNIMPLEMENTED); `on_end` then
gets the status and the fetches left unanswered, and the owner opens a new stream
for the next fetch (or falls back to unary calls). A stream whose oldest fetch is
past its deadline while nothing at all came back since it was sent is taken for
stuck and cancelled, so a wedged call cannot swallow fetches for longer than one
request timeout (the unary call would have hit its deadline the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import attrs
import grpc
from grpc import aio

from controller.quorum import raft_service_pb2 as pb
from controller.raft.messages import FetchRequest

logger = logging.getLogger(__name__)

SendOutcome = Literal["sent", "full", "ended"]


@attrs.frozen(slots=True)
class Unanswered:
    """A fetch written on the stream and not answered yet."""

    request: FetchRequest
    sent_at: float
    deadline: float


class FetchStream:
    """One open `FetchStream` call: `send` queues a fetch, answers come to
    `on_answer`. Not thread-safe: the event loop's task only."""

    def __init__(self, stub: Any, on_answer: Callable[[pb.FetchResponse], Awaitable[None]],
                 on_end: Callable[[FetchStream, grpc.StatusCode, list[Unanswered]], None],
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        self._call: Any = stub.FetchStream()  # an aio StreamStreamCall, written below
        self._on_answer = on_answer
        self._on_end = on_end
        self._clock = clock
        self._outbox: asyncio.Queue[pb.FetchRequest] = asyncio.Queue()
        # By seq, oldest first (a dict keeps insertion order).
        self._unanswered: dict[int, Unanswered] = {}
        self._last_answer_at = -1.0
        self.ended = False
        self._writer = asyncio.create_task(self._write_all())
        self._reader = asyncio.create_task(self._read_all())

    def send(self, req: FetchRequest, message: pb.FetchRequest, timeout_s: float,
             max_unanswered: int) -> SendOutcome:
        """Queue `req` (as `message`). "ended": the stream is ended, or stuck and now
        ended (the caller opens another); "full": `max_unanswered` fetches are
        outstanding (dropped)."""
        if self.ended:
            return "ended"
        now = self._clock()
        oldest = next(iter(self._unanswered.values()), None)
        if oldest is not None and now >= oldest.deadline:
            if self._last_answer_at <= oldest.sent_at:
                self.end(grpc.StatusCode.DEADLINE_EXCEEDED)
                return "ended"
            # Answered since, so the stream works: those fetches were dropped (the
            # core retried them with another seq by now).
            self._unanswered = {s: u for s, u in self._unanswered.items() if now < u.deadline}
        if len(self._unanswered) >= max_unanswered:
            return "full"
        self._unanswered[req.seq] = Unanswered(req, now, now + timeout_s)
        self._outbox.put_nowait(message)
        return "sent"

    def unanswered(self) -> int:
        return len(self._unanswered)

    def end(self, code: grpc.StatusCode) -> None:
        """Cancel the call (if it still runs) and report the end once."""
        if self.ended:
            return
        self.ended = True
        self._call.cancel()
        self._writer.cancel()
        if asyncio.current_task() is not self._reader:
            self._reader.cancel()
        left = list(self._unanswered.values())
        self._unanswered.clear()
        self._on_end(self, code, left)

    async def close(self) -> None:
        self.end(grpc.StatusCode.CANCELLED)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(self._writer, self._reader, return_exceptions=True)

    async def _write_all(self) -> None:
        try:
            while True:
                message = await self._outbox.get()
                await self._call.write(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the call ended: the reader reports its status
            logger.debug("fetch stream write failed: %r", exc)

    async def _read_all(self) -> None:
        code = grpc.StatusCode.OK
        try:
            while True:
                answer = await self._call.read()
                if answer is aio.EOF:
                    # The server ended the stream without a status error (it never
                    # does while serving): nothing more will be answered here.
                    code = grpc.StatusCode.UNAVAILABLE
                    break
                self._last_answer_at = self._clock()
                self._unanswered.pop(answer.seq, None)
                await self._on_answer(answer)
        except aio.AioRpcError as exc:
            code = exc.code()
        except asyncio.CancelledError:
            if self.ended:
                return
            raise
        self.end(code)
