"""`MetadataState.replay_encoded` (the controller's replay, from the bytes) against
record-by-record `replay` of the decoded records, including the records its
PartitionRecord and PartitionChangeRecord fast paths do not take, and its errors."""

from __future__ import annotations

import pytest

from controller.metadata.errors import MetadataReplayError
from controller.records import (
    BrokerIdList,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RecordDecodeError,
    TopicRecord,
    decode_record,
    encode_record,
    make_record,
)
from controller.records.partition_wire import delta_from_tail, split_partition_change
from tests.unit.metadata.support import Harness, new_state

T1, T2 = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"


def partition(tid: str, pid: int, replicas: tuple[int, ...], leader: int | None = None,
              isr: tuple[int, ...] | None = None) -> MetadataRecord:
    return make_record(PartitionRecord(
        topic_id=tid, partition_id=pid, replicas=replicas,
        isr=replicas if isr is None else isr,
        leader=replicas[0] if leader is None else leader))


def change(tid: str, pid: int, *, leader: int | None = None,
           isr: tuple[int, ...] | None = None,
           removing: tuple[int, ...] | None = None) -> MetadataRecord:
    record = PartitionChangeRecord(topic_id=tid, partition_id=pid)
    if leader is not None:
        record.leader = leader
    if isr is not None:
        record.isr.CopyFrom(BrokerIdList(ids=isr))
    if removing is not None:
        record.removing_replicas.CopyFrom(BrokerIdList(ids=removing))
    return make_record(record)


def base_log() -> list[MetadataRecord]:
    h = Harness()
    h.add_brokers([1, 2, 3, 4])
    return [*h.log, make_record(TopicRecord(name="t1", topic_id=T1)),
            make_record(TopicRecord(name="t2", topic_id=T2))]


def replayed_one_by_one(records: list[bytes]) -> object:
    state = new_state()
    for offset, data in enumerate(records):
        state.replay(decode_record(data), offset)
    state.replication.check_indexes()
    return state.to_image()


def test_runs_across_topics_and_rewrites_replay_like_one_record_at_a_time() -> None:
    records = [encode_record(r) for r in [
        *base_log(),
        partition(T1, 0, (1, 2, 3)), partition(T1, 1, (2, 3, 4)),
        partition(T2, 0, (3, 4, 1), isr=(3,)),
        partition(T1, 2, (4, 1, 2), leader=-1, isr=(4,)),
        # The same new partition twice in one run: the second replaces the first.
        partition(T1, 3, (1, 2, 3)), partition(T1, 4, (1, 2, 3)),
        partition(T1, 3, (2, 3, 4), leader=3), partition(T1, 4, (3, 4, 1)),
        partition(T1, 0, (1, 2, 4)),
        # Changes between runs, to a partition of the run just before, and the same
        # change to two partitions (one shared delta).
        change(T1, 4, leader=4, isr=(4, 1)), partition(T1, 5, (2, 3, 4)),
        change(T2, 0, leader=-1), change(T1, 5, isr=(2, 3)), change(T1, 1, isr=(2, 3)),
        partition(T1, 6, (1, 2, 3)), change(T1, 6, leader=2, isr=(2, 3)),
        # At the topic's count (new for sure), then an existing one (the run so far
        # written), then the first again (now present), then past it.
        partition(T1, 7, (1, 2, 3)), partition(T1, 0, (2, 3, 4)),
        partition(T1, 7, (2, 3, 4), leader=3), partition(T1, 8, (3, 4, 1)),
        partition(T1, 9, (4, 1, 2)),
    ]]
    state = new_state()
    assert state.replay_encoded(records, 0) == len(records)
    state.replication.check_indexes()
    assert state.to_image() == replayed_one_by_one(records)
    assert state.last_applied_offset() == len(records) - 1


def test_layouts_the_fast_path_does_not_take_decode_the_same() -> None:
    log = [encode_record(r) for r in base_log()]
    canonical = encode_record(partition(T1, 1, (1, 2, 3)))
    payload = canonical[4:]
    tid_field = b"\x12\x16" + T1.encode()
    # The same record with topic_id written before partition_id.
    reordered = canonical[:4] + tid_field + b"\x08\x01" + payload[2 + len(tid_field):]
    assert decode_record(reordered) == decode_record(canonical)
    records = [*log, reordered, encode_record(partition(T1, 0, (2, 3, 4)))]
    state = new_state()
    state.replay_encoded(records, 0)
    state.replication.check_indexes()
    assert state.to_image() == replayed_one_by_one(records)
    assert state.replication.partition_count(T1) == 2


