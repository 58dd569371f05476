"""`gc_paused()`: no cyclic garbage collection while a bulk step builds objects.

Building an image from a million-partition snapshot allocates millions of objects
and no cycles; CPython's collector would still run its full (oldest generation)
pass several times over everything built so far, for nothing. Reference counting
still frees memory meanwhile. Nested and concurrent uses (the loader and the
reconcile worker) keep it paused until the last one leaves; one collection then.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = True


@contextmanager
def gc_paused() -> Iterator[None]:
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
