"""Leader side of the followers' incremental fetch sessions (Kafka's KIP-227, reduced).

A follower replicates every partition it follows from one leader through one
long-polled Fetch stream. Listing all of them in every request would cost
O(partitions) per round trip (a broker may follow hundreds of thousands), so
the first request of a session lists them all and later ones only those whose
fetch position moved (the follower appended or truncated) or that joined;
`forgotten` ones leave. The leader keeps each position, and answers a partition
only when there is something to say: records past the position, a high
watermark the follower has not been sent, an error or a divergence. Appends and
role changes mark partitions `ready` in every session that holds them, which
also wakes a long-polling fetch.

Bounds: one session per follower broker (a new full fetch replaces its old
one), so at most one per broker of the cluster.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable

import attrs

from broker_agent.image import PartitionKey


@attrs.define
class Position:
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int


class FetchSession:
    def __init__(self, session_id: int, replica_id: int) -> None:
        self.session_id = session_id
        self.replica_id = replica_id
        self.epoch = 0
        # The broker epoch the follower fetches with (its incarnation).
        self.broker_epoch = -1
        self.positions: dict[PartitionKey, Position] = {}
        # The last high watermark answered per partition (-1: none yet).
        self.sent_hw: dict[PartitionKey, int] = {}
        # Partitions with news since the last answer.
        self.ready: set[PartitionKey] = set()
        self.wake = asyncio.Event()


class FetchSessions:
    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._by_id: dict[int, FetchSession] = {}
        self._by_replica: dict[int, FetchSession] = {}
        self._by_key: dict[PartitionKey, set[FetchSession]] = {}

    def open(self, replica_id: int) -> FetchSession:
        old = self._by_replica.pop(replica_id, None)
        if old is not None:
            self._close(old)
        session = FetchSession(next(self._ids), replica_id)
        self._by_id[session.session_id] = session
        self._by_replica[replica_id] = session
        return session

    def get(self, session_id: int, replica_id: int) -> FetchSession | None:
        session = self._by_id.get(session_id)
        return session if session is not None and session.replica_id == replica_id else None

    def _close(self, session: FetchSession) -> None:
        self._by_id.pop(session.session_id, None)
        for key in session.positions:
            holders = self._by_key.get(key)
            if holders is not None:
                holders.discard(session)
                if not holders:
                    del self._by_key[key]
        session.wake.set()

    def update(self, session: FetchSession, key: PartitionKey, position: Position) -> None:
        if key not in session.positions:
            self._by_key.setdefault(key, set()).add(session)
            session.sent_hw[key] = -1
        session.positions[key] = position
        session.ready.add(key)

    def forget(self, session: FetchSession, keys: Iterable[PartitionKey]) -> None:
        for key in keys:
            if session.positions.pop(key, None) is not None:
                session.sent_hw.pop(key, None)
                session.ready.discard(key)
                holders = self._by_key.get(key)
                if holders is not None:
                    holders.discard(session)
                    if not holders:
                        del self._by_key[key]

    def notify(self, key: PartitionKey) -> None:
        """Something changed for `key` here (an append, the HW, its role)."""
        for session in self._by_key.get(key, ()):
            session.ready.add(key)
            session.wake.set()

    def close_all(self) -> None:
        for session in list(self._by_id.values()):
            self._close(session)
        self._by_replica.clear()

    def __len__(self) -> int:
        return len(self._by_id)
