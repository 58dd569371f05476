"""The log recovery point: torn write vs damage to flushed (acknowledgeable) records."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.logformat.batch import BatchOrigin, RecordBatch
from controller.storage.errors import CheckpointCorruptionError, LogCorruptionError
from controller.storage.log import LogConfig, LogDamage, SegmentedLog
from controller.storage.recovery_point import RecoveryPointFile, read_recovery_point

CONFIG = LogConfig(segment_bytes=8 * 1024 * 1024, index_interval_bytes=512)


def open_log(tmp_path: Path, on_damage: object = None) -> SegmentedLog:
    return SegmentedLog.open(tmp_path / "log", CONFIG, recovery_point_path=tmp_path / "rp",
                             on_damage=on_damage)  # type: ignore[arg-type]


def append(log: SegmentedLog, n: int, epoch: int = 1) -> None:
    for i in range(n):
        log.append(RecordBatch(log.end_offset, epoch, 0, False, BatchOrigin(),
                               (b"record-%d" % i, b"x" * 40)))


def flip_byte_in_last_batch(segment: Path, last_batch_bytes: int) -> None:
    data = bytearray(segment.read_bytes())
    data[len(data) - last_batch_bytes // 2] ^= 0xFF
    segment.write_bytes(bytes(data))


# ------------------------------------------------------------------- the file


def test_file_keeps_the_newest_of_two_slots_and_survives_one_torn_slot(tmp_path: Path) -> None:
    path = tmp_path / "rp"
    assert read_recovery_point(path) is None
    rp = RecoveryPointFile(path)
    assert rp.stored is None and not path.exists()  # reading creates nothing
    rp.reset(5)
    rp.raise_to(9)  # no flush begun: the ceiling is the opening offset
    assert rp.offset == 5
    rp.begin_flush(12)
    rp.raise_to(12)
    rp.begin_flush(20)
    rp.raise_to(20)
    rp.close()
    assert read_recovery_point(path) == 20
    # Tear the newest slot (sequence 3 is in slot 1): the older copy answers.
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    assert read_recovery_point(path) == 12
    # Both torn: an error, never a silent 0.
    data[8] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptionError, match="recovery point"):
        read_recovery_point(path)


def test_a_truncation_during_a_flush_caps_what_the_flush_records(tmp_path: Path) -> None:
    rp = RecoveryPointFile(tmp_path / "rp")
    rp.reset(10)
    rp.begin_flush(50)
    rp.lower_to(30)  # the log was cut while the fsyncs ran
    rp.raise_to(50)
    assert rp.offset == 30  # the flush synced below 30; 50 would vouch for removed records
    rp.begin_flush(40)
    rp.raise_to(40)
    assert rp.offset == 40
    rp.close()


# ------------------------------------------------------------- log recovery


def test_flush_raises_the_point_and_truncation_lowers_it_first(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        assert log.recovery_point == 0
        append(log, 5)
        assert log.recovery_point == 0  # appended, not flushed
        log.flush()
        assert log.recovery_point == log.end_offset == 10
        log.truncate_to(6)
        assert log.recovery_point == 6
        log.truncate_fully_and_start_at(100)
        assert log.recovery_point == 100
    assert read_recovery_point(tmp_path / "rp") == 100


def test_a_flipped_byte_in_a_flushed_last_batch_is_damage_not_a_torn_write(
        tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        append(log, 5)
        log.flush()
        segment = log.segment_paths()[-1]
        last_size = log.size_bytes // 5
    flip_byte_in_last_batch(segment, last_size)
    # Without a handler: refused, naming the file and the offset.
    with pytest.raises(LogCorruptionError, match=r"offset 8 .*below the recovery point") as exc:
        open_log(tmp_path)
    assert str(segment) in str(exc.value)
    assert segment.stat().st_size > 0  # nothing was cut
    # With one: told before anything is cut, then cut at the damage.
    seen: list[tuple[LogDamage, int]] = []
    with open_log(tmp_path, lambda d: seen.append((d, segment.stat().st_size))) as log:
        assert log.end_offset == 8 and log.recovery.damage is not None
    damage, size_when_told = seen[0]
    assert (damage.offset, damage.recovery_point, damage.segment) == (8, 10, str(segment))
    assert size_when_told == 5 * last_size
    assert "may have acknowledged" in damage.describe()


def test_a_torn_write_beyond_the_recovery_point_is_cut_silently(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        append(log, 5)
        log.flush()
        append(log, 1)  # never flushed: never acknowledged
        segment = log.segment_paths()[-1]
        last_size = log.size_bytes // 6
    flip_byte_in_last_batch(segment, last_size)  # e.g. a power loss: length but no data
    with open_log(tmp_path) as log:  # no handler needed: not damage
        assert log.end_offset == 10 and log.recovery.damage is None
        assert log.recovery.reason and log.recovery_point == 10


def two_flushed_segments(tmp_path: Path) -> tuple[list[Path], int]:
    """3 batches of epoch 1, a roll, 3 of epoch 2 (12 offsets), flushed: the segment
    paths and one batch's size."""
    with open_log(tmp_path) as log:
        append(log, 3)
        log.roll()
        append(log, 3, epoch=2)
        log.flush()
        return log.segment_paths(), log.size_bytes // 6


def test_deleted_segments_are_damage(tmp_path: Path) -> None:
    segments, _ = two_flushed_segments(tmp_path)
    segments[-1].unlink()
    with pytest.raises(LogCorruptionError, match="recovery point"):
        open_log(tmp_path)
    for path in (tmp_path / "log").glob("*.log"):
        path.unlink()
    seen: list[LogDamage] = []
    with open_log(tmp_path, seen.append) as log:
        assert log.end_offset == 0
    assert (seen[0].offset, seen[0].recovery_point, seen[0].position) == (0, 12, -1)


def test_damage_in_an_older_segment_drops_the_later_ones_when_repairing(tmp_path: Path) -> None:
    (first, second), batch_bytes = two_flushed_segments(tmp_path)
    flip_byte_in_last_batch(first, batch_bytes)
    seen: list[LogDamage] = []
    with open_log(tmp_path, seen.append) as log:
        assert log.end_offset == 4 and log.segment_count == 1
        assert log.last_epoch == 1
    assert not second.exists() and "closed segment" in seen[0].reason
    assert seen[0].recovery_point == 12


def test_a_log_written_without_a_recovery_point_is_trusted_once(tmp_path: Path) -> None:
    with SegmentedLog.open(tmp_path / "log", CONFIG) as log:
        append(log, 4)
        log.flush()
    with open_log(tmp_path) as log:
        assert log.recovery.damage is None and log.recovery_point == 8
