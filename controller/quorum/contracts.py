"""The contracts between the Raft driver and what it serves: the listener of what
the quorum decided (`CommitListener`), the driver's status (`DriverStatus`) and the
local log as the remote tier sees it (`LocalLogView`).

Small on purpose and free of asyncio and gRPC: the controller, the broker's loader
and the test fakes implement or read these without importing the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from controller.logformat import RecordBatch, SnapshotId
from controller.raft.reads import ReadState
from controller.raft.replication import ReplicaProgress
from controller.raft.voters import VoterSet
from controller.storage.log_config import SegmentInfo

__all__ = ["STATIC_EMPTY", "CommitListener", "DriverStatus", "LocalLogView"]


class CommitListener:
    """Receives what the quorum decided. Subclass and override what you need; the
    methods run on the driver's task, so they must be quick and must not block."""

    def on_commit(self, batches: Sequence[RecordBatch]) -> None:
        """Committed batches, in log order, each exactly once per process life
        (control batches included: check `is_control`)."""

    def on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        """The leader this node knows changed (None: unknown, an election runs)."""

    def on_snapshot_loaded(self, snapshot_id: SnapshotId, path: Path) -> None:
        """A snapshot fetched from the leader replaces the state up to its end."""

    def on_reads_confirmed(self, reads: Sequence[ReadState]) -> None:
        """Reads asked with `NodeTaskAccess.read_index` that a majority confirmed,
        after every batch committed so far was handed to `on_commit`."""

    def on_voters_changed(self, voters: VoterSet) -> None:
        """The latest voter set in this node's log changed (committed or not): who
        votes, and where each voter serves."""



STATIC_EMPTY = VoterSet((), dynamic=False)


@attrs.frozen(slots=True)
class DriverStatus:
    node_id: int
    role: str
    epoch: int
    leader_id: int | None
    high_watermark: int
    end_offset: int
    flushed_offset: int
    log_start_offset: int
    applied_offset: int
    # The leader's view of each replica (voters, then observers); empty unless leading.
    replicas: tuple[ReplicaProgress, ...] = ()
    # This replica's data directory id ("" for a static quorum's old directories).
    directory_id: str = ""
    # The latest voter set in this node's log (a static one: ids only).
    voters: VoterSet = STATIC_EMPTY
    # Running totals since start, for metrics.
    fetches_served: int = 0
    records_fetched: int = 0
    flushes: int = 0
    flush_seconds: float = 0.0
    # Set while the log is repaired after damage found on start: the offset its
    # recovery point had reached (the node votes again once it holds that much).
    repair_to_offset: int | None = None
    # The voter leadership is being handed to (None: no transfer under way), and the
    # transfers given up so far (the target did not catch up in time).
    transfer_target: int | None = None
    transfers_abandoned: int = 0
    # Timer turns of the node (`RaftDriver._schedule_tick`: when a timer is due, not
    # on a period), a running total.
    ticks: int = 0


@attrs.frozen(slots=True)
class LocalLogView:
    """The local log as the remote tier sees it (`RaftDriver.local_log_view`)."""

    segments: tuple[SegmentInfo, ...]
    # First offset the local segments hold; the newest snapshot's end offset (the
    # Raft log's logical start) and epoch.
    local_start_offset: int
    snapshot_end_offset: int
    snapshot_epoch: int
    high_watermark: int
    flushed_offset: int
