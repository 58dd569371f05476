"""SegmentedLog: appends, reads through the index, rolling, truncation, deletion, reopen."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.logformat.batch import BatchOrigin, RecordBatch, encode_batch
from controller.storage.errors import InvalidAppendError, OffsetOutOfRangeError
from controller.storage.log import LogConfig, SegmentedLog

# Small segments (the minimum is MAX_BATCH_BYTES) with a dense index.
SMALL = LogConfig(segment_bytes=8 * 1024 * 1024, index_interval_bytes=256)


def small_roll_config() -> LogConfig:
    return SMALL


def fill(log: SegmentedLog, n_batches: int, rng: random.Random, epoch: int = 1,
         max_records: int = 5) -> list[RecordBatch]:
    out = []
    for _ in range(n_batches):
        records = tuple(rng.randbytes(rng.randint(0, 80)) for _ in range(rng.randint(1, max_records)))
        batch = RecordBatch(log.end_offset, epoch, 1000 + log.end_offset, False,
                            BatchOrigin("p", "c", str(log.end_offset)), records)
        log.append(batch)
        out.append(batch)
    return out


def scan_all(log: SegmentedLog) -> list[RecordBatch]:
    return log.read_batches(log.start_offset, max_bytes=1 << 40)


def test_empty_log(tmp_path: Path) -> None:
    with SegmentedLog.open(tmp_path) as log:
        assert (log.start_offset, log.end_offset, log.flushed_offset, log.last_epoch) == (0, 0, 0,
                                                                                          -1)
        assert log.read(0) == [] and log.read_batches(0) == []
        assert log.epoch_history() == []
        log.truncate_to(0)  # no-op
        assert log.delete_below(100) == 0
    with SegmentedLog.open(tmp_path) as log:
        assert log.end_offset == 0 and log.segment_count == 1


def test_empty_log_can_start_at_an_offset(tmp_path: Path) -> None:
    with SegmentedLog.open(tmp_path, initial_offset=500) as log:
        assert log.start_offset == log.end_offset == 500
        log.append_records(1, 0, [b"a", b"b"])
    with SegmentedLog.open(tmp_path) as log:
        assert (log.start_offset, log.end_offset) == (500, 502)


def test_append_requires_end_offset_and_monotonic_epoch(tmp_path: Path) -> None:
    with SegmentedLog.open(tmp_path) as log:
        log.append_records(3, 0, [b"x"])
        with pytest.raises(InvalidAppendError, match="base offset 5"):
            log.append(RecordBatch(5, 3, 0, False, BatchOrigin(), (b"y",)))
        with pytest.raises(InvalidAppendError, match="epoch 2"):
            log.append(RecordBatch(1, 2, 0, False, BatchOrigin(), (b"y",)))
        bad = bytearray(encode_batch(RecordBatch(1, 3, 0, False, BatchOrigin(), (b"y",))))
        bad[-1] ^= 1
        with pytest.raises(InvalidAppendError, match="CRC"):
            log.append(bytes(bad))
        assert log.end_offset == 1


def test_raw_multi_batch_append_and_read_return_stored_bytes(tmp_path: Path) -> None:
    rng = random.Random(1)
    raw = []
    offset = 0
    for _ in range(10):
        batch = RecordBatch(offset, 2, 0, False, BatchOrigin(), (rng.randbytes(30),) * 3)
        raw.append(encode_batch(batch))
        offset = batch.next_offset
    with SegmentedLog.open(tmp_path) as log:
        assert log.append(b"".join(raw)) == 30
        assert log.read(0, 1 << 20) == raw
        assert log.read(4, 1) == [raw[1]]  # at least one batch, the one holding offset 4
        assert log.read(0, 1 << 20, max_offset=9) == raw[:3]


def test_read_from_random_offsets_equals_a_scan(tmp_path: Path) -> None:
    rng = random.Random(7)
    with SegmentedLog.open(tmp_path, SMALL) as log:
        batches = fill(log, 600, rng)
        log.roll()
        batches += fill(log, 300, rng, epoch=2)
        assert scan_all(log) == batches
        for _ in range(300):
            offset = rng.randrange(log.end_offset)
            expected = [b for b in batches if b.next_offset > offset]
            got = log.read_batches(offset, max_bytes=rng.randint(1, 5000))
            assert got and got == expected[: len(got)]
            assert got[0].base_offset <= offset < got[0].next_offset
    # The same after reopening (index files reloaded / rebuilt).
    with SegmentedLog.open(tmp_path, SMALL) as log:
        for _ in range(100):
            offset = rng.randrange(log.end_offset)
            assert log.read_batches(offset, 1)[0] == next(b for b in batches
                                                          if b.next_offset > offset)


def test_index_file_is_a_cache(tmp_path: Path) -> None:
    rng = random.Random(3)
    with SegmentedLog.open(tmp_path, SMALL) as log:
        batches = fill(log, 300, rng)
        log.flush()
        index = Path(str(log.segment_paths()[0])[:-4] + ".index")
    good = index.read_bytes()
    assert len(good) > 16
    for damage in (b"", good[:-3], b"\xff" * len(good), good[8:]):
        index.write_bytes(damage)
        with SegmentedLog.open(tmp_path, SMALL) as log:
            assert scan_all(log) == batches
            assert log.read_batches(batches[150].base_offset, 1) == [batches[150]]
        assert index.read_bytes() == good
    index.unlink()
    with SegmentedLog.open(tmp_path, SMALL) as log:
        assert scan_all(log) == batches
    assert index.read_bytes() == good


def test_roll_by_size_and_reopen(tmp_path: Path) -> None:
    rng = random.Random(5)
    config = LogConfig(segment_bytes=8 * 1024 * 1024, index_interval_bytes=4096)
    with SegmentedLog.open(tmp_path, config) as log:
        big = rng.randbytes(1024 * 1024)
        for _ in range(20):
            log.append_records(1, 0, [big])
        assert log.segment_count == 3  # 7 MiB-ish per segment
        log.flush()
        names = [p.name for p in log.segment_paths()]
    assert names[0] == "00000000000000000000.log"
    assert [int(n[:20]) for n in names] == sorted(int(n[:20]) for n in names)
    with SegmentedLog.open(tmp_path, config) as log:
        assert log.end_offset == 20 and log.segment_count == 3
        assert all(b.records == (big,) for b in scan_all(log))


def test_roll_by_age_uses_the_clock(tmp_path: Path) -> None:
    now = [1000]
    config = LogConfig(segment_ms=100)
    with SegmentedLog.open(tmp_path, config, clock_ms=lambda: now[0]) as log:
        log.append_records(1, 0, [b"a"])
        now[0] += 99
        log.append_records(1, 0, [b"b"])
        assert log.segment_count == 1
        now[0] += 1
        log.append_records(1, 0, [b"c"])
        assert log.segment_count == 2
        assert log.segment_paths()[1].name == "00000000000000000002.log"


def test_roll_by_age_without_clock_uses_append_time(tmp_path: Path) -> None:
    with SegmentedLog.open(tmp_path, LogConfig(segment_ms=100)) as log:
        log.append_records(1, 5000, [b"a"])
        log.append_records(1, 5099, [b"b"])
        log.append_records(1, 5100, [b"c"])
        assert log.segment_count == 2


def test_truncate_inside_segment_at_boundary_and_into_previous(tmp_path: Path) -> None:
    rng = random.Random(11)
    with SegmentedLog.open(tmp_path, SMALL) as log:
        first = fill(log, 50, rng, epoch=1)
        log.roll()
        second = fill(log, 50, rng, epoch=2)
        log.roll()
        third = fill(log, 50, rng, epoch=3)
        log.flush()
        assert log.segment_count == 3
        assert log.epoch_history() == [(1, 0), (2, second[0].base_offset),
                                       (3, third[0].base_offset)]
        with pytest.raises(OffsetOutOfRangeError, match="batch boundary"):
            if third[5].record_count > 1:
                log.truncate_to(third[5].base_offset + 1)
            else:
                raise OffsetOutOfRangeError("batch boundary (single-record batch)")
        log.truncate_to(third[10].base_offset)
        assert log.end_offset == third[10].base_offset and log.segment_count == 3
        assert log.flushed_offset == third[10].base_offset
        # Exactly at a segment boundary: the segment stays, empty.
        log.truncate_to(third[0].base_offset)
        assert log.segment_count == 3 and log.end_offset == third[0].base_offset
        assert log.epoch_history() == [(1, 0), (2, second[0].base_offset)]
        # Into the previous-but-one segment: later segments are deleted.
        log.truncate_to(first[20].base_offset)
        assert log.segment_count == 1 and log.last_epoch == 1
        assert scan_all(log) == first[:20]
        replacement = fill(log, 5, rng, epoch=4)
    with SegmentedLog.open(tmp_path, SMALL) as log:
        assert scan_all(log) == first[:20] + replacement
        assert sorted(os.listdir(tmp_path)) == ["00000000000000000000.index",
                                                "00000000000000000000.log"]
        assert log.epoch_history() == [(1, 0), (4, first[20].base_offset)]


def test_truncate_to_start_empties_the_log(tmp_path: Path) -> None:
    rng = random.Random(2)
    with SegmentedLog.open(tmp_path, SMALL) as log:
        fill(log, 10, rng)
        log.roll()
        fill(log, 10, rng)
        log.truncate_to(0)
        assert (log.start_offset, log.end_offset, log.last_epoch) == (0, 0, -1)
        with pytest.raises(OffsetOutOfRangeError):
            log.truncate_to(5)
    with SegmentedLog.open(tmp_path, SMALL) as log:
        assert log.end_offset == 0


def test_delete_below(tmp_path: Path) -> None:
    rng = random.Random(4)
    with SegmentedLog.open(tmp_path, SMALL) as log:
        segs = []
        for epoch in (1, 2, 3):
            segs.append(fill(log, 20, rng, epoch=epoch))
            log.roll()
        bases = [s[0].base_offset for s in segs]
        assert log.delete_below(0) == 0  # below the start: no-op
        assert log.delete_below(bases[1] - 1) == 0  # segment 0 not wholly below
        assert log.delete_below(bases[1] + 3) == bases[1]
        assert log.start_offset == bases[1] and log.segment_count == 3  # + empty active
        assert log.epoch_history()[0] == (2, bases[1])
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0)
        assert log.read_batches(bases[1], 1)[0] == segs[1][0]
        assert log.delete_below(bases[1]) == bases[1]  # at the start: no-op
        # The active segment is never deleted, even when everything is below.
        assert log.delete_below(10**9) == log.end_offset
        assert log.segment_count == 1
        assert log.read_batches(log.end_offset) == []
    with SegmentedLog.open(tmp_path, SMALL) as log:
        assert log.start_offset == log.end_offset == segs[2][-1].next_offset


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    rng = random.Random(9)
    with SegmentedLog.open(tmp_path, SMALL) as log:
        fill(log, 10, rng)
        log.truncate_fully_and_start_at(1000)
        assert (log.start_offset, log.end_offset, log.flushed_offset) == (1000, 1000, 1000)
        log.append_records(7, 0, [b"z"])
    with SegmentedLog.open(tmp_path, SMALL) as log:
        assert (log.start_offset, log.end_offset, log.epoch_history()) == (1000, 1001,
                                                                           [(7, 1000)])


def test_flush_moves_flushed_offset(tmp_path: Path) -> None:
    with SegmentedLog.open(tmp_path) as log:
        log.append_records(1, 0, [b"a", b"b"])
        assert log.flushed_offset == 0
        assert log.flush() == 2 == log.flushed_offset


def test_end_offset_for_epoch_from_the_log(tmp_path: Path) -> None:
    with SegmentedLog.open(tmp_path) as log:
        log.append_records(1, 0, [b"a"] * 3)  # 0..2
        log.append_records(3, 0, [b"b"] * 2)  # 3..4
        log.append_records(6, 0, [b"c"])  # 5
        assert log.end_offset_for_epoch(1) == (1, 3)
        assert log.end_offset_for_epoch(2) == (1, 3)
        assert log.end_offset_for_epoch(3) == (3, 5)
        assert log.end_offset_for_epoch(6) == (6, 6)
        assert log.end_offset_for_epoch(7) == (-1, -1)
        assert log.end_offset_for_epoch(0) == (0, 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["append", "roll", "truncate", "delete", "reopen"]),
                          st.integers(0, 10**6)), max_size=30))
def test_random_operations_match_a_model(tmp_path_factory: pytest.TempPathFactory,
                                         ops: list[tuple[str, int]]) -> None:
    directory = tmp_path_factory.mktemp("model")
    rng = random.Random(0)
    model: list[RecordBatch] = []
    start = 0
    log = SegmentedLog.open(directory, SMALL)
    try:
        for op, arg in ops:
            if op == "append":
                epoch = max(log.last_epoch, 1) + arg % 2
                model += fill(log, 1 + arg % 3, rng, epoch=epoch)
            elif op == "roll":
                log.roll()
            elif op == "truncate" and model:
                keep = arg % (len(model) + 1)
                offset = model[keep].base_offset if keep < len(model) else log.end_offset
                log.truncate_to(offset)
                model = model[:keep]
            elif op == "delete":
                start = log.delete_below(arg % (log.end_offset + 1))
                model = [b for b in model if b.base_offset >= start]
            elif op == "reopen":
                log.flush()
                log.close()
                log = SegmentedLog.open(directory, SMALL)
            assert log.start_offset == start or not model
            assert scan_all(log) == model
            if model:
                assert log.last_epoch == model[-1].epoch
            assert log.end_offset == (model[-1].next_offset if model else log.start_offset)
    finally:
        log.close()


def test_flush_in_two_steps_counts_only_what_was_captured(tmp_path: Path) -> None:
    import threading

    with SegmentedLog.open(tmp_path) as log:
        log.append_records(1, 0, [b"a"] * 3)
        pending = log.begin_flush()
        log.append_records(1, 0, [b"b"] * 2)  # after the capture: not counted
        worker = threading.Thread(target=pending.run)
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive()
        assert log.complete_flush(pending) == 3 == log.flushed_offset
        assert log.flush() == 5


def test_truncation_during_a_flush_lowers_what_it_reports(tmp_path: Path) -> None:
    with SegmentedLog.open(tmp_path) as log:
        log.append_records(1, 0, [b"a"] * 3)
        log.append_records(1, 0, [b"b"] * 3)
        pending = log.begin_flush()
        log.truncate_to(3)
        log.append_records(2, 0, [b"c"] * 4)  # new content at 3..6, not captured
        pending.run()
        assert log.complete_flush(pending) == 3
        assert log.flush() == 7


def test_truncate_fully_during_a_flush_invalidates_it(tmp_path: Path) -> None:
    with SegmentedLog.open(tmp_path) as log:
        log.append_records(1, 0, [b"a"] * 3)
        log.flush()
        log.append_records(1, 0, [b"a"] * 3)
        pending = log.begin_flush()
        log.truncate_fully_and_start_at(100)
        pending.run()
        assert log.complete_flush(pending) == 100
        log.append_records(2, 0, [b"x"])
        assert log.flush() == 101
