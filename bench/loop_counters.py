"""Event-loop work counters for a controller process (`controller_bench.py create --count-loop`).

Imported by the controller's launch line before the CLI: it wraps, at class level,
what a request can cost the event loop and counts each call in the process:

- `turns`: iterations of the loop (`BaseEventLoop._run_once`), each a select and
  the callbacks ready then;
- `callbacks`: `call_soon` (every task step and future callback goes through it),
  `timers`: `call_at` (`call_later` goes through it);
- `tasks` (`create_task`), `futures` (`create_future`);
- `threadsafe`: `call_soon_threadsafe`, a wake-up of the loop from another thread
  (gRPC's poller, the log flush, executors' results);
- `executor`: `run_in_executor` (`asyncio.to_thread` too), a hand-off to a thread.

A daemon thread writes the counts as JSON to `$METAKRAFT_LOOP_COUNTS_DIR/<pid>.json`
every 200 ms; the bench reads the active controller's file at the start and the end
of its window and divides by the writes in it. The wrappers cost time themselves,
so a counted run's throughput is not a figure to quote.
"""

from __future__ import annotations

import asyncio.base_events as base_events
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

COUNTS: Counter[str] = Counter()
WRITE_INTERVAL_S = 0.2


def _counting(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        COUNTS[name] += 1
        return method(*args, **kwargs)

    return wrapper


def install(directory: Path) -> None:
    loop_class = base_events.BaseEventLoop
    for name, attr in (("turns", "_run_once"), ("callbacks", "call_soon"),
                       ("timers", "call_at"), ("tasks", "create_task"),
                       ("futures", "create_future"), ("threadsafe", "call_soon_threadsafe"),
                       ("executor", "run_in_executor")):
        setattr(loop_class, attr, _counting(name, getattr(loop_class, attr)))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{os.getpid()}.json"

    def dump() -> None:
        while True:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(dict(COUNTS)))
            tmp.replace(path)
            time.sleep(WRITE_INTERVAL_S)

    threading.Thread(target=dump, name="loop-counters", daemon=True).start()


def read(directory: Path, pid: int) -> Counter[str]:
    path = directory / f"{pid}.json"
    return Counter(json.loads(path.read_text())) if path.exists() else Counter()


_where = os.environ.get("METAKRAFT_LOOP_COUNTS_DIR")
if _where:
    install(Path(_where))
