"""`DurableRaftLog` keeps the `RaftLog` contract exactly as `MemoryRaftLog` does.

The contract tests run over both implementations; a model-based test drives both
with the same random operations and compares everything the core can observe.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.logformat import (
    EMPTY_SNAPSHOT,
    BatchOrigin,
    EpochEndOffset,
    RecordBatch,
    SnapshotId,
)
from controller.quorum.log_adapter import DurableRaftLog, FileSnapshotStore
from controller.raft.log import MemoryRaftLog, RaftLog
from controller.storage import snapshot_file as sf
from controller.storage.errors import LogCorruptionError
from controller.storage.meta_properties import DataDir, format_data_dir, random_cluster_id


def _data_dir(root: Path) -> DataDir:
    format_data_dir(root, random_cluster_id(), 1)
    return DataDir(root)


def batch(base: int, epoch: int, n: int = 1) -> RecordBatch:
    return RecordBatch(base, epoch, 0, False, BatchOrigin(), tuple(b"r%d" % (base + i)
                                                                 for i in range(n)))


@pytest.fixture(params=["memory", "durable"])
def make_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    opened: list[DurableRaftLog] = []

    def make() -> Any:
        if request.param == "memory":
            return MemoryRaftLog()
        log = DurableRaftLog.open(_data_dir(tmp_path / f"d{len(opened)}"))
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


def test_empty_log(make_log: Callable[[], RaftLog]) -> None:
    log = make_log()
    assert (log.start_offset, log.end_offset, log.last_epoch) == (0, 0, 0)
    assert log.snapshot_id == EMPTY_SNAPSHOT
    assert log.read(0, 10, 1000) == []
    eo = log.end_offset_for_epoch(5)
    assert eo is not None and (eo.epoch, eo.end_offset) == (0, 0)


def test_append_read_and_epochs(make_log: Callable[[], RaftLog]) -> None:
    log = make_log()
    log.append(batch(0, 1, 2))
    log.append(batch(2, 1, 1))
    log.append(batch(3, 3, 2))
    assert (log.end_offset, log.last_epoch) == (5, 3)
    assert [b.base_offset for b in log.read(0, 10, 10_000)] == [0, 2, 3]
    assert [b.base_offset for b in log.read(2, 1, 10_000)] == [2]
    # At least one batch even when it alone exceeds max_bytes.
    assert [b.base_offset for b in log.read(0, 10, 1)] == [0]
    assert log.read(3, 10, 10_000)[0] == batch(3, 3, 2)
    for asked, expected in [(0, (0, 0)), (1, (1, 3)), (2, (1, 3)), (3, (3, 5)), (9, (3, 5))]:
        eo = log.end_offset_for_epoch(asked)
        assert eo is not None and (eo.epoch, eo.end_offset) == expected, asked


def test_bad_appends_and_reads_are_refused(make_log: Callable[[], RaftLog]) -> None:
    log = make_log()
    log.append(batch(0, 2, 2))
    with pytest.raises(ValueError):
        log.append(batch(5, 2))
    with pytest.raises(ValueError):
        log.append(batch(2, 1))
    with pytest.raises(ValueError):
        log.read(3, 10, 100)
    # A read inside a batch starts with the batch containing the offset.
    assert [b.base_offset for b in log.read(1, 10, 100)] == [0]


def test_truncate(make_log: Callable[[], RaftLog]) -> None:
    log = make_log()
    log.append(batch(0, 1, 2))
    log.append(batch(2, 2, 2))
    log.truncate_to(9)  # beyond the end: nothing to do
    assert log.end_offset == 4
    log.truncate_to(2)
    assert (log.end_offset, log.last_epoch) == (2, 1)
    log.append(batch(2, 3))
    assert log.read(2, 10, 100) == [batch(2, 3)]
    with pytest.raises(ValueError):
        log.truncate_to(1)


def test_delete_below_and_reset(make_log: Callable[[], RaftLog]) -> None:
    log = make_log()
    log.append(batch(0, 1, 2))
    log.append(batch(2, 2, 2))
    with pytest.raises(ValueError):
        log.delete_below(SnapshotId(2, 2))  # the record at offset 1 has epoch 1
    log.delete_below(SnapshotId(2, 1))
    assert (log.start_offset, log.end_offset, log.snapshot_id) == (2, 4, SnapshotId(2, 1))
    assert log.end_offset_for_epoch(0) is None
    assert [b.base_offset for b in log.read(2, 10, 100)] == [2]
    # Below the snapshot a log may retain a prefix (the durable log deletes whole
    # segments only: here its one segment stays); reads start there, not lower.
    retained = log.retained_start_offset
    assert retained in (0, 2)
    assert log.read(retained, 10, 100)[0].base_offset == retained
    with pytest.raises(ValueError):
        log.read(retained - 1, 10, 100)
    with pytest.raises(ValueError):
        log.truncate_to(0)  # what the snapshot covers is committed
    log.reset_to_snapshot(SnapshotId(10, 4))
    assert log.retained_start_offset == 10
    assert (log.start_offset, log.end_offset, log.last_epoch) == (10, 10, 4)
    log.append(batch(10, 5))
    assert log.last_epoch == 5


def test_the_retained_prefix_below_the_snapshot_serves_reads_and_epochs(
        tmp_path: Path) -> None:
    """A leader answers a fetcher a little behind its snapshot from the batches it
    still keeps below it: the memory model keeps a count of batches, the durable
    log whole segments."""
    memory = MemoryRaftLog(retain_batches=1)
    durable = DurableRaftLog.open(_data_dir(tmp_path / "d"))
    try:
        for log in (memory, durable):
            log.append(batch(0, 1, 2))
            if log is durable:
                durable._log.roll()  # segments [0, 2) and [2, ...)
            log.append(batch(2, 2, 2))
            log.append(batch(4, 3, 2))
            log.delete_below(SnapshotId(6, 3))
            # The snapshot is the log proper's start; the batch [4, 6) (memory) or
            # the segment [2, 6) (durable) is retained below it.
            assert (log.start_offset, log.end_offset, log.last_epoch) == (6, 6, 3)
        assert (memory.retained_start_offset, durable.retained_start_offset) == (4, 2)
        for log in (memory, durable):
            assert log.end_offset_for_epoch(1) is None  # older than anything held
            assert log.end_offset_for_epoch(3) == EpochEndOffset(3, 6)
            assert log.end_offset_for_epoch(9) == EpochEndOffset(3, 6)
            assert log.read(4, 10, 100) == [batch(4, 3, 2)]
        assert durable.end_offset_for_epoch(2) == EpochEndOffset(2, 4)
        assert memory.end_offset_for_epoch(2) is None
        # Reset to a snapshot drops the prefix too.
        for log in (memory, durable):
            log.reset_to_snapshot(SnapshotId(20, 4))
            assert log.retained_start_offset == 20 and log.end_offset_for_epoch(3) is None
    finally:
        durable.close()


def test_reopening_drops_a_log_that_disagrees_with_the_newest_snapshot(
        tmp_path: Path) -> None:
    """A crash between installing a fetched snapshot and emptying the log leaves a
    log as long as the snapshot whose batch at its end is of another epoch (an
    uncommitted tail the leader replaced): reopening finishes the reset."""
    data_dir = _data_dir(tmp_path / "d")
    log = DurableRaftLog.open(data_dir)
    log.append(batch(0, 1, 3))
    log.append(batch(3, 2, 3))
    log.flush()
    log.close()
    with sf.SnapshotWriter(data_dir.snapshot_dir, SnapshotId(4, 3)) as writer:
        writer.freeze()
    log = DurableRaftLog.open(data_dir)
    try:
        assert (log.retained_start_offset, log.start_offset, log.end_offset) == (4, 4, 4)
        assert log.last_epoch == 3
    finally:
        log.close()


def test_durable_log_survives_reopen(tmp_path: Path) -> None:
    data_dir = _data_dir(tmp_path / "d")
    log = DurableRaftLog.open(data_dir)
    log.append(batch(0, 1, 3))
    log.append(batch(3, 2, 1))
    assert log.flush() == 4 and log.flushed_offset == 4
    log.close()
    log = DurableRaftLog.open(data_dir)
    assert (log.end_offset, log.last_epoch) == (4, 2)
    assert log.read(0, 10, 1000) == [batch(0, 1, 3), batch(3, 2, 1)]
    # The checkpoint file mirrors the history.
    assert "2 3" in data_dir.leader_epoch_checkpoint.read_text()
    log.close()


def test_durable_log_starts_at_the_newest_snapshot(tmp_path: Path) -> None:
    data_dir = _data_dir(tmp_path / "d")
    with sf.SnapshotWriter(data_dir.snapshot_dir, SnapshotId(7, 3)) as writer:
        writer.append([b"image"])
        writer.freeze()
    log = DurableRaftLog.open(data_dir)
    assert (log.start_offset, log.end_offset, log.last_epoch) == (7, 7, 3)
    assert log.snapshot_id == SnapshotId(7, 3)
    log.close()


def test_leader_serves_the_bytes_it_stored(tmp_path: Path) -> None:
    log = DurableRaftLog.open(_data_dir(tmp_path / "d"))
    b = batch(0, 1, 2)
    log.append(b)
    (read,) = log.read(0, 10, 1000)
    assert log.cache.lookup(read) == log.read_stored(0, 1000)[0]
    log.close()


def test_file_snapshot_store_round_trip(tmp_path: Path) -> None:
    src_dir = _data_dir(tmp_path / "src")
    sid = SnapshotId(5, 2)
    with sf.SnapshotWriter(src_dir.snapshot_dir, SnapshotId(5, 2)) as writer:
        writer.append([b"a", b"b"])
        writer.freeze()
    src = FileSnapshotStore(src_dir.snapshot_dir)
    size = src.size_bytes(sid)
    assert size is not None and src.size_bytes(SnapshotId(6, 2)) is None
    dst = FileSnapshotStore(_data_dir(tmp_path / "dst").snapshot_dir)
    dst.begin_write(sid)
    pos = 0
    while pos < size:
        chunk = src.read_chunk(sid, pos, 17)
        dst.write_chunk(sid, pos, chunk)
        pos += len(chunk)
    with pytest.raises(ValueError):
        dst.write_chunk(sid, 0, b"x")
    assert dst.size_bytes(sid) is None  # not visible until verified
    dst.finish_write(sid)
    assert dst.latest() == sid and dst.size_bytes(sid) == size


# -- model-based: the durable log behaves as the in-memory one ------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3), st.integers(0, 2)),
        st.tuples(st.just("truncate"), st.integers(0, 20), st.just(0)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
        st.tuples(st.just("delete_below"), st.integers(0, 20), st.just(0)),
    ),
    max_size=25,
)


def _observe(log: RaftLog) -> tuple[object, ...]:
    epochs = tuple(log.end_offset_for_epoch(e) for e in range(0, 8))
    return (log.start_offset, log.retained_start_offset, log.end_offset, log.last_epoch,
            log.snapshot_id, epochs, tuple(log.read(log.retained_start_offset, 1000, 10**6)))


def _check_tail_reads(log: DurableRaftLog) -> None:
    """Reads served from the recently appended batches equal reads of the stored
    bytes (the recent batches set aside), at every boundary and with tight limits."""
    recent = log._recent
    boundaries = _boundaries(log)
    for offset in boundaries:
        complete = all(b in recent for b in boundaries if b >= offset)
        for max_batches, max_bytes in [(1, 10**6), (2, 10**6), (1000, 1), (1000, 12),
                                       (1000, 10**6)]:
            served = log.read(offset, max_batches, max_bytes)
            log._recent = {}
            try:
                stored = log.read(offset, max_batches, max_bytes)
            finally:
                log._recent = recent
            # The recent batches may stop early (never past the stored ones).
            assert served == stored[:len(served)] and served, (offset, served, stored)
            if complete:
                assert served == stored
            if offset in recent:
                assert served[0] is recent[offset][0]


def _boundaries(log: RaftLog) -> list[int]:
    return [b.base_offset for b in log.read(log.start_offset, 1000, 10**6)]


@settings(max_examples=40, deadline=None)
@given(ops)
def test_durable_log_matches_the_memory_log(script: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = _data_dir(Path(tmp) / "d")
        durable = DurableRaftLog.open(data_dir)
        # The durable log here has one segment, which compaction never deletes: the
        # model retains everything below its snapshot too.
        model = MemoryRaftLog(retain_batches=10**6)
        epoch = 1
        try:
            for kind, a, b in script:
                if kind == "append":
                    epoch += b
                    new = batch(model.end_offset, epoch, a)
                    for log in (model, durable):
                        log.append(new)
                elif kind == "truncate":
                    cuts = [o for o in _boundaries(model) if o > model.start_offset]
                    if cuts:
                        offset = cuts[a % len(cuts)]
                        model.truncate_to(offset)
                        durable.truncate_to(offset)
                        epoch = max(epoch, model.last_epoch)
                elif kind == "delete_below":
                    cuts = [*_boundaries(model)[1:], model.end_offset]
                    if model.end_offset > model.start_offset:
                        offset = cuts[a % len(cuts)]
                        (last,) = [x for x in model.read(model.start_offset, 1000, 10**6)
                                   if x.next_offset == offset]
                        sid = SnapshotId(offset, last.epoch)
                        model.delete_below(sid)
                        durable.delete_below(sid)
                else:
                    durable.flush()
                assert _observe(durable) == _observe(model)
                _check_tail_reads(durable)
            # Reopening after a flush gives the same log back.
            durable.flush()
            before = _observe(durable)
            durable.close()
            if durable.snapshot_id != EMPTY_SNAPSHOT:
                # The core writes the snapshot file before delete_below.
                sid = durable.snapshot_id
                with sf.SnapshotWriter(data_dir.snapshot_dir,
                                       sid) as writer:
                    writer.freeze()
            durable = DurableRaftLog.open(data_dir)
            assert _observe(durable) == before
        finally:
            durable.close()


def _damaged_data_dir(tmp_path: Path) -> DataDir:
    """A data dir whose log had been flushed to offset 6 and lost its segments."""
    data_dir = _data_dir(tmp_path)
    log = DurableRaftLog.open(data_dir)
    for base in range(0, 6, 2):
        log.append(batch(base, 1, 2))
    log.flush()
    log.close()
    for path in data_dir.log_dir.glob("*.log"):
        path.unlink()
    return data_dir


def test_damage_is_refused_with_one_line_or_noted_until_repaired(tmp_path: Path) -> None:
    data_dir = _damaged_data_dir(tmp_path)
    with pytest.raises(LogCorruptionError) as refused:
        DurableRaftLog.open(data_dir, on_log_damage="refuse")
    message = str(refused.value)
    assert "\n" not in message and "offset 0" in message and 'set it to "repair"' in message
    assert not data_dir.log_repair.exists()
    with pytest.raises(ValueError, match="on_log_damage"):
        DurableRaftLog.open(data_dir, on_log_damage="ignore")

    log = DurableRaftLog.open(data_dir)
    assert log.pending_repair is not None and log.pending_repair.repair_to_offset == 6
    assert log.end_offset == 0
    log.close()
    # A restart before the repair is done still knows it (the cut log checks out now).
    log = DurableRaftLog.open(data_dir)
    assert log.pending_repair is not None and log.pending_repair.repair_to_offset == 6
    log.repair_done()
    log.close()
    assert not data_dir.log_repair.exists()
    log = DurableRaftLog.open(data_dir)
    assert log.pending_repair is None
    log.close()
