"""The garbage collector and the metadata image: millions of long-lived objects.

`GcPolicy` (the controller daemon) keeps full passes short on a large heap;
`gc_paused()` turns the collector off while a bulk step builds objects.

`GcPolicy`. Why: CPython's pass over its oldest generation walks every tracked object, and the
metadata image is millions of them (a partition is a few). Measured while
100-partition topics were being created at 16 clients: with 600k partitions in
memory the active controller stopped for 60-265 ms in such a pass every ~1.3 s,
and every write of the cluster waited (it was the p99 of those writes, ~150 ms).
Almost every pass found nothing to collect: the image is not garbage, and it has
no reference cycles to speak of.

What: when a full pass ends, its survivors are moved to the permanent generation
(`gc.freeze()`), so the next full pass walks only what was created since. Frozen
objects are still freed by reference counting when dropped; what a frozen heap
cannot reclaim is a reference *cycle* that was alive at a freeze and died after
it. So once every `thaw_interval_s` (10 minutes) the permanent generation is
thawed at the start of a full pass (`gc.unfreeze()`): that pass walks everything
once -- one long pause per interval instead of one every second or so -- and
reclaims those cycles, and its survivors are frozen again.

Freezing right at the end of a full pass, inside the collector's callback, freezes
exactly the pass's survivors: the younger generations are empty at that point.

`gc_paused()`. Building an image from a million-partition snapshot allocates
millions of objects and no cycles; the collector would still run its full pass
several times over everything built so far, for nothing. Reference counting still
frees memory meanwhile. Nested and concurrent uses (the broker agent's loader and
its reconcile worker) keep it paused until the last one leaves.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from controller.log import get_logger

log = get_logger("metakraft.gc")

THAW_INTERVAL_S = 600.0
_OLDEST = 2


class GcPolicy:
    """Freeze the survivors of each full pass; thaw every `thaw_interval_s`.

    Install once per process (`install`); `uninstall` thaws and removes it."""

    def __init__(self, thaw_interval_s: float = THAW_INTERVAL_S,
                 clock_s: Callable[[], float] = time.monotonic) -> None:
        assert thaw_interval_s > 0
        self.thaw_interval_s = thaw_interval_s
        self._clock_s = clock_s
        self._thawed_at_s = clock_s()
        self.freezes = 0
        self.thaws = 0

    def install(self) -> None:
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        gc.unfreeze()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != _OLDEST:
            return
        if phase == "start":
            now_s = self._clock_s()
            if now_s - self._thawed_at_s >= self.thaw_interval_s:
                frozen = gc.get_freeze_count()
                # Into the oldest generation, which this very pass walks.
                gc.unfreeze()
                self._thawed_at_s = now_s
                self.thaws += 1
                log.info("gc_thaw", objects=frozen)
        elif phase == "stop":
            gc.freeze()
            self.freezes += 1


_lock = threading.Lock()
_depth = 0
_was_enabled = True


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside (nested and concurrent uses allowed)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
