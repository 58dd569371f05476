"""`WakeTimer`: one timer, moved only sooner; a cancelled one never fires."""

from __future__ import annotations

import asyncio

from controller.wake_timer import WakeTimer


def test_the_timer_fires_once_at_the_soonest_time_asked_of_it() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        timer = WakeTimer(lambda: fired.append(loop.time()))
        asked = loop.time()
        timer.wake_within(30.0)
        timer.wake_within(0.02)  # sooner: moves it
        timer.wake_within(60.0)  # later: keeps the sooner one
        while not fired:
            assert loop.time() < asked + 10, "never fired"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert len(fired) == 1 and fired[0] >= asked + 0.019  # (clock resolution)
        # Fired: the next ask sets it again; a cancelled timer never fires.
        timer.wake_within(0.01)
        timer.cancel()
        await asyncio.sleep(0.05)
        assert len(fired) == 1

    asyncio.run(main())
