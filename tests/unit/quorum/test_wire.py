"""Core messages <-> protobuf: round trips, stored-bytes batches, malformed input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.logformat import BatchOrigin, EpochEndOffset, RecordBatch, SnapshotId
from controller.logformat.batch import encode_batch
from controller.quorum import raft_service_pb2 as pb
from controller.quorum.wire import RPC_METHODS, StoredBatchCache, WireError, from_pb, to_pb
from controller.raft import messages as m

ids = st.integers(0, 2**31 - 1)
epochs = st.integers(0, 2**31 - 1)
offsets = st.integers(0, 2**62)
small_offsets = st.integers(0, 2**40)
opt_ids = st.none() | ids
errors = st.sampled_from(list(m.Errors))
cluster_ids = st.text(min_size=1, max_size=22)


def _envelope() -> dict[str, st.SearchStrategy[Any]]:
    return {"cluster_id": cluster_ids, "src": ids, "dst": ids, "epoch": epochs}


snapshot_ids = st.builds(SnapshotId, offsets, epochs)
origins = st.builds(BatchOrigin, st.text(max_size=5), st.text(max_size=5), st.text(max_size=5))


@st.composite
def batch_runs(draw: st.DrawFn) -> tuple[RecordBatch, ...]:
    """Contiguous batches, as a fetch response carries them."""
    offset = draw(small_offsets)
    epoch = draw(st.integers(0, 1000))
    out = []
    for _ in range(draw(st.integers(0, 4))):
        records = tuple(draw(st.lists(st.binary(max_size=30), min_size=1, max_size=5)))
        epoch += draw(st.integers(0, 2))
        out.append(RecordBatch(offset, epoch, draw(st.integers(0, 2**40)), draw(st.booleans()),
                               draw(origins), records))
        offset += len(records)
    return tuple(out)


@st.composite
def fetch_responses(draw: st.DrawFn) -> m.FetchResponse:
    outcome = draw(st.sampled_from(["error", "diverging", "snapshot", "batches"]))
    error = m.Errors.NONE
    batches: tuple[RecordBatch, ...] = ()
    diverging = snapshot_id = None
    if outcome == "error":
        error = draw(st.sampled_from([e for e in m.Errors if e is not m.Errors.NONE]))
    elif outcome == "diverging":
        diverging = EpochEndOffset(draw(epochs), draw(offsets))
    elif outcome == "snapshot":
        snapshot_id = draw(snapshot_ids)
    else:
        batches = draw(batch_runs())
    return m.FetchResponse(
        **{k: draw(v) for k, v in _envelope().items()}, seq=draw(offsets), error=error,
        leader_id=draw(opt_ids), fetch_offset=draw(offsets), last_fetched_epoch=draw(epochs),
        high_watermark=draw(offsets), log_start_offset=draw(offsets), batches=batches,
        diverging=diverging, snapshot_id=snapshot_id)


messages = st.one_of(
    st.builds(m.VoteRequest, **_envelope(), pre_vote=st.booleans(), last_epoch=epochs,
              end_offset=offsets),
    st.builds(m.VoteResponse, **_envelope(), error=errors, pre_vote=st.booleans(),
              vote_epoch=epochs, granted=st.booleans(), leader_id=opt_ids),
    st.builds(m.BeginQuorumEpochRequest, **_envelope()),
    st.builds(m.BeginQuorumEpochResponse, **_envelope(), error=errors, leader_id=opt_ids),
    st.builds(m.EndQuorumEpochRequest, **_envelope(),
              preferred_successors=st.lists(ids, max_size=4).map(tuple)),
    st.builds(m.EndQuorumEpochResponse, **_envelope(), error=errors, leader_id=opt_ids),
    st.builds(m.FetchRequest, **_envelope(), seq=offsets, fetch_offset=offsets,
              last_fetched_epoch=epochs, high_watermark=offsets,
              max_wait_ms=st.integers(0, 2**31 - 1),
              retained_start_offset=st.one_of(st.just(-1), offsets)),
    fetch_responses(),
    st.builds(m.FetchSnapshotRequest, **_envelope(), seq=offsets, snapshot_id=snapshot_ids,
              position=offsets, max_bytes=st.integers(0, 2**31 - 1)),
    st.builds(m.FetchSnapshotResponse, **_envelope(), seq=offsets, error=errors,
              leader_id=opt_ids, snapshot_id=snapshot_ids, position=offsets,
              size_bytes=offsets, data=st.binary(max_size=50)),
)


@given(messages)
def test_round_trip_through_bytes(msg: m.Message) -> None:
    p = to_pb(msg)
    again = type(p).FromString(p.SerializeToString())
    assert from_pb(again) == msg


def test_every_request_type_has_an_rpc() -> None:
    assert set(RPC_METHODS) == set(m.REQUEST_TYPES)
    for name, _ in RPC_METHODS.values():
        assert name in pb.DESCRIPTOR.services_by_name["Raft"].methods_by_name


def _fetch_response(**kw: Any) -> m.FetchResponse:
    base = {"cluster_id": "c", "src": 1, "dst": 2, "epoch": 3, "seq": 7,
            "error": m.Errors.NONE, "leader_id": 1, "fetch_offset": 0, "last_fetched_epoch": 0,
            "high_watermark": 0, "log_start_offset": 0}
    return m.FetchResponse(**{**base, **kw})


def test_batches_travel_as_the_stored_bytes() -> None:
    batch = RecordBatch(0, 3, 1000, False, BatchOrigin("alice"), (b"a", b"bc"))
    stored = encode_batch(batch)
    p = to_pb(_fetch_response(batches=(batch,)))
    assert isinstance(p, pb.FetchResponse)
    assert list(p.batches) == [stored]


def test_cache_serves_remembered_bytes_for_the_same_object_only() -> None:
    cache = StoredBatchCache(capacity=2)
    batch = RecordBatch(0, 1, 0, False, BatchOrigin(), (b"x",))
    sentinel = b"the stored bytes"
    cache.remember(batch, sentinel)
    assert cache.encode(batch) is sentinel
    equal_but_other = RecordBatch(0, 1, 0, False, BatchOrigin(), (b"x",))
    assert cache.lookup(equal_but_other) is None
    for i in range(1, 4):
        cache.remember(RecordBatch(i, 1, 0, False, BatchOrigin(), (b"y",)), b"")
    assert len(cache) == 2 and cache.lookup(batch) is None


def test_received_batches_are_remembered_for_the_append() -> None:
    batch = RecordBatch(5, 2, 0, True, BatchOrigin(), (b"r",))
    p = to_pb(_fetch_response(batches=(batch,)))
    cache = StoredBatchCache()
    got = from_pb(p, cache)
    assert isinstance(got, m.FetchResponse)
    assert cache.lookup(got.batches[0]) == encode_batch(batch)


def _valid_fetch_pb() -> pb.FetchResponse:
    p = to_pb(_fetch_response(batches=(RecordBatch(0, 1, 0, False, BatchOrigin(), (b"x",)),)))
    assert isinstance(p, pb.FetchResponse)
    return p


def test_corrupt_batch_is_refused() -> None:
    p = _valid_fetch_pb()
    data = bytearray(p.batches[0])
    data[-1] ^= 0xFF
    p.batches[0] = bytes(data)
    with pytest.raises(WireError, match="invalid"):
        from_pb(p)


def test_trailing_bytes_and_gaps_are_refused() -> None:
    p = _valid_fetch_pb()
    p.batches[0] = p.batches[0] + b"\x00"
    with pytest.raises(WireError, match="trailing"):
        from_pb(p)
    p = _valid_fetch_pb()
    p.batches.append(encode_batch(RecordBatch(9, 1, 0, False, BatchOrigin(), (b"y",))))
    with pytest.raises(WireError, match="expected 1"):
        from_pb(p)


def test_malformed_messages_are_refused() -> None:
    with pytest.raises(WireError, match="no header"):
        from_pb(pb.VoteRequest())
    header = pb.Header(cluster_id="c", src=1, dst=2, epoch=1)
    with pytest.raises(WireError, match="unset error"):
        from_pb(pb.BeginQuorumEpochResponse(header=header))
    with pytest.raises(WireError, match="end_offset"):
        from_pb(pb.VoteRequest(header=header, end_offset=-1))
    with pytest.raises(WireError, match="empty cluster id"):
        from_pb(pb.VoteRequest(header=pb.Header(src=1)))
    both = _valid_fetch_pb()
    both.diverging.epoch = 1
    with pytest.raises(WireError, match="exactly one"):
        from_pb(both)
    with pytest.raises(WireError, match="snapshot_id"):
        from_pb(pb.FetchSnapshotRequest(header=header))


def test_directory_ids_travel_and_oversized_ones_are_refused() -> None:
    from controller.quorum import raft_service_pb2 as rpb
    from controller.quorum.wire import WireError, from_pb, to_pb
    from controller.raft.messages import BeginQuorumEpochRequest

    req = BeginQuorumEpochRequest(cluster_id="c", src=1, dst=2, epoch=3,
                                  src_directory_id="dir1", dst_directory_id="dir2")
    assert from_pb(to_pb(req)) == req
    bad = rpb.BeginQuorumEpochRequest(header=rpb.Header(cluster_id="c", src=1, dst=2, epoch=3,
                                                        dst_directory_id="x" * 65))
    with pytest.raises(WireError, match="directory id"):
        from_pb(bad)
