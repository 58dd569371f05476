"""`PartitionReplica`, the data plane's core: offsets, the high watermark,
idempotence, divergence and bad batches, on real log files, without a network."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.errors import DataPlaneError
from broker_agent.replica.partition import Diverged, PartitionReplica, Role
from broker_agent.replica.records import (
    DataRecord,
    ProducerStamp,
    decode_record,
    decode_values,
    encode_produce_batch,
    encode_record,
)
from controller.logformat.batch import EMPTY_ORIGIN, RecordBatch, encode_batch
from controller.storage.log import LogConfig

CONFIG = LogConfig(segment_bytes=8 * 1024 * 1024)


def batch_of(*values: str, base_offset: int = 0) -> bytes:
    if base_offset == 0:
        return encode_produce_batch([DataRecord(None, v.encode()) for v in values])
    return encode_batch(RecordBatch(base_offset, 0, 0, False, EMPTY_ORIGIN,
                                    tuple(encode_record(DataRecord(None, v.encode()))
                                          for v in values)))


def replica(tmp_path: Path, broker_id: int, name: str = "r") -> PartitionReplica:
    return PartitionReplica(broker_id, "orders", "T1", 0, tmp_path / f"{name}{broker_id}", CONFIG)


def values(records: bytes) -> list[str]:
    return [v.decode() for v in decode_values(records)]


def test_record_codec_round_trips_keys_and_values() -> None:
    for record in (DataRecord(None, b"v", 5), DataRecord(b"", b"", 0), DataRecord(b"k", b"x" * 300, -1)):
        assert decode_record(encode_record(record)) == record


def test_high_watermark_is_the_slowest_in_sync_replica(tmp_path: Path) -> None:
    leader = replica(tmp_path, 1)
    leader.become_leader(2, 5, (1, 2, 3), (1, 2, 3), now_ms=0)
    first = leader.append_as_leader(batch_of("a", "b"), None, "User:p", "x", 1000)
    assert (first.base_offset, first.last_offset) == (0, 1)
    assert leader.high_watermark == 0  # not even flushed here
    assert leader.log is not None
    leader.log.flush()
    assert not leader.maybe_advance_high_watermark()  # followers have nothing
    leader.read_for_follower(2, 2, 2, 1 << 20, now_ms=1)
    assert leader.high_watermark == 0  # follower 3 still at nothing
    leader.read_for_follower(3, 1, -1, 1 << 20, now_ms=1)
    assert leader.high_watermark == 1
    leader.read_for_follower(3, 2, 2, 1 << 20, now_ms=1)
    assert leader.high_watermark == 2
    leader.check()
    # Consumers see only what every in-sync replica has.
    leader.append_as_leader(batch_of("c"), None, "User:p", "x", 1001)
    assert values(leader.read_for_consumer(0, 1 << 20).records) == ["a", "b"]
    with pytest.raises(DataPlaneError) as refused:
        leader.read_for_consumer(3, 1 << 20)
    assert refused.value.code == dpb.OFFSET_OUT_OF_RANGE


def test_a_follower_outside_the_isr_does_not_hold_the_high_watermark(tmp_path: Path) -> None:
    leader = replica(tmp_path, 1)
    leader.become_leader(1, 1, (1, 2, 3), (1, 2), now_ms=0)
    leader.append_as_leader(batch_of("a"), None, "", "", 0)
    assert leader.log is not None
    leader.log.flush()
    leader.read_for_follower(2, 1, 1, 1 << 20, now_ms=0)
    assert leader.high_watermark == 1  # broker 3 (not in the ISR) never fetched


def test_idempotent_producer_writes_a_retried_batch_once(tmp_path: Path) -> None:
    leader = replica(tmp_path, 1)
    leader.become_leader(0, 0, (1,), (1,), now_ms=0)
    stamp = ProducerStamp(77, 0)
    first = leader.append_as_leader(batch_of("a", "b"), stamp, "", "", 0)
    again = leader.append_as_leader(batch_of("a", "b"), stamp, "", "", 0)
    assert again.duplicate and (again.base_offset, again.last_offset) == (0, 1)
    assert not first.duplicate and leader.log_end_offset == 2
    nxt = leader.append_as_leader(batch_of("c"), ProducerStamp(77, 2), "", "", 0)
    assert nxt.base_offset == 2
    with pytest.raises(DataPlaneError) as gap:
        leader.append_as_leader(batch_of("e"), ProducerStamp(77, 9), "", "", 0)
    assert gap.value.code == dpb.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leader.log_end_offset == 3
    # The producers' state is rebuilt from the log: a new leader on the same files
    # still knows the batch.
    leader.close()
    reopened = replica(tmp_path, 1)
    reopened.become_leader(1, 1, (1,), (1,), now_ms=0)
    assert reopened.append_as_leader(batch_of("c"), ProducerStamp(77, 2), "", "", 0).duplicate


@pytest.mark.parametrize("bad, code", [
    (b"\x00" * 10, dpb.CORRUPT_MESSAGE),
    (batch_of("a")[:-1] + b"\xff", dpb.CORRUPT_MESSAGE),  # CRC mismatch
    (batch_of("a", base_offset=5), dpb.INVALID_RECORD),
    (batch_of("a") + batch_of("b"), dpb.INVALID_RECORD),
    (encode_batch(RecordBatch(0, 0, 0, False, EMPTY_ORIGIN, (b"short",))), dpb.INVALID_RECORD),
    (encode_batch(RecordBatch(0, 0, 0, True, EMPTY_ORIGIN, (encode_record(DataRecord(None, b"")),))),
     dpb.INVALID_RECORD),
])
def test_a_bad_batch_is_refused_and_nothing_is_appended(tmp_path: Path, bad: bytes,
                                                        code: int) -> None:
    leader = replica(tmp_path, 1)
    leader.become_leader(0, 0, (1,), (1,), now_ms=0)
    leader.append_as_leader(batch_of("ok"), None, "", "", 0)
    with pytest.raises(DataPlaneError) as refused:
        leader.append_as_leader(bad, None, "", "", 0)
    assert refused.value.code == code
    assert leader.log_end_offset == 1


def test_a_follower_only_produces_nowhere(tmp_path: Path) -> None:
    follower = replica(tmp_path, 2)
    follower.become_follower(1, 0, 0, (1, 2), (1, 2))
    with pytest.raises(DataPlaneError) as refused:
        follower.append_as_leader(batch_of("a"), None, "", "", 0)
    assert refused.value.code == dpb.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(DataPlaneError):
        follower.read_for_consumer(0, 100)


def test_stale_and_future_leader_epochs_are_told_apart(tmp_path: Path) -> None:
    leader = replica(tmp_path, 1)
    leader.become_leader(4, 0, (1,), (1,), now_ms=0)
    leader.check_leader_epoch(4)
    leader.check_leader_epoch(-1)
    with pytest.raises(DataPlaneError) as old:
        leader.check_leader_epoch(3)
    assert old.value.code == dpb.FENCED_LEADER_EPOCH
    with pytest.raises(DataPlaneError) as new:
        leader.check_leader_epoch(5)
    assert new.value.code == dpb.UNKNOWN_LEADER_EPOCH


def replicate(leader: PartitionReplica, follower: PartitionReplica, rounds: int = 5) -> None:
    """The fetch loop without a network: position, answer, append, flush."""
    for _ in range(rounds):
        answer = leader.read_for_follower(follower.broker_id, follower.log_end_offset,
                                          follower.last_epoch, 1 << 20, now_ms=0)
        if answer.diverging is not None:
            follower.truncate_for_divergence(answer.diverging)
            continue
        follower.append_as_follower(answer.records, answer.high_watermark)
        if follower.log is not None:
            follower.log.flush()


def test_a_zombie_leaders_tail_is_truncated_when_it_follows_again(tmp_path: Path) -> None:
    """Broker 1 led at epoch 1 and appended a batch nobody copied (it was cut off);
    broker 2 took over at epoch 2 and wrote its own. Broker 1, following again, must
    drop its tail: the logs are then equal (KIP-101/KIP-279)."""
    one, two = replica(tmp_path, 1), replica(tmp_path, 2)
    one.become_leader(1, 1, (1, 2), (1, 2), now_ms=0)
    two.become_follower(1, 1, 1, (1, 2), (1, 2))
    one.append_as_leader(batch_of("a", "b"), None, "", "", 0)
    assert one.log is not None
    one.log.flush()
    replicate(one, two)
    assert two.log_end_offset == 2 and one.high_watermark == 2
    one.append_as_leader(batch_of("zombie-1", "zombie-2", "zombie-3"), None, "", "", 0)
    one.log.flush()
    # The controller moves leadership to 2 (epoch 2); 2 writes.
    two.become_leader(2, 2, (1, 2), (2,), now_ms=0)
    two.append_as_leader(batch_of("c"), None, "", "", 0)
    assert two.log is not None
    two.log.flush()
    one.become_follower(2, 2, 2, (1, 2), (2,))
    replicate(two, one)
    assert values(b"".join(one.log.read(0))) == ["a", "b", "c"]
    assert one.log.epoch_history() == two.log.epoch_history() == [(1, 0), (2, 2)]
    one.check()
    two.check()


def test_a_follower_with_an_epoch_the_leader_never_had_truncates_to_what_they_share(
        tmp_path: Path) -> None:
    one, two = replica(tmp_path, 1), replica(tmp_path, 2)
    two.become_follower(1, 0, 0, (1, 2), (1, 2))
    one.become_leader(0, 0, (1, 2), (1, 2), now_ms=0)
    one.append_as_leader(batch_of("a"), None, "", "", 0)
    assert one.log is not None
    one.log.flush()
    replicate(one, two)
    # 2 leads epoch 1 alone and writes; 1 never hears of it, and leads epoch 2.
    two.become_leader(1, 1, (1, 2), (2,), now_ms=0)
    two.append_as_leader(batch_of("lost-1", "lost-2"), None, "", "", 0)
    one.become_leader(2, 2, (1, 2), (1,), now_ms=0)
    one.append_as_leader(batch_of("b", "c", "d"), None, "", "", 0)
    one.log.flush()
    two.become_follower(1, 2, 2, (1, 2), (1,))
    replicate(one, two)
    assert two.log is not None
    assert values(b"".join(two.log.read(0))) == ["a", "b", "c", "d"]


def test_retention_deletes_only_whole_segments_below_the_high_watermark(tmp_path: Path) -> None:
    small = LogConfig(segment_bytes=8 * 1024 * 1024)
    leader = PartitionReplica(1, "orders", "T1", 0, tmp_path / "r", small)
    leader.become_leader(0, 0, (1,), (1,), now_ms=0)
    for i in range(3):
        leader.append_as_leader(batch_of(f"v{i}"), None, "", "", 0)
        assert leader.log is not None
        leader.log.roll()
    leader.log.flush()
    assert leader.maybe_advance_high_watermark() and leader.high_watermark == 3
    # By size: keep at most one segment's worth.
    one_segment = leader.log.segment_infos()[0].size_bytes
    assert leader.apply_retention(0, -1, one_segment) == 2
    # By time: everything old, but never the active segment or past the HW.
    leader.append_as_leader(batch_of("v3"), None, "", "", 0)
    assert leader.apply_retention(10**15, 1, -1) == 3
    assert leader.high_watermark == 3 and leader.log_start_offset == 3
    with pytest.raises(DataPlaneError) as gone:
        leader.read_for_consumer(0, 100)
    assert gone.value.code == dpb.OFFSET_OUT_OF_RANGE


def test_a_torn_tail_is_cut_on_reopen_and_refetched(tmp_path: Path) -> None:
    leader, follower = replica(tmp_path, 1), replica(tmp_path, 2)
    leader.become_leader(0, 0, (1, 2), (1, 2), now_ms=0)
    follower.become_follower(1, 0, 0, (1, 2), (1, 2))
    leader.append_as_leader(batch_of("a"), None, "", "", 0)
    leader.append_as_leader(batch_of("b"), None, "", "", 0)
    assert leader.log is not None
    leader.log.flush()
    replicate(leader, follower)
    assert follower.log is not None
    segment = follower.log.segment_paths()[-1]
    follower.close()
    # A crash tore the last batch: the log beyond the recovery point is cut...
    data = segment.read_bytes()
    segment.write_bytes(data[:-3])
    (follower.directory / "recovery-point").unlink()
    again = replica(tmp_path, 2)
    again.become_follower(1, 0, 0, (1, 2), (1, 2))
    assert again.log_end_offset == 1
    # ...and fetched again from the leader.
    replicate(leader, again)
    assert again.log is not None
    assert values(b"".join(again.log.read(0))) == ["a", "b"]
    assert again.role is Role.FOLLOWER


def test_a_directory_of_a_deleted_topic_with_the_same_name_is_not_reused(tmp_path: Path) -> None:
    old = PartitionReplica(1, "orders", "OLD", 0, tmp_path / "orders-0", CONFIG)
    old.become_leader(0, 0, (1,), (1,), now_ms=0)
    old.append_as_leader(batch_of("old"), None, "", "", 0)
    old.close()
    new = PartitionReplica(1, "orders", "NEW", 0, tmp_path / "orders-0", CONFIG)
    new.become_leader(0, 0, (1,), (1,), now_ms=0)
    assert new.log_end_offset == 0
    new.append_as_leader(batch_of("new"), None, "", "", 0)
    assert (tmp_path / "orders-0" / "topic-id").read_text().strip() == "NEW"


def test_diverged_answer_with_no_common_epoch_empties_the_follower(tmp_path: Path) -> None:
    follower = replica(tmp_path, 2)
    follower.become_leader(5, 0, (2,), (2,), now_ms=0)
    follower.append_as_leader(batch_of("x"), None, "", "", 0)
    follower.become_follower(1, 6, 1, (1, 2), (1,))
    assert follower.truncate_for_divergence(Diverged(-1, -1)) == 0


def test_damage_to_fsynced_records_is_cut_and_refetched_never_served(tmp_path: Path) -> None:
    leader, follower = replica(tmp_path, 1), replica(tmp_path, 2)
    leader.become_leader(0, 0, (1, 2), (1, 2), now_ms=0)
    follower.become_follower(1, 0, 0, (1, 2), (1, 2))
    for value in ("a", "b", "c"):
        leader.append_as_leader(batch_of(value), None, "", "", 0)
    assert leader.log is not None
    leader.log.flush()
    replicate(leader, follower)
    assert follower.log is not None
    segment = follower.log.segment_paths()[-1]
    follower.close()
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle batch
    segment.write_bytes(bytes(data))
    again = replica(tmp_path, 2)
    assert again.damage is not None and again.log_end_offset < 3
    again.become_follower(1, 0, 0, (1, 2), (1, 2))
    replicate(leader, again)
    assert again.log is not None
    assert values(b"".join(again.log.read(0))) == ["a", "b", "c"]


def test_the_high_watermark_stands_still_below_min_isr(tmp_path: Path) -> None:
    """KIP-966: a replica that left an ISR below min ISR is an eligible leader, which
    it can only be if the HW did not move past it meanwhile."""
    leader = replica(tmp_path, 1)
    leader.min_isr = 2
    leader.become_leader(1, 1, (1, 2), (1,), now_ms=0)
    leader.append_as_leader(batch_of("a"), None, "", "", 0)
    assert leader.log is not None
    leader.log.flush()
    assert not leader.maybe_advance_high_watermark()
    assert leader.high_watermark == 0
    leader.read_for_follower(2, 1, 1, 1 << 20, now_ms=0)
    leader.become_leader(1, 2, (1, 2), (1, 2), now_ms=0)  # 2 is reported back in sync
    assert leader.high_watermark == 1


def test_a_follower_keeps_what_it_shares_with_a_leader_that_has_not_written_yet(
        tmp_path: Path) -> None:
    """Found by the data-plane simulation (seed 527): broker 2 wrote at epoch 1 as a
    cut-off leader; broker 3 leads epoch 6 and has written nothing in it. Broker 2's
    last epoch (1) is newer than every batch of 3's but older than its leadership:
    it must drop only its epoch-1 tail, not its whole log (it may be an eligible
    leader: what it shares with the leader is committed)."""
    two, three = replica(tmp_path, 2), replica(tmp_path, 3)
    two.become_leader(0, 0, (2, 3), (2, 3), now_ms=0)
    three.become_follower(2, 0, 0, (2, 3), (2, 3))
    two.append_as_leader(batch_of("a", "b"), None, "", "", 0)
    assert two.log is not None
    two.log.flush()
    replicate(two, three)
    two.become_leader(1, 1, (2, 3), (2,), now_ms=0)
    two.append_as_leader(batch_of("tail"), None, "", "", 0)
    three.become_leader(6, 2, (2, 3), (3,), now_ms=0)
    two.become_follower(3, 6, 2, (2, 3), (3,))
    answer = three.read_for_follower(2, two.log_end_offset, two.last_epoch, 1 << 20, now_ms=0)
    assert answer.diverging == Diverged(0, 2)
    two.truncate_for_divergence(answer.diverging)
    assert values(b"".join(two.log.read(0))) == ["a", "b"]
    assert two.log.epoch_history() == [(0, 0)]
