"""What a watch must deliver, from the log itself: the oracle the watch tests compare
a watcher's offsets with."""

from __future__ import annotations

from collections.abc import Iterable

from controller.logformat import RecordBatch
from controller.watch.events import TopicNames, WatchSpec, changes_of


def watched_offsets(batches: Iterable[RecordBatch], below: int,
                    spec: WatchSpec | None = None) -> list[int]:
    """The offsets a watch with `spec` (default: the default kinds) from offset 0 must
    deliver below `below`, given the log's batches in order (a batch read twice, as
    at the edge of two pieces of a history, counts once)."""
    spec = spec or WatchSpec()
    names = TopicNames(lambda _tid: None)
    out: list[int] = []
    for batch in batches:
        fresh = [c for c in changes_of(batch) if not out or c.offset > out[-1]]
        out += [c.offset for c, _ in spec.select(fresh, 0, names, lambda _t: True, True)
                if c.offset < below]
    return out
