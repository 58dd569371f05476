"""The controller's queue of accepted events, run in node-task turns.

gRPC handlers only queue an event and await its future; the events queued meanwhile
run together, oldest first, in one node-task turn (at most `MAX_EVENTS_PER_TURN`; the
rest get the next turn). One turn is scheduled at a time: the first event queued
after a turn schedules the next.

Coalescing: every write of a turn is generated, replayed and appended as its own
batch -- its own origin, its own purgatory entry and answer, and a replay failure
fails only that request -- but the Raft node builds its next Ready only after the
turn, so the batches share one log flush and reach the followers in one
FetchResponse each (one replication round for all).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable

from controller.quorum.service import DriverStoppedError
from controller.quorum_controller.events import Request
from controller.quorum_controller.ports import NodeAccess, QuorumPort

# Queued events run in one node-task turn at most (the driver builds a Ready, so
# flushes and sends, between turns).
MAX_EVENTS_PER_TURN = 64


class RequestQueue:
    """Requests accepted and not yet run, in arrival order; ``run_event`` runs one of
    them on the node task."""

    def __init__(self, run_event: Callable[[Request, NodeAccess], None]) -> None:
        self._run_event = run_event
        self._quorum: QuorumPort | None = None
        self._events: deque[Request] = deque()
        self._turn_scheduled = False

    def attach(self, quorum: QuorumPort) -> None:
        self._quorum = quorum

    def __len__(self) -> int:
        return len(self._events)

    def put(self, event: Request) -> None:
        """Queue ``event`` for the next turn; raises ``DriverStoppedError`` (nothing
        queued) when the node task is gone."""
        quorum = self._quorum
        assert quorum is not None, "attach() first"
        if not self._turn_scheduled:
            quorum.run_on_node_task(self._run_turn)
            self._turn_scheduled = True
        self._events.append(event)

    def take_all(self) -> list[Request]:
        """Remove and return every queued event (none of them ran)."""
        # A fresh deque rather than clear(): a turn running meanwhile keeps popping
        # from its own (now settled) events instead of from an emptied queue.
        events, self._events = self._events, deque()
        return list(events)

    def driver_stopped(self) -> list[Request]:
        """The node task is gone, so a turn scheduled for the queued events will never
        run: ``take_all``, and schedule afresh on the next ``put``."""
        self._turn_scheduled = False
        return self.take_all()

    def _run_turn(self, access: NodeAccess) -> None:
        self._turn_scheduled = False
        events = self._events
        for _ in range(min(len(events), MAX_EVENTS_PER_TURN)):
            self._run_event(events.popleft(), access)
        if events and not self._turn_scheduled and self._quorum is not None:
            with contextlib.suppress(DriverStoppedError):
                self._quorum.run_on_node_task(self._run_turn)
                self._turn_scheduled = True
