"""The log's flusher thread: results and errors reach the awaiting task, and close
waits for the flush it is running (nothing may flush behind the final flush)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from controller.quorum.flusher import LogFlusher


def test_each_flush_runs_on_the_thread_and_returns_its_offset() -> None:
    threads: list[str] = []
    offsets = iter(range(10, 100, 10))

    def flush() -> int:
        threads.append(threading.current_thread().name)
        return next(offsets)

    async def main() -> list[int]:
        flusher = LogFlusher(flush, name="flush-test")
        try:
            return [await flusher.flush() for _ in range(3)]
        finally:
            flusher.close()

    assert asyncio.run(main()) == [10, 20, 30]
    assert threads == ["flush-test"] * 3


def test_a_failed_flush_fails_the_awaiting_task() -> None:
    def flush() -> int:
        raise OSError(5, "Input/output error")

    async def main() -> None:
        flusher = LogFlusher(flush, name="flush-test")
        try:
            with pytest.raises(OSError, match="Input/output error"):
                await flusher.flush()
        finally:
            flusher.close()

    asyncio.run(main())


def test_close_waits_for_the_running_flush() -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def flush() -> int:
        started.set()
        release.wait(5)
        finished.append(True)
        return 1

    async def main() -> None:
        flusher = LogFlusher(flush, name="flush-test")
        pending = asyncio.ensure_future(flusher.flush())
        await asyncio.to_thread(started.wait, 5)
        closing = asyncio.ensure_future(asyncio.to_thread(flusher.close))
        await asyncio.sleep(0.05)
        assert not closing.done()  # still running the flush
        release.set()
        await closing
        assert finished == [True]
        assert await pending == 1
        with pytest.raises(AssertionError, match="closed"):
            await flusher.flush()

    asyncio.run(main())
