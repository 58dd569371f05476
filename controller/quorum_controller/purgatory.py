"""The purgatory: write responses waiting for the batch they depend on to commit.

An entry names one batch by identity -- (base offset, last offset, Raft epoch) --
and holds the response computed when the batch was generated. One leader per
epoch and a leader never rewrites its own epoch, so the batch committed at that
base offset with that epoch and last offset is exactly ours. A request that
produced no records waits on the newest batch before it (its answer was read
from state that batch changed), under the same identity.

Outcomes, decided only by what commits (so they are exact, also after this node
lost leadership -- a batch it appended may still be committed by the next leader):

- the batch commits: the response is released (`on_success`);
- another batch commits at or over its offsets, or a batch of a newer epoch
  commits before it (every later committed batch then has that newer epoch): it
  never will; the request was not applied (`on_lost`);
- its wait after leadership was lost runs out, or this node appends over it:
  the outcome is not known here (`on_unknown`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import attrs

from controller.logformat.batch import RecordBatch


@attrs.frozen(slots=True)
class BatchKey:
    """The identity of one appended batch."""

    base_offset: int
    last_offset: int
    epoch: int

    def matches(self, batch: RecordBatch) -> bool:
        return (self.base_offset, self.last_offset, self.epoch) == (
            batch.base_offset,
            batch.last_offset,
            batch.epoch,
        )


@attrs.define(slots=True)
class Waiter:
    key: BatchKey
    # Called with the outcome; each waiter is settled exactly once. `on_success`
    # gets the time of the commit (ms).
    on_success: Callable[[int], None]
    on_lost: Callable[[], None]
    on_unknown: Callable[[], None]
    # Set once leadership is lost: past it the outcome is reported unknown.
    deadline_ms: int | None = None


class Purgatory:
    def __init__(self) -> None:
        # Ascending key base offset (appends only grow while leading; entries of
        # an older leadership are dropped before a new append could go below them).
        self._waiting: deque[Waiter] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, waiter: Waiter) -> None:
        new = waiter.key
        stale = [w for w in self._waiting if w.key.base_offset > new.base_offset
                 or (w.key.base_offset == new.base_offset and w.key != new)]
        if stale:
            # We append where an older, unresolved batch of ours sat: our own log
            # no longer holds it, yet another voter might. Say so honestly.
            self._drop(stale)
            for w in stale:
                w.on_unknown()
        self._waiting.append(waiter)

    def committed(self, batch: RecordBatch, now_ms: int) -> None:
        """`batch` committed (batches arrive in log order) at `now_ms`."""
        waiting = self._waiting
        while waiting and waiting[0].key.base_offset <= batch.last_offset:
            w = waiting.popleft()
            if w.key.matches(batch):
                w.on_success(now_ms)
            else:
                w.on_lost()
        if waiting and waiting[0].key.epoch < batch.epoch:
            # A newer epoch committed below them: the log past it is that epoch's.
            keep: deque[Waiter] = deque()
            for w in waiting:
                if w.key.epoch < batch.epoch:
                    w.on_lost()
                else:
                    keep.append(w)
            self._waiting = keep

    def orphan(self, deadline_ms: int) -> None:
        """Leadership was lost: keep waiting for the fate, but not past `deadline_ms`."""
        for w in self._waiting:
            if w.deadline_ms is None:
                w.deadline_ms = deadline_ms

    def expire(self, now_ms: int) -> int:
        """Settle orphans past their deadline as unknown; how many."""
        expired = [w for w in self._waiting if w.deadline_ms is not None and now_ms >= w.deadline_ms]
        self._drop(expired)
        for w in expired:
            w.on_unknown()
        return len(expired)

    def _drop(self, gone: list[Waiter]) -> None:
        if gone:
            ids = {id(w) for w in gone}
            self._waiting = deque(w for w in self._waiting if id(w) not in ids)

    def fail_all(self) -> None:
        """Shutdown: every outcome is unknown."""
        waiting, self._waiting = self._waiting, deque()
        for w in waiting:
            w.on_unknown()
