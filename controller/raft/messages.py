"""The Raft wire messages, as frozen values (the gRPC service maps them to protobuf).

Every message names its cluster, its sender (`src`), its addressee (`dst`) and the
sender's current `epoch`. A receiver drops responses from another cluster and
answers requests from another cluster with `Errors.INCONSISTENT_CLUSTER_ID`. A
request with an epoch older than the receiver's is answered with the receiver's
epoch (and leader, when known) so the sender catches up or steps down.

Requests carry a `seq` chosen by the sender that the response echoes, so the
sender can match a response to the request it still waits for and ignore late
duplicates.
"""

from __future__ import annotations

import enum

import attrs

from controller.logformat import EpochEndOffset, RecordBatch, SnapshotId


class Errors(enum.Enum):
    NONE = "none"
    INCONSISTENT_CLUSTER_ID = "inconsistent_cluster_id"
    # The request's epoch is older than the receiver's: the response carries the
    # receiver's epoch and leader.
    FENCED_LEADER_EPOCH = "fenced_leader_epoch"
    # The receiver is not the leader of the request's epoch (it may name one).
    NOT_LEADER = "not_leader"
    # The requested snapshot is not (or no longer) available on the leader.
    SNAPSHOT_NOT_FOUND = "snapshot_not_found"
    # A sender that is not a voter asked for something only voters may do.
    NOT_VOTER = "not_voter"
    # The request carries a value no legitimate peer sends (an epoch beyond
    # `EPOCH_LIMIT`); the receiver changed nothing.
    INVALID_REQUEST = "invalid_request"
    # The request's `dst_directory_id` is not the receiver's: it was meant for
    # another incarnation of this node id (a disk since wiped and reformatted).
    INVALID_VOTER_KEY = "invalid_voter_key"


@attrs.frozen(slots=True, kw_only=True)
class _Envelope:
    cluster_id: str
    src: int
    dst: int
    epoch: int
    # A replica is a node id plus the directory id written when its disk was
    # formatted (voters.py). The sender's, and the one the sender expects the
    # addressee to have ("": unknown or not checked, e.g. a static voter set).
    src_directory_id: str = ""
    dst_directory_id: str = ""


@attrs.frozen(slots=True, kw_only=True)
class VoteRequest(_Envelope):
    """`epoch` is the epoch the candidate runs in; for a pre-vote it is the
    prospective's epoch + 1 and nobody's epoch changes because of it."""

    pre_vote: bool
    last_epoch: int
    end_offset: int


@attrs.frozen(slots=True, kw_only=True)
class VoteResponse(_Envelope):
    """`epoch` is the voter's epoch; `vote_epoch` echoes the request's epoch.
    `leader_id` is set only when the voter leads or heard from the leader of its
    epoch within the election timeout (a live leader, not just a known one)."""

    error: Errors
    pre_vote: bool
    vote_epoch: int
    granted: bool
    leader_id: int | None


@attrs.frozen(slots=True, kw_only=True)
class BeginQuorumEpochRequest(_Envelope):
    """Sent by the new leader (`src`) of `epoch` to the other voters."""


@attrs.frozen(slots=True, kw_only=True)
class BeginQuorumEpochResponse(_Envelope):
    error: Errors
    leader_id: int | None


@attrs.frozen(slots=True, kw_only=True)
class EndQuorumEpochRequest(_Envelope):
    """The leader (`src`) of `epoch` is stepping down on purpose. Voters start an
    election at once, the first in `preferred_successors` first (most caught up
    first), so a planned stop fails over without waiting for a timeout."""

    preferred_successors: tuple[int, ...]


@attrs.frozen(slots=True, kw_only=True)
class EndQuorumEpochResponse(_Envelope):
    error: Errors
    leader_id: int | None


@attrs.frozen(slots=True, kw_only=True)
class FetchRequest(_Envelope):
    """Pull replication. The fetcher (`src`) has durably stored every record below
    `fetch_offset` and the record at `fetch_offset - 1` has `last_fetched_epoch`.
    The leader may hold the request up to `max_wait_ms` when it has nothing new."""

    seq: int
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int
    max_wait_ms: int
    # The highest ReadIndex barrier received from this leader in this epoch (reads.py).
    read_barrier: int = 0
    # What the fetcher's software supports (RaftConfig.supported_versions), opaque to
    # Raft: recorded per replica for the state machine; (0, 0): not said.
    supported_versions: tuple[int, int] = (0, 0)
    # The oldest offset the fetcher's local log still holds (its retained start; -1:
    # not said), recorded per replica: the tier copier hands leadership to a voter
    # that holds a range it must copy and itself lacks.
    retained_start_offset: int = -1


@attrs.frozen(slots=True, kw_only=True)
class FetchResponse(_Envelope):
    """Exactly one of: `error` set; `snapshot_id` set (fetch it, the offset is below
    the leader's log start); `diverging` set (truncate, then fetch again); or
    `batches` (possibly empty) that follow `fetch_offset` in the leader's log.
    `fetch_offset` and `last_fetched_epoch` echo the request."""

    seq: int
    error: Errors
    leader_id: int | None
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int
    log_start_offset: int
    batches: tuple[RecordBatch, ...] = ()
    diverging: EpochEndOffset | None = None
    snapshot_id: SnapshotId | None = None
    # The leader's current ReadIndex barrier (reads.py); followers echo it.
    read_barrier: int = 0


@attrs.frozen(slots=True, kw_only=True)
class FetchSnapshotRequest(_Envelope):
    seq: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int


@attrs.frozen(slots=True, kw_only=True)
class FetchSnapshotResponse(_Envelope):
    """`data` is the snapshot's bytes from `position`; `size_bytes` its total size."""

    seq: int
    error: Errors
    leader_id: int | None
    snapshot_id: SnapshotId
    position: int
    size_bytes: int
    data: bytes = b""


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
)
Message = Request | Response

REQUEST_TYPES: tuple[type, ...] = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
)
