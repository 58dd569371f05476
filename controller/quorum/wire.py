"""Converters between the core's frozen Raft messages and the gRPC protobufs.

`to_pb(message)` and `from_pb(pb_message)` are inverses for every well-formed
message (a property test checks it). `from_pb` never trusts the network: a
malformed message raises `WireError` naming what is wrong, and the caller
answers or drops it; it never reaches the core.

Record batches travel as the bytes the log stores. `StoredBatchCache` remembers
the stored bytes of batches recently read from (or received for) the log, so
serving a fetch neither re-encodes nor re-checksums a batch the log just read,
and a follower appends exactly the bytes it received.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final

from controller.logformat import EpochEndOffset, RecordBatch, SnapshotId
from controller.logformat.batch import decode_batch, encode_batch
from controller.quorum import raft_service_pb2 as pb
from controller.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from controller.raft.voters import MAX_DIRECTORY_ID_CHARS
from controller.storage.errors import StorageError

_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1

_ERROR_TO_PB: Final[dict[Errors, pb.Error.ValueType]] = {
    Errors.NONE: pb.ERROR_NONE,
    Errors.INCONSISTENT_CLUSTER_ID: pb.ERROR_INCONSISTENT_CLUSTER_ID,
    Errors.FENCED_LEADER_EPOCH: pb.ERROR_FENCED_LEADER_EPOCH,
    Errors.NOT_LEADER: pb.ERROR_NOT_LEADER,
    Errors.SNAPSHOT_NOT_FOUND: pb.ERROR_SNAPSHOT_NOT_FOUND,
    Errors.NOT_VOTER: pb.ERROR_NOT_VOTER,
    Errors.INVALID_REQUEST: pb.ERROR_INVALID_REQUEST,
    Errors.INVALID_VOTER_KEY: pb.ERROR_INVALID_VOTER_KEY,
}
_ERROR_FROM_PB: Final = {v: k for k, v in _ERROR_TO_PB.items()}
assert len(_ERROR_FROM_PB) == len(Errors), "every core error needs a wire code"

PbMessage = (
    pb.VoteRequest
    | pb.VoteResponse
    | pb.BeginQuorumEpochRequest
    | pb.BeginQuorumEpochResponse
    | pb.EndQuorumEpochRequest
    | pb.EndQuorumEpochResponse
    | pb.FetchRequest
    | pb.FetchResponse
    | pb.FetchSnapshotRequest
    | pb.FetchSnapshotResponse
)

# Request type -> (Raft service method name, response protobuf class). The driver
# calls the method of that name on the peer's stub.
RPC_METHODS: Final[dict[type, tuple[str, type]]] = {
    VoteRequest: ("Vote", pb.VoteResponse),
    BeginQuorumEpochRequest: ("BeginQuorumEpoch", pb.BeginQuorumEpochResponse),
    EndQuorumEpochRequest: ("EndQuorumEpoch", pb.EndQuorumEpochResponse),
    FetchRequest: ("Fetch", pb.FetchResponse),
    FetchSnapshotRequest: ("FetchSnapshot", pb.FetchSnapshotResponse),
}


class WireError(ValueError):
    """A protobuf message that cannot be a valid Raft message."""


class StoredBatchCache:
    """Stored bytes of recently seen batches, found by the batch object's identity.

    Keyed by base offset, but an entry is used only for the very object it was
    stored with: a different batch at the same offset (after a truncation) simply
    misses and is encoded afresh, so a stale entry can never be served.
    Bounded: the oldest entries are evicted first.
    """

    def __init__(self, capacity: int = 4096) -> None:
        assert capacity > 0
        self._capacity = capacity
        self._entries: OrderedDict[int, tuple[RecordBatch, bytes]] = OrderedDict()

    def remember(self, batch: RecordBatch, data: bytes) -> None:
        self._entries[batch.base_offset] = (batch, data)
        self._entries.move_to_end(batch.base_offset)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def lookup(self, batch: RecordBatch) -> bytes | None:
        entry = self._entries.get(batch.base_offset)
        return entry[1] if entry is not None and entry[0] is batch else None

    def encode(self, batch: RecordBatch) -> bytes:
        data = self.lookup(batch)
        if data is None:
            data = encode_batch(batch)
            self.remember(batch, data)
        return data

    def __len__(self) -> int:
        return len(self._entries)


# ---------------------------------------------------------------- core -> protobuf


def _header(m: Any) -> pb.Header:
    return pb.Header(cluster_id=m.cluster_id, src=m.src, dst=m.dst, epoch=m.epoch,
                     src_directory_id=m.src_directory_id, dst_directory_id=m.dst_directory_id)


def _snapshot_id_pb(s: SnapshotId) -> pb.SnapshotId:
    return pb.SnapshotId(end_offset=s.end_offset, epoch=s.epoch)


def to_pb(m: Message, cache: StoredBatchCache | None = None) -> PbMessage:
    """The protobuf for a core message. Batches are sent as stored bytes."""
    h = _header(m)
    match m:
        case VoteRequest():
            return pb.VoteRequest(header=h, pre_vote=m.pre_vote, last_epoch=m.last_epoch,
                                  end_offset=m.end_offset)
        case VoteResponse():
            return pb.VoteResponse(header=h, error=_ERROR_TO_PB[m.error], pre_vote=m.pre_vote,
                                   vote_epoch=m.vote_epoch, granted=m.granted,
                                   leader_id=m.leader_id)
        case BeginQuorumEpochRequest():
            return pb.BeginQuorumEpochRequest(header=h)
        case BeginQuorumEpochResponse():
            return pb.BeginQuorumEpochResponse(header=h, error=_ERROR_TO_PB[m.error],
                                               leader_id=m.leader_id)
        case EndQuorumEpochRequest():
            return pb.EndQuorumEpochRequest(header=h,
                                            preferred_successors=m.preferred_successors)
        case EndQuorumEpochResponse():
            return pb.EndQuorumEpochResponse(header=h, error=_ERROR_TO_PB[m.error],
                                             leader_id=m.leader_id)
        case FetchRequest():
            return pb.FetchRequest(header=h, seq=m.seq, fetch_offset=m.fetch_offset,
                                   last_fetched_epoch=m.last_fetched_epoch,
                                   high_watermark=m.high_watermark, max_wait_ms=m.max_wait_ms,
                                   read_barrier=m.read_barrier,
                                   min_supported_version=m.supported_versions[0],
                                   max_supported_version=m.supported_versions[1],
                                   retained_start_offset=(None if m.retained_start_offset < 0
                                                          else m.retained_start_offset))
        case FetchResponse():
            enc = cache.encode if cache is not None else encode_batch
            out = pb.FetchResponse(
                header=h, seq=m.seq, error=_ERROR_TO_PB[m.error], leader_id=m.leader_id,
                fetch_offset=m.fetch_offset, last_fetched_epoch=m.last_fetched_epoch,
                high_watermark=m.high_watermark, log_start_offset=m.log_start_offset,
                batches=[enc(b) for b in m.batches], read_barrier=m.read_barrier)
            if m.diverging is not None:
                out.diverging.epoch = m.diverging.epoch
                out.diverging.end_offset = m.diverging.end_offset
            if m.snapshot_id is not None:
                out.snapshot_id.CopyFrom(_snapshot_id_pb(m.snapshot_id))
            return out
        case FetchSnapshotRequest():
            return pb.FetchSnapshotRequest(header=h, seq=m.seq,
                                           snapshot_id=_snapshot_id_pb(m.snapshot_id),
                                           position=m.position, max_bytes=m.max_bytes)
        case FetchSnapshotResponse():
            return pb.FetchSnapshotResponse(
                header=h, seq=m.seq, error=_ERROR_TO_PB[m.error], leader_id=m.leader_id,
                snapshot_id=_snapshot_id_pb(m.snapshot_id), position=m.position,
                size_bytes=m.size_bytes, data=m.data)
    raise TypeError(f"not a Raft message: {type(m).__name__}")


# ---------------------------------------------------------------- protobuf -> core


def _nonneg(name: str, value: int, limit: int = _INT64_MAX) -> int:
    if not 0 <= value <= limit:
        raise WireError(f"{name} must be in [0, {limit}], got {value}")
    return value


def _envelope(p: Any) -> dict[str, Any]:
    if not p.HasField("header"):
        raise WireError(f"{type(p).__name__} has no header")
    h = p.header
    if not h.cluster_id:
        raise WireError(f"{type(p).__name__} has an empty cluster id")
    return {"cluster_id": h.cluster_id, "src": _nonneg("src", h.src, _INT32_MAX),
            "dst": _nonneg("dst", h.dst, _INT32_MAX),
            "epoch": _nonneg("epoch", h.epoch, _INT32_MAX),
            "src_directory_id": _directory_id(h.src_directory_id),
            "dst_directory_id": _directory_id(h.dst_directory_id)}


def _directory_id(value: str) -> str:
    if len(value) > MAX_DIRECTORY_ID_CHARS:
        raise WireError(f"directory id of {len(value)} characters (at most "
                        f"{MAX_DIRECTORY_ID_CHARS})")
    return value


def _error(p: Any) -> Errors:
    err = _ERROR_FROM_PB.get(p.error)
    if err is None:
        raise WireError(f"{type(p).__name__} has an unknown or unset error code {p.error}")
    return err


def _leader_id(p: Any) -> int | None:
    return _nonneg("leader_id", p.leader_id, _INT32_MAX) if p.HasField("leader_id") else None


def _snapshot_id(p: pb.SnapshotId) -> SnapshotId:
    return SnapshotId(_nonneg("snapshot end_offset", p.end_offset),
                      _nonneg("snapshot epoch", p.epoch, _INT32_MAX))


def _batches(p: pb.FetchResponse, cache: StoredBatchCache | None) -> tuple[RecordBatch, ...]:
    out: list[RecordBatch] = []
    expected: int | None = None
    for i, data in enumerate(p.batches):
        try:
            batch, size = decode_batch(data)
        except StorageError as exc:
            raise WireError(f"fetched batch {i} is invalid: {exc}") from None
        if size != len(data):
            raise WireError(f"fetched batch {i} has {len(data) - size} trailing bytes")
        if expected is not None and batch.base_offset != expected:
            raise WireError(f"fetched batch {i} starts at {batch.base_offset}, expected "
                            f"{expected}")
        expected = batch.next_offset
        if cache is not None:
            cache.remember(batch, data)
        out.append(batch)
    return tuple(out)


def from_pb(p: PbMessage, cache: StoredBatchCache | None = None) -> Message:
    """The core message for a protobuf; `WireError` when it is malformed."""
    env = _envelope(p)
    match p:
        case pb.VoteRequest():
            return VoteRequest(**env, pre_vote=p.pre_vote,
                               last_epoch=_nonneg("last_epoch", p.last_epoch, _INT32_MAX),
                               end_offset=_nonneg("end_offset", p.end_offset))
        case pb.VoteResponse():
            return VoteResponse(**env, error=_error(p), pre_vote=p.pre_vote,
                                vote_epoch=_nonneg("vote_epoch", p.vote_epoch, _INT32_MAX),
                                granted=p.granted, leader_id=_leader_id(p))
        case pb.BeginQuorumEpochRequest():
            return BeginQuorumEpochRequest(**env)
        case pb.BeginQuorumEpochResponse():
            return BeginQuorumEpochResponse(**env, error=_error(p), leader_id=_leader_id(p))
        case pb.EndQuorumEpochRequest():
            return EndQuorumEpochRequest(**env, preferred_successors=tuple(
                _nonneg("successor", s, _INT32_MAX) for s in p.preferred_successors))
        case pb.EndQuorumEpochResponse():
            return EndQuorumEpochResponse(**env, error=_error(p), leader_id=_leader_id(p))
        case pb.FetchRequest():
            return FetchRequest(
                **env, seq=_nonneg("seq", p.seq),
                fetch_offset=_nonneg("fetch_offset", p.fetch_offset),
                last_fetched_epoch=_nonneg("last_fetched_epoch", p.last_fetched_epoch,
                                           _INT32_MAX),
                high_watermark=_nonneg("high_watermark", p.high_watermark),
                max_wait_ms=_nonneg("max_wait_ms", p.max_wait_ms, _INT32_MAX),
                read_barrier=_nonneg("read_barrier", p.read_barrier),
                supported_versions=(
                    _nonneg("min_supported_version", p.min_supported_version, _INT32_MAX),
                    _nonneg("max_supported_version", p.max_supported_version, _INT32_MAX)),
                retained_start_offset=(_nonneg("retained_start_offset", p.retained_start_offset)
                                       if p.HasField("retained_start_offset") else -1))
        case pb.FetchResponse():
            outcomes = (p.error != pb.ERROR_NONE, p.HasField("diverging"),
                        p.HasField("snapshot_id"))
            if sum(outcomes) > 1 or (sum(outcomes) == 1 and len(p.batches) > 0):
                raise WireError("FetchResponse must carry exactly one of error, diverging, "
                                "snapshot_id or batches")
            diverging = None
            if p.HasField("diverging"):
                diverging = EpochEndOffset(
                    _nonneg("diverging epoch", p.diverging.epoch, _INT32_MAX),
                    _nonneg("diverging end_offset", p.diverging.end_offset))
            return FetchResponse(
                **env, seq=_nonneg("seq", p.seq), error=_error(p), leader_id=_leader_id(p),
                fetch_offset=_nonneg("fetch_offset", p.fetch_offset),
                last_fetched_epoch=_nonneg("last_fetched_epoch", p.last_fetched_epoch,
                                           _INT32_MAX),
                high_watermark=_nonneg("high_watermark", p.high_watermark),
                log_start_offset=_nonneg("log_start_offset", p.log_start_offset),
                batches=_batches(p, cache), diverging=diverging,
                snapshot_id=_snapshot_id(p.snapshot_id) if p.HasField("snapshot_id") else None,
                read_barrier=_nonneg("read_barrier", p.read_barrier))
        case pb.FetchSnapshotRequest():
            if not p.HasField("snapshot_id"):
                raise WireError("FetchSnapshotRequest has no snapshot_id")
            return FetchSnapshotRequest(
                **env, seq=_nonneg("seq", p.seq), snapshot_id=_snapshot_id(p.snapshot_id),
                position=_nonneg("position", p.position),
                max_bytes=_nonneg("max_bytes", p.max_bytes, _INT32_MAX))
        case pb.FetchSnapshotResponse():
            if not p.HasField("snapshot_id"):
                raise WireError("FetchSnapshotResponse has no snapshot_id")
            return FetchSnapshotResponse(
                **env, seq=_nonneg("seq", p.seq), error=_error(p), leader_id=_leader_id(p),
                snapshot_id=_snapshot_id(p.snapshot_id), position=_nonneg("position", p.position),
                size_bytes=_nonneg("size_bytes", p.size_bytes), data=p.data)
    raise TypeError(f"not a Raft protobuf: {type(p).__name__}")
