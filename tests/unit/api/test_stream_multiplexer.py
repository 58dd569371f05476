"""`StreamMultiplexer.serve` when the caller goes away while answers are in flight."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from controller.api import admin_pb2 as apb
from controller.api.stream import ItemContext, StreamMultiplexer


class GoneCallerContext:
    """A call whose client went away: every write fails, as grpc.aio's do then."""

    def __init__(self) -> None:
        self.writes = 0

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def auth_context(self) -> Mapping[str, Sequence[bytes]]:
        return {}

    async def write(self, response: object) -> None:
        self.writes += 1
        raise RuntimeError("the RPC has already finished")

    async def abort(self, code: object, details: str) -> None:
        raise AssertionError(f"unexpected abort {code}: {details}")


async def _echo(payload: bytes, context: ItemContext) -> apb.ListTopicsResponse:
    return apb.ListTopicsResponse()


def test_an_answer_to_a_caller_that_went_away_is_dropped_without_an_error() -> None:
    unhandled: list[dict[str, Any]] = []

    async def main() -> int:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unhandled.append(ctx))
        held = asyncio.Event()

        async def requests() -> AsyncIterator[bytes]:
            yield apb.StreamRequest(id=1, method="ListTopics").SerializeToString()
            await held.wait()  # the client never half-closes: its call is cancelled

        context = GoneCallerContext()
        mux = StreamMultiplexer({"ListTopics": _echo})
        serving = asyncio.create_task(mux.serve(requests(), context))
        while context.writes == 0:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)  # the answer's task ends
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        gc.collect()  # an unretrieved task exception is reported when the task goes
        await asyncio.sleep(0)
        return context.writes

    assert asyncio.run(main()) == 1
    assert unhandled == [], unhandled
