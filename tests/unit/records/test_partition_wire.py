"""The partition records' wire fast path: PartitionRecord bytes equal to protobuf's,
strict splitting of PartitionRecords and PartitionChangeRecords, and a fallback (None)
for every layout it does not take."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller.records import decode_record, encode_record, make_record
from controller.records import metadata_pb2 as pb
from controller.records.convert import (
    change_to_record,
    partition_from_record,
    partition_to_record,
)
from controller.records.domain import LeaderRecoveryState, PartitionDelta, PartitionRegistration
from controller.records.partition_wire import (
    CHANGE_VERSION,
    VERSION,
    delta_from_tail,
    encode_change,
    encode_new_partitions,
    encode_partitions,
    registration_from_tail,
    registration_tail,
    split_partition,
    split_partition_change,
)
from tests.unit.records.strategies import PAYLOADS, partition_registrations

TID = "AbCdEfGhIjKlMnOpQrStUv"
PART = PartitionRegistration(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1)


def protobuf_bytes(topic_id: str, partition_id: int, part: PartitionRegistration) -> bytes:
    return encode_record(make_record(partition_to_record(
        part, topic_id=topic_id, partition_id=partition_id)))


@given(parts=st.lists(partition_registrations, min_size=1, max_size=4),
       first_id=st.sampled_from([0, 1, 127, 128, 16_383, 16_384, 99_999, 2**31 - 10]),
       topic_id=st.sampled_from([TID, "t", "x" * 200, "é-topic"]))
def test_encode_partitions_equals_protobuf_and_splits_back(
    parts: list[PartitionRegistration], first_id: int, topic_id: str
) -> None:
    encoded = encode_partitions(topic_id, parts, first_id)
    assert encoded == [protobuf_bytes(topic_id, first_id + i, p) for i, p in enumerate(parts)]
    for i, (data, part) in enumerate(zip(encoded, parts, strict=True)):
        split = split_partition(data)
        if len(topic_id.encode()) >= 0x80 or len(data) >= 1 << 14:
            assert split is None  # not the layout it takes: protobuf decodes those
            continue
        assert split is not None
        pid, key, tail = split
        assert (pid, key.decode()) == (first_id + i, topic_id)
        assert tail == registration_tail(part)
        assert registration_from_tail(tail) == part


def test_the_tail_cache_returns_shared_registrations() -> None:
    (data,) = encode_partitions(TID, [PART], 5)
    split = split_partition(data)
    assert split is not None
    first = registration_from_tail(split[2])
    second = registration_from_tail(bytes(split[2]))
    assert first == PART and first is second


def payload_bytes(payload: bytes, version: int = VERSION) -> bytes:
    assert len(payload) < 0x80
    return bytes((0x08, version, 0x72, len(payload))) + payload


def test_split_refuses_what_it_does_not_take() -> None:
    (data,) = encode_partitions(TID, [PART], 3)
    tail = registration_tail(PART)
    tid_field = b"\x12" + bytes((len(TID),)) + TID.encode()
    refused = {
        "other record type": encode_record(make_record(pb.TopicRecord(name="a", topic_id=TID))),
        "version 0": payload_bytes(b"\x08\x03" + tid_field + tail, version=0),
        "a newer version": payload_bytes(b"\x08\x03" + tid_field + tail, version=VERSION + 1),
        "truncated": data[:-1],
        "trailing bytes": data + b"\x00",
        "explicit partition id 0": payload_bytes(b"\x08\x00" + tid_field + tail),
        "negative partition id": payload_bytes(
            b"\x08" + b"\xff" * 9 + b"\x01" + tid_field + tail),
        "no topic id": payload_bytes(b"\x08\x03" + tail),
        "empty topic id": payload_bytes(b"\x08\x03\x12\x00" + tail),
        "empty": b"",
    }
    for what, raw in refused.items():
        assert split_partition(raw) is None, what
    # Fields out of order: the split takes it, the tail (holding partition_id) does not.
    split = split_partition(payload_bytes(tid_field + b"\x08\x03" + tail))
    assert split is not None and registration_from_tail(split[2]) is None


def test_tails_that_are_not_only_the_registration_fields_are_refused() -> None:
    tail = registration_tail(PART)
    assert registration_from_tail(tail + b"\x08\x07") is None  # partition_id again
    assert registration_from_tail(tail + b"\x12\x01x") is None  # topic_id again
    assert registration_from_tail(b"\x1a\x05\x01") is None  # malformed
    unknown_state = pb.PartitionRecord(replicas=[1], isr=[1], leader=1)
    unknown_state.leader_recovery_state = 7  # type: ignore[assignment]
    assert registration_from_tail(unknown_state.SerializeToString()) is None


def test_a_tail_decodes_as_protobuf_reads_the_whole_record() -> None:
    part = PartitionRegistration(replicas=(4, 5, 6), isr=(5,), removing_replicas=(6,),
                                 adding_replicas=(4,), leader=-1,
                                 leader_recovery_state=LeaderRecoveryState.RECOVERING,
                                 leader_epoch=3, partition_epoch=9)
    (data,) = encode_partitions(TID, [part], 200)
    split = split_partition(data)
    assert split is not None
    assert registration_from_tail(split[2]) == partition_from_record(
        decode_record(data).partition)


@given(placements=st.lists(st.lists(st.integers(0, 300), min_size=1, max_size=4, unique=True)
                           .flatmap(lambda r: st.tuples(st.just(tuple(r)), st.sampled_from(
                               [tuple(r), tuple(r[:1]), tuple(r[-1:])]))), max_size=4),
       first_id=st.sampled_from([0, 1, 200]))
def test_new_partitions_are_led_by_the_first_of_the_isr_at_epoch_zero(
    placements: list[tuple[tuple[int, ...], tuple[int, ...]]], first_id: int
) -> None:
    expected = [PartitionRegistration(replicas, isr, leader=isr[0]) for replicas, isr in placements]
    assert encode_new_partitions(TID, first_id, placements) == encode_partitions(
        TID, expected, first_id)


# -- PartitionChangeRecords ------------------------------------------------------------


@given(change=PAYLOADS["partition_change"])
def test_a_change_splits_into_its_ids_and_a_tail_that_states_its_delta(
    change: pb.PartitionChangeRecord,
) -> None:
    data = encode_record(make_record(change))
    split = split_partition_change(data)
    if len(change.topic_id.encode()) >= 0x80 or len(data) >= 1 << 14 or not change.topic_id:
        assert split is None
        return
    assert split is not None
    pid, key, tail = split
    assert (pid, key.decode()) == (change.partition_id, change.topic_id)
    assert delta_from_tail(tail) == PartitionDelta.of(decode_record(data).partition_change)
    assert split_partition(data) is None  # not a PartitionRecord


def test_a_delta_states_what_is_set_and_clears_what_is_set_empty() -> None:
    change = pb.PartitionChangeRecord(topic_id=TID, partition_id=9, leader=-1)
    change.removing_replicas.SetInParent()
    change.isr.ids.extend([2, 3])
    split = split_partition_change(encode_record(make_record(change)))
    assert split is not None
    delta = delta_from_tail(split[2])
    assert delta == PartitionDelta(isr=(2, 3), leader=-1, removing_replicas=())
    moving = PartitionRegistration(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1,
                                   removing_replicas=(1,), leader_epoch=4, partition_epoch=7)
    assert moving.apply(delta) == PartitionRegistration(
        replicas=(1, 2, 3), isr=(2, 3), leader=-1, leader_epoch=5, partition_epoch=8)
    assert delta_from_tail(bytes(split[2])) is delta  # shared through the cache


def test_the_change_split_refuses_what_it_does_not_take() -> None:
    tid_field = b"\x12" + bytes((len(TID),)) + TID.encode()
    tail = b"\x20\x02"  # leader = 2

    def envelope(payload: bytes, version: int = CHANGE_VERSION) -> bytes:
        return bytes((0x08, version, 0x7A, len(payload))) + payload

    good = envelope(b"\x08\x03" + tid_field + tail)
    assert decode_record(good).partition_change.leader == 2
    assert split_partition_change(good) == (3, TID.encode(), tail)
    refused = {
        "a PartitionRecord": encode_partitions(TID, [PART], 3)[0],
        "version 0": envelope(b"\x08\x03" + tid_field + tail, version=0),
        "a newer version": envelope(b"\x08\x03" + tid_field + tail, version=CHANGE_VERSION + 1),
        "truncated": good[:-1],
        "trailing bytes": good + b"\x00",
        "no topic id": envelope(b"\x08\x03" + tail),
    }
    for what, raw in refused.items():
        assert split_partition_change(raw) is None, what
    assert delta_from_tail(tail + b"\x08\x07") is None  # partition_id again
    assert delta_from_tail(tail + b"\x12\x01x") is None  # topic_id again
    assert delta_from_tail(b"\x1a\x05\x01") is None  # malformed
    unknown_state = pb.PartitionChangeRecord(leader=1)
    unknown_state.leader_recovery_state = 7  # type: ignore[assignment]
    assert delta_from_tail(unknown_state.SerializeToString()) is None


_id_tuples = st.lists(st.integers(0, 2**31 - 1), max_size=5).map(tuple)
deltas = st.builds(
    PartitionDelta,
    isr=st.none() | _id_tuples,
    leader=st.none() | st.integers(-1, 2**31 - 1),
    replicas=st.none() | _id_tuples,
    removing_replicas=st.none() | _id_tuples,
    adding_replicas=st.none() | _id_tuples,
    leader_recovery_state=st.none() | st.sampled_from(LeaderRecoveryState),
)


@given(delta=deltas,
       partition_id=st.sampled_from([0, 1, 127, 128, 16_384, 2**31 - 1]),
       topic_id=st.sampled_from([TID, "t", "x" * 200, "é-topic"]))
def test_encode_change_equals_protobuf_and_reads_back(
    delta: PartitionDelta, partition_id: int, topic_id: str
) -> None:
    data = encode_change(topic_id, partition_id, delta)
    assert data == encode_record(make_record(
        change_to_record(delta, topic_id=topic_id, partition_id=partition_id)))
    assert PartitionDelta.of(decode_record(data).partition_change) == delta
    split = split_partition_change(data)
    if split is not None:  # a topic id or record past one-byte lengths takes protobuf
        assert split[:2] == (partition_id, topic_id.encode())
        assert delta_from_tail(split[2]) == delta
