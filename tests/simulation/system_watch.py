"""A Watch client inside the whole-system simulation.

It follows the log from offset 0 through the real watch code (`HistoryReader`,
`WatchHub`'s decoded changes, `WatchSpec.select`), reading one simulated
controller's log below that controller's committed offset, as the Watch service
does; when its controller crashes, pauses or no longer holds its next offset
(compacted into a snapshot), it resumes at another from its token, as the client
does. Checked on every delivery: the batch is the committed one at its offset
(never an uncommitted tail a controller may still truncate); at the end: what it
delivered is exactly what the committed log holds up to its token, in order, each
once.
"""

from __future__ import annotations

import random
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from controller.logformat import RecordBatch
from controller.raft.log import MemoryRaftLog
from controller.watch.events import TopicNames, WatchSpec, changes_of
from controller.watch.history import HistoryReader, HistoryUnavailableError
from controller.watch.hub import WatchHub
from tests.simulation.invariants import InvariantViolation, same_batch

if TYPE_CHECKING:
    from tests.simulation.nodes import SimNode
    from tests.simulation.system import SystemCluster

# Bytes one step reads (a few batches: watchers interleave with everything else).
_READ_BYTES = 2_000


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """A coroutine that never awaits anything (no tier here), run to its value."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the watch read awaited something: it has no tier to wait for")


class SimLocalLog:
    """A simulated controller's log as the watch reads it (`LocalLog`)."""

    def __init__(self, log: MemoryRaftLog) -> None:
        self._log = log

    def local_start_offset(self) -> int:
        return self._log.retained_start_offset

    def read_committed_batches(self, from_offset: int, to_offset: int,
                               max_bytes: int) -> list[RecordBatch]:
        return [b for b in self._log.read(from_offset, 64, max_bytes) if b.base_offset < to_offset]


class SimWatcher:
    def __init__(self, cluster: SystemCluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.hub = WatchHub()
        self.spec = WatchSpec()
        self.names = TopicNames(lambda _topic_id: None)
        self.next_offset = 0
        self.delivered: list[int] = []
        self.node_id: int | None = None
        self.resumptions = 0
        # The history it needs was compacted on every controller (no tier here).
        self.out_of_range = False

    def _serving(self) -> SimNode | None:
        """Its controller if it still serves, else another that does (a resumption)."""
        up = [n for n in self.cluster.nodes.values()
              if n.raft is not None and not n.paused and self.cluster.controller_of(n) is not None]
        for node in up:
            if node.id == self.node_id:
                return node
        if not up:
            return None
        node = self.rng.choice(up)
        if self.node_id is not None:
            self.resumptions += 1
        self.node_id = node.id
        return node

    def step(self) -> None:
        if self.out_of_range:
            return
        node = self._serving()
        if node is None:
            return
        machine = self.cluster.controller_of(node)
        assert machine is not None
        committed = machine.committed_offset
        if self.next_offset >= committed:
            return
        reader = HistoryReader(SimLocalLog(node.log), None, _READ_BYTES)
        try:
            batches: list[RecordBatch] = run_sync(reader.read(self.next_offset, committed))
        except HistoryUnavailableError:
            self.node_id = None  # this one compacted it: resume at another
            if all(n.log.retained_start_offset > self.next_offset
                   for n in self.cluster.nodes.values() if n.is_voter):
                self.out_of_range = True
            return
        history = self.cluster.history
        for batch in batches:
            known = history.committed.get(batch.base_offset)
            if known is None or not same_batch(known, batch):
                raise InvariantViolation(
                    f"a watch at node {node.id} delivered the batch at {batch.base_offset} "
                    f"(committed offset {committed}), which is not the committed one")
            self.delivered += [c.offset for c, _ in self.spec.select(
                self.hub.changes(batch), self.next_offset, self.names,
                lambda _topic: True, True)]
            self.next_offset = max(self.next_offset, batch.next_offset)

    def check(self) -> None:
        """Everything the committed log holds below its token, in order, once."""
        names = TopicNames(lambda _topic_id: None)
        want: list[int] = []
        for base in sorted(self.cluster.history.committed):
            batch = self.cluster.history.committed[base]
            if batch.base_offset >= self.next_offset:
                break
            want += [c.offset for c, _ in self.spec.select(changes_of(batch), 0, names,
                                                           lambda _topic: True, True)]
        if self.delivered != want:
            missing = sorted(set(want) - set(self.delivered))[:5]
            extra = sorted(set(self.delivered) - set(want))[:5]
            raise InvariantViolation(
                f"the watcher's changes differ from the committed log below "
                f"{self.next_offset}: missing {missing}, not committed {extra}, "
                f"{len(self.delivered)} delivered, {len(want)} committed")
