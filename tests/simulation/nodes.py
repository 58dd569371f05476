"""The simulated pieces of one node: its disk (a checked MemoryRaftLog), its state
machine, and what the simulation driver keeps about it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from controller.logformat import EMPTY_ORIGIN
from controller.raft import (
    MemoryRaftLog,
    MemorySnapshotStore,
    QuorumState,
    RaftConfig,
    RaftNode,
    RecordBatch,
)
from controller.raft.control import voters_in
from controller.raft.voters import EMPTY_VOTER_SET, Voter, VoterSet

if TYPE_CHECKING:
    from tests.simulation.cluster import Cluster

CLUSTER_ID = "sim-cluster"


class SimLog(MemoryRaftLog):
    """A MemoryRaftLog that reports every truncation to the checker first."""

    def __init__(self, node_id: int, on_truncate: Callable[[int, SimLog, int], None],
                 retain_batches: int = 0) -> None:
        super().__init__(retain_batches=retain_batches)
        self.node_id = node_id
        self._on_truncate = on_truncate

    def truncate_to(self, offset: int) -> None:
        self._on_truncate(self.node_id, self, offset)
        super().truncate_to(offset)


class StateMachine:
    """The replicated state: the committed batches applied so far, in order."""

    def __init__(self) -> None:
        self.batches: list[RecordBatch] = []
        self.applied_offset = 0

    def apply(self, batch: RecordBatch) -> None:
        assert batch.base_offset == self.applied_offset, (batch.base_offset, self.applied_offset)
        self.batches.append(batch)
        self.applied_offset = batch.next_offset

    def voters_at(self, end_offset: int) -> VoterSet:
        """The voter set of the last VotersRecord below `end_offset` (what a snapshot
        there carries; a dynamic quorum always has one)."""
        return voters_of(b for b in self.batches if b.next_offset <= end_offset)

    def snapshot_bytes(self, end_offset: int) -> bytes:
        lines = [
            f"{b.base_offset} {b.epoch} {int(b.is_control)} {','.join(r.hex() for r in b.records)}"
            for b in self.batches
            if b.next_offset <= end_offset
        ]
        return "\n".join(lines).encode()

    @staticmethod
    def decode(data: bytes) -> list[RecordBatch]:
        out = []
        for line in data.decode().splitlines():
            base, epoch, control, recs = line.split(" ")
            out.append(
                RecordBatch(
                    base_offset=int(base),
                    epoch=int(epoch),
                    append_time_ms=0,
                    is_control=control == "1",
                    origin=EMPTY_ORIGIN,
                    records=tuple(bytes.fromhex(r) for r in recs.split(",")) if recs else (),
                )
            )
        return out


def voters_of(batches: Iterable[RecordBatch]) -> VoterSet:
    found = EMPTY_VOTER_SET
    for batch in batches:
        if batch.is_control:
            found = voters_in(batch.records) or found
    return found


class SimNode:
    def __init__(
        self, cluster: Cluster, node_id: int, voters: frozenset[int], dynamic: bool = False
    ) -> None:
        self.id = node_id
        self.dynamic = dynamic
        # Directory ids: one per disk; a wiped disk comes back with the next one.
        self.disk = 1
        self.config = RaftConfig(
            node_id=node_id,
            cluster_id=CLUSTER_ID,
            voters=voters,
            directory_id=f"d{node_id}.1" if dynamic else "",
            election_timeout_ms=200,
            fetch_max_wait_ms=40,
            request_timeout_ms=120,
            check_quorum_timeout_ms=300,
            begin_quorum_retry_ms=50,
            end_quorum_backoff_ms=20,
            fetch_max_batches=16,
            snapshot_chunk_bytes=397,
        )
        # Configured as a voter (a controller, in the system simulation); the voter
        # set of a dynamic quorum may change since (RaftNode.is_voter says).
        self.is_voter = node_id in voters
        self.log = SimLog(node_id, cluster.check_truncation, cluster.retain_batches)
        self.store = MemorySnapshotStore()
        self.durable_qs: QuorumState | None = None
        self.raft: RaftNode | None = None
        self.sm = StateMachine()
        self.incarnation = 0
        self.paused = False
        self.held: list[tuple[str, tuple[Any, ...]]] = []
        self.last_flush_done_ms = 0
        self.tick_token = 0
        self.next_tick_ms = 0
        self.drain_scheduled = False
        self.max_epoch_sent = 0
        self.epoch_seen = 0
        self.hw_seen = 0
        self.snapshots_loaded = 0
        # Set while its log repairs disk damage (what the driver passes the core).
        self.repair_to_offset: int | None = None

    @property
    def voter(self) -> Voter:
        return Voter(self.id, self.config.directory_id, f"n{self.id}:9000")
