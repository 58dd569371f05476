"""Raft for metakraft: a sans-I/O core (`RaftNode`: events in, `Ready` out).

Start at `controller.raft.node`; the wire messages are in `messages`, the log
contract in `log`, the snapshot contract in `snapshot`.
"""

from controller.logformat import (
    EpochEndOffset,
    LeaderAndEpoch,
    QuorumState,
    RecordBatch,
    SnapshotId,
)
from controller.raft.config import RaftConfig
from controller.raft.errors import CommittedHistoryCutError
from controller.raft.log import MemoryRaftLog, RaftLog
from controller.raft.node import RaftNode
from controller.raft.ready import ProposeError, ProposeResult, Ready
from controller.raft.roles import ALLOWED_TRANSITIONS, Role
from controller.raft.snapshot import MemorySnapshotStore, SnapshotStore

__all__ = [
    "ALLOWED_TRANSITIONS",
    "CommittedHistoryCutError",
    "EpochEndOffset",
    "LeaderAndEpoch",
    "MemoryRaftLog",
    "MemorySnapshotStore",
    "ProposeError",
    "ProposeResult",
    "QuorumState",
    "RaftConfig",
    "RaftLog",
    "RaftNode",
    "Ready",
    "RecordBatch",
    "Role",
    "SnapshotId",
    "SnapshotStore",
]
