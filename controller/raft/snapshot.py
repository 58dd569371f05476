"""Snapshots as the Raft core sees them: where the bytes live (`SnapshotStore`),
and how far a fetch of one has come (`SnapshotFetch`).

The core never interprets snapshot bytes. On the leader it serves chunks of the
snapshot its log starts from; on a fetcher it writes chunks in order and, when
the last one is in, asks the driver (`Ready.snapshot_to_load`) to make the
snapshot durable and load it into the state machine, then to call
`RaftNode.snapshot_loaded`.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from controller.logformat import SnapshotId


class SnapshotStore(Protocol):
    def size_bytes(self, snapshot_id: SnapshotId) -> int | None:
        """Size of a complete snapshot, None when this store does not have it."""
        ...

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` bytes of a complete snapshot from `position`."""
        ...

    def begin_write(self, snapshot_id: SnapshotId) -> None:
        """Start receiving `snapshot_id`, discarding any earlier partial copy."""
        ...

    def write_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        """Append `data`; `position` equals the bytes written so far."""
        ...


@attrs.frozen(slots=True)
class SnapshotFetch:
    """Progress of fetching `snapshot_id` from `leader_id`.

    Invariant: `position` bytes have been written to the store, in order, and
    `position <= size_bytes` once the size is known.
    """

    snapshot_id: SnapshotId
    leader_id: int
    position: int = 0
    size_bytes: int | None = None
    seq: int = 0
    sent_at_ms: int = 0

    @property
    def complete(self) -> bool:
        return self.size_bytes is not None and self.position >= self.size_bytes


class MemorySnapshotStore:
    """A `SnapshotStore` in memory. Complete snapshots are durable; partial ones are
    lost by `crash`. Used by tests and the simulation."""

    def __init__(self) -> None:
        self._complete: dict[SnapshotId, bytes] = {}
        self._partial: dict[SnapshotId, bytearray] = {}

    def size_bytes(self, snapshot_id: SnapshotId) -> int | None:
        data = self._complete.get(snapshot_id)
        return None if data is None else len(data)

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        return self._complete[snapshot_id][position : position + max_bytes]

    def begin_write(self, snapshot_id: SnapshotId) -> None:
        self._partial[snapshot_id] = bytearray()

    def write_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        buf = self._partial[snapshot_id]
        if position != len(buf):
            raise ValueError(f"chunk at {position}, have {len(buf)} bytes of {snapshot_id}")
        buf += data

    # -- driver side -----------------------------------------------------------

    def put(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Store a complete snapshot the local state machine wrote."""
        self._complete[snapshot_id] = bytes(data)

    def finish_write(self, snapshot_id: SnapshotId) -> bytes:
        """Turn the fetched partial snapshot into a complete one; returns its bytes."""
        data = bytes(self._partial.pop(snapshot_id))
        self._complete[snapshot_id] = data
        return data

    def latest(self) -> SnapshotId | None:
        return max(self._complete) if self._complete else None

    def read_all(self, snapshot_id: SnapshotId) -> bytes:
        return self._complete[snapshot_id]

    def crash(self) -> None:
        self._partial.clear()
