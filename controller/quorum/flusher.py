"""The log's fsync on a thread of its own, woken once per group commit.

The driver's node task is the log's only writer and waits for each flush while the
event loop goes on (sending, accepting requests: the next flush covers all of them).
`asyncio.to_thread` did that with a thread-pool submit per flush: a context copy, a
work item and a concurrent future, the pool's queue and its idle-thread bookkeeping,
then a second future chained to the loop's. A profile of the leader under small
writes put that hand-off above `fdatasync` itself. Here one thread waits on a
condition for the next request and hands the result back with one
`call_soon_threadsafe`.

At most one flush is outstanding (the node task awaits each); `close` stops the
thread after the one running, so nothing flushes behind the driver's final flush.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


class LogFlusher:
    def __init__(self, flush: Callable[[], int], name: str) -> None:
        self._flush = flush
        self._cond = threading.Condition()
        self._request: tuple[asyncio.AbstractEventLoop, asyncio.Future[int]] | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    async def flush(self) -> int:
        """Run the flush on the flusher thread; its result (the flushed offset)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        with self._cond:
            assert not self._closed, "flusher closed"
            assert self._request is None, "one flush at a time"
            self._request = (loop, future)
            self._cond.notify()
        return await future

    def close(self) -> None:
        """Stop the thread (after the flush it is running, if any) and wait for it."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._request is None and not self._closed:
                    self._cond.wait()
                if self._request is None:
                    return  # closed, nothing asked
                loop, future = self._request
                self._request = None
            try:
                result = self._flush()
            except BaseException as exc:  # handed to the awaiting task, which fails the node
                loop.call_soon_threadsafe(_fail, future, exc)
            else:
                loop.call_soon_threadsafe(_done, future, result)


def _done(future: asyncio.Future[int], result: int) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[int], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