def test_a_change_the_fast_path_does_not_take_replays_the_same() -> None:
    log = [encode_record(r) for r in [*base_log(), partition(T1, 0, (1, 2, 3)),
                                      partition(T1, 1, (1, 2, 3))]]
    canonical = encode_record(change(T1, 1, leader=2, isr=(2, 3)))
    tid_field = b"\x12\x16" + T1.encode()
    # topic_id written before partition_id: the tail then holds partition_id, which
    # the fast path refuses.
    reordered = canonical[:4] + tid_field + b"\x08\x01" + canonical[6 + len(tid_field):]
    assert decode_record(reordered) == decode_record(canonical)
    split = split_partition_change(reordered)
    assert split is not None and delta_from_tail(split[2]) is None
    for records in ([*log, canonical], [*log, reordered]):
        state = new_state()
        state.replay_encoded(records, 0)
        state.replication.check_indexes()
        assert state.to_image() == replayed_one_by_one(records)
        part = state.replication.partition(T1, 1)
        assert part is not None and (part.leader, part.isr, part.leader_epoch) == (2, (2, 3), 1)


def test_a_change_to_an_unknown_partition_fails_after_the_records_before_it() -> None:
    log = [encode_record(r) for r in [*base_log(), partition(T1, 0, (1, 2, 3))]]
    records = [*log, encode_record(change(T1, 0, isr=(1, 2))),
               encode_record(change(T1, 1, isr=(1, 2)))]
    state = new_state()
    with pytest.raises(MetadataReplayError, match="unknown partition 1"):
        state.replay_encoded(records, 0)
    part = state.replication.partition(T1, 0)
    assert part is not None and part.isr == (1, 2)
    assert state.last_applied_offset() == len(log)


def test_a_partition_of_an_unknown_topic_fails_after_the_records_before_it() -> None:
    log = [encode_record(r) for r in base_log()]
    records = [*log, encode_record(partition(T1, 0, (1, 2, 3))),
               encode_record(partition("CCCCCCCCCCCCCCCCCCCCCC", 0, (1, 2, 3)))]
    state = new_state()
    with pytest.raises(MetadataReplayError, match="unknown topic id"):
        state.replay_encoded(records, 0)
    assert state.replication.partition_count(T1) == 1
    assert state.last_applied_offset() == len(log)


def test_unreadable_bytes_are_a_decode_error() -> None:
    state = new_state()
    with pytest.raises(RecordDecodeError):
        state.replay_encoded([b"\x08\x01\x72\x05garbage"], 0)


def test_a_snapshot_load_replays_every_record_at_one_offset() -> None:
    records = [encode_record(r) for r in [*base_log(), partition(T1, 0, (1, 2, 3))]]
    state = new_state()
    state.replay_encoded(records, 41, step=0)
    assert state.last_applied_offset() == 41
    assert state.to_image() == replayed_one_by_one(records)


def test_a_revert_undoes_a_run_exactly() -> None:
    log = [encode_record(r) for r in [*base_log(), partition(T1, 0, (1, 2, 3)),
                                      partition(T2, 0, (2, 3, 4), isr=(2,))]]
    state = new_state()
    committed = state.replay_encoded(log, 0) - 1
    state.registry.create_snapshot(committed)
    before = state.to_image()
    state.replay_encoded([encode_record(r) for r in [
        partition(T1, 1, (2, 3, 4), leader=-1, isr=(2,)), partition(T1, 2, (1, 2, 3)),
        partition(T1, 1, (3, 4, 1)), partition(T1, 0, (4, 1, 2), isr=(4,)),
        partition(T2, 0, (1, 2, 3)), partition(T2, 1, (1, 2, 3)),
    ]], committed + 1)
    state.registry.create_snapshot(committed + 6)
    state.replication.check_indexes()
    assert state.to_image() != before
    state.registry.revert_to_snapshot(committed)
    assert state.to_image() == before
    state.replication.check_indexes()
    assert state.last_applied_offset() == committed
