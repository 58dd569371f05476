"""`Ready`: the work a `RaftNode` hands its driver, and the result of `propose`."""

from __future__ import annotations

import enum

import attrs

from controller.logformat import LeaderAndEpoch, QuorumState, RecordBatch, SnapshotId
from controller.raft.messages import Message
from controller.raft.reads import ReadState
from controller.raft.roles import Role
from controller.raft.voters import VoterSet


@attrs.frozen(slots=True, kw_only=True)
class Ready:
    """Everything the node accumulated since the previous `RaftNode.ready()`.

    The driver must handle the fields in this order:

    1. `quorum_state`: when not None, write it durably (fsync) BEFORE sending any
       message of this Ready. Votes and epoch changes are promises to other
       nodes; a crash must not let the node forget them.
    2. `flush_to_offset`: when not None, make the log durable up to at least this
       offset (one fsync for everything buffered so far), then call
       `RaftNode.flushed(flush_to_offset)`. Flushes may complete after the
       messages are sent and must be reported in the order they were requested.
       (The leader sends records it has not flushed yet; this is safe because it
       counts itself toward the high watermark only up to its flushed offset, and
       a follower fetches with an offset it has flushed.)
    3. `messages`: send, in any order, best effort (loss is tolerated).
    4. `committed`: apply to the state machine, in order. They are exactly the
       batches in [previous high watermark handed out, `high_watermark`).
    5. `snapshot_to_load`: the store has received every chunk of this snapshot;
       make it durable, load it into the state machine (replacing its state), then
       call `RaftNode.snapshot_loaded(snapshot_to_load)`.
    6. `reads`: reads (`RaftNode.read_index`) a majority confirmed; answer each once
       the state machine has applied up to its index.

    `voters` is set when the latest voter set changed (and in the first Ready): the
    driver routes calls to voters by the endpoints it names.

    `repaired` is set once, when a replica that started with a damaged log
    (`RaftNode(repair_to_offset=...)`) holds again every record it had lost: the
    driver removes its note of the pending repair.

    `role` and `leader` are set when they changed (for routing clients, metrics
    and the active controller's take-over/revert); `high_watermark` when it
    advanced.
    """

    quorum_state: QuorumState | None = None
    flush_to_offset: int | None = None
    messages: tuple[Message, ...] = ()
    committed: tuple[RecordBatch, ...] = ()
    high_watermark: int | None = None
    role: Role | None = None
    leader: LeaderAndEpoch | None = None
    snapshot_to_load: SnapshotId | None = None
    reads: tuple[ReadState, ...] = ()
    voters: VoterSet | None = None
    repaired: bool = False

    @property
    def empty(self) -> bool:
        return self == _EMPTY


_EMPTY = Ready()


class ProposeError(enum.Enum):
    NOT_LEADER = "not_leader"
    TOO_LARGE = "too_large"
    EMPTY = "empty"
    # Too many linearizable reads wait for confirmation (`reads.MAX_PENDING_READS`).
    BUSY = "busy"
    # Leadership is being handed to another voter (`transfer_leadership`): the log
    # end stays put until the target holds all of it. Retry on the next leader.
    TRANSFERRING = "transferring"


class TransferError(enum.Enum):
    """Why `RaftNode.transfer_leadership` refused."""

    NOT_LEADER = "not_leader"
    # The target is not a voter, or is this node.
    NOT_VOTER = "not_voter"
    # Another transfer is under way.
    IN_PROGRESS = "in_progress"
    # A voter change is not committed yet: the voters to hand over to are not settled.
    CHANGE_PENDING = "change_pending"


@attrs.frozen(slots=True, kw_only=True)
class ProposeResult:
    """Either `base_offset` of the appended batch (it commits once the high
    watermark passes `base_offset + len(records) - 1`) or an `error`; on
    NOT_LEADER, `leader` names the leader this node knows."""

    base_offset: int | None = None
    epoch: int
    error: ProposeError | None = None
    leader: LeaderAndEpoch | None = None

    @property
    def ok(self) -> bool:
        return self.error is None
