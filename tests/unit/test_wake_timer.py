"""`WakeTimer`: one timer at the time last asked (sooner or later); a cancelled one
never fires."""

from __future__ import annotations

import asyncio

from controller.wake_timer import WakeTimer


def test_the_timer_fires_once_at_the_time_last_asked_of_it() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        timer = WakeTimer(lambda: fired.append(loop.time()))
        asked = loop.time()
        timer.wake_in(30.0)
        timer.wake_in(0.02)  # sooner: moved
        while not fired:
            assert loop.time() < asked + 10, "never fired"
            await asyncio.sleep(0.01)
        assert len(fired) == 1 and fired[0] >= asked + 0.019  # (clock resolution)
        # A deadline that moved later: the early time costs no wake.
        timer.wake_in(0.01)
        timer.wake_in(30.0)
        await asyncio.sleep(0.1)
        assert len(fired) == 1
        # A cancelled timer never fires.
        timer.wake_in(0.01)
        timer.cancel()
        await asyncio.sleep(0.05)
        assert len(fired) == 1

    asyncio.run(main())
