"""The watchers' shared view of one controller: how far it has committed, a wake-up
for watchers waiting at the end, and the decoded changes of recent batches.

The controller calls `advance` after each commit (on its event loop, so no lock).
A watcher at the end awaits `wait_beyond`; nothing is pushed to watchers, so the
controller never buffers for a slow one (each reads the log at its own pace). The
decoded-changes cache is bounded (`max_cached_batches`), and shared: a hundred
watchers of the live tail decode each batch once.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from controller.logformat import RecordBatch
from controller.watch.events import Change, changes_of

DEFAULT_MAX_CACHED_BATCHES = 2_048


class WatchHub:
    def __init__(self, max_cached_batches: int = DEFAULT_MAX_CACHED_BATCHES) -> None:
        assert max_cached_batches > 0, max_cached_batches
        # Every record below it is committed (and replayed) on this controller.
        self.committed_offset = 0
        self._advanced: asyncio.Event | None = None
        self._cache: OrderedDict[tuple[int, int, int], tuple[Change, ...]] = OrderedDict()
        self._max_cached = max_cached_batches
        # Watches open on this controller now (the limit is the service's).
        self.watchers = 0
        self.decoded_batches = 0

    def advance(self, committed_offset: int) -> None:
        """The controller committed up to `committed_offset` (it may go down only when
        a snapshot replaced the state: never below what was committed, in practice)."""
        if committed_offset == self.committed_offset:
            return
        self.committed_offset = committed_offset
        self.wake_all()

    def wake_all(self) -> None:
        """Wake every waiter (they look again at the committed end, or at why else
        they should stop)."""
        if self._advanced is not None:
            self._advanced.set()
            self._advanced = None

    async def wait_beyond(self, offset: int, timeout_s: float) -> bool:
        """Wait until something at or above `offset` is committed, `wake_all` is
        called, or `timeout_s` passes; whether something is."""
        if self.committed_offset > offset:
            return True
        if self._advanced is None:
            self._advanced = asyncio.Event()
        event = self._advanced
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass
        return self.committed_offset > offset

    def changes(self, batch: RecordBatch) -> tuple[Change, ...]:
        """The batch's records decoded (a committed batch never changes: cached by its
        offset, epoch and size)."""
        key = (batch.base_offset, batch.epoch, len(batch.records))
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        decoded = changes_of(batch)
        self.decoded_batches += 1
        self._cache[key] = decoded
        if len(self._cache) > self._max_cached:
            self._cache.popitem(last=False)
        return decoded
