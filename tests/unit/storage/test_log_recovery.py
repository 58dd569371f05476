"""Recovery on open: torn or damaged tails are cut cleanly, damage elsewhere is an error."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from controller.logformat.batch import BatchOrigin, RecordBatch
from controller.storage.errors import LogCorruptionError
from controller.storage.log import LogConfig, SegmentedLog

CONFIG = LogConfig(segment_bytes=8 * 1024 * 1024, index_interval_bytes=512)


def build(directory: Path, n_batches: int, seed: int, segments: int = 1) -> list[RecordBatch]:
    rng = random.Random(seed)
    out: list[RecordBatch] = []
    with SegmentedLog.open(directory, CONFIG) as log:
        for s in range(segments):
            if s:
                log.roll()
            for _ in range(n_batches):
                records = tuple(rng.randbytes(rng.randint(1, 90))
                                for _ in range(rng.randint(1, 6)))
                batch = RecordBatch(log.end_offset, 1 + s, 0, False, BatchOrigin(), records)
                log.append(batch)
                out.append(batch)
        log.flush()
    return out


def reopen_and_check_prefix(directory: Path, batches: list[RecordBatch]) -> int:
    """Reopen; the log must be an exact prefix of `batches`. Returns how many survived."""
    with SegmentedLog.open(directory, CONFIG) as log:
        got = log.read_batches(log.start_offset, 1 << 40)
        assert got == batches[: len(got)]
        assert log.end_offset == (got[-1].next_offset if got else log.start_offset)
        # Appends continue where the cut left the log.
        log.append_records(99, 0, [b"after-recovery"])
        log.flush()
    with SegmentedLog.open(directory, CONFIG) as log:
        assert log.recovery.reason == ""  # the second open finds nothing to repair
        again = log.read_batches(log.start_offset, 1 << 40)
        assert again[:-1] == got and again[-1].records == (b"after-recovery",)
    return len(got)


def last_segment(directory: Path) -> Path:
    return sorted(directory.glob("*.log"))[-1]


@pytest.mark.parametrize("seed", range(15))
def test_torn_tail_is_cut_at_the_last_whole_batch(tmp_path: Path, seed: int) -> None:
    batches = build(tmp_path, 40, seed)
    seg = last_segment(tmp_path)
    data = seg.read_bytes()
    cut = random.Random(seed).randrange(len(data))
    seg.write_bytes(data[:cut])
    survived = reopen_and_check_prefix(tmp_path, batches)
    assert survived < len(batches)


@pytest.mark.parametrize("seed", range(10))
def test_zeroed_tail_is_cut(tmp_path: Path, seed: int) -> None:
    batches = build(tmp_path, 40, seed)
    seg = last_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    start = random.Random(seed).randrange(len(data))
    data[start:] = bytes(len(data) - start)
    seg.write_bytes(bytes(data))
    with SegmentedLog.open(tmp_path, CONFIG) as log:
        assert log.recovery.truncated_bytes > 0 and log.recovery.segment == str(seg)
    reopen_and_check_prefix(tmp_path, batches)


@pytest.mark.parametrize("seed", range(40))
def test_flipped_bytes_in_the_last_segment_never_return_a_wrong_record(tmp_path: Path,
                                                                       seed: int) -> None:
    batches = build(tmp_path, 30, seed)
    seg = last_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 3)):
        data[rng.randrange(len(data))] ^= rng.randint(1, 255)
    seg.write_bytes(bytes(data))
    try:
        reopen_and_check_prefix(tmp_path, batches)
    except LogCorruptionError as exc:
        # Damage with intact batches behind it is refused, and nothing is cut.
        assert "intact batches follow" in str(exc) and exc.path == str(seg)
        assert seg.read_bytes() == bytes(data)


def test_a_damaged_batch_with_intact_batches_behind_it_is_refused(tmp_path: Path) -> None:
    """Cutting at the first bad batch is right for a torn write at the end; with
    intact batches behind it, it would drop records this node stored (and may have
    acknowledged as a voter). The log refuses to open and names file and offset."""
    batches = build(tmp_path, 30, 7)
    seg = last_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0x01
    seg.write_bytes(bytes(data))
    with pytest.raises(LogCorruptionError, match="intact batches follow") as info:
        SegmentedLog.open(tmp_path, CONFIG)
    assert info.value.path == str(seg) and info.value.offset is not None
    assert 0 < info.value.offset < batches[-1].base_offset
    assert seg.read_bytes() == bytes(data)


def test_damage_in_the_last_batch_is_a_torn_tail_and_is_cut(tmp_path: Path) -> None:
    batches = build(tmp_path, 30, 7)
    seg = last_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    data[-3] ^= 0x01
    seg.write_bytes(bytes(data))
    assert reopen_and_check_prefix(tmp_path, batches) == len(batches) - 1


def test_appended_garbage_is_cut(tmp_path: Path) -> None:
    batches = build(tmp_path, 10, 1)
    with last_segment(tmp_path).open("ab") as f:
        f.write(b"\x00" * 7 + b"garbage" * 20)
    assert reopen_and_check_prefix(tmp_path, batches) == len(batches)


@pytest.mark.parametrize("seed", range(10))
def test_damage_in_an_older_segment_is_an_error_naming_file_and_offset(tmp_path: Path,
                                                                       seed: int) -> None:
    batches = build(tmp_path, 20, seed, segments=3)
    first = sorted(tmp_path.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    rng = random.Random(seed)
    data[rng.randrange(len(data))] ^= 0x5A
    first.write_bytes(bytes(data))
    with pytest.raises(LogCorruptionError) as info:
        SegmentedLog.open(tmp_path, CONFIG)
    assert info.value.path == str(first)
    assert info.value.offset is not None and 0 <= info.value.offset < batches[20].base_offset
    assert str(first) in str(info.value) and "offset" in str(info.value)
    # Nothing was "repaired": the file is as damaged as before.
    assert first.read_bytes() == bytes(data)


def test_torn_older_segment_is_an_error(tmp_path: Path) -> None:
    build(tmp_path, 20, 3, segments=2)
    first = sorted(tmp_path.glob("*.log"))[0]
    first.write_bytes(first.read_bytes()[:-5])
    with pytest.raises(LogCorruptionError, match=first.name):
        SegmentedLog.open(tmp_path, CONFIG)


def test_missing_middle_segment_is_an_error(tmp_path: Path) -> None:
    build(tmp_path, 10, 4, segments=3)
    middle = sorted(tmp_path.glob("*.log"))[1]
    middle.unlink()
    with pytest.raises(LogCorruptionError, match="previous one ends"):
        SegmentedLog.open(tmp_path, CONFIG)


def test_damage_after_open_is_reported_on_read(tmp_path: Path) -> None:
    batches = build(tmp_path, 20, 5)
    with SegmentedLog.open(tmp_path, CONFIG) as log:
        seg = last_segment(tmp_path)
        with seg.open("r+b") as f:
            f.seek(seg.stat().st_size - 3)
            f.write(b"\xff\xff\xff")
        with pytest.raises(LogCorruptionError, match="CRC"):
            log.read(batches[-1].base_offset)
        assert log.read_batches(0, 1) == [batches[0]]


def test_last_segment_damaged_to_empty_keeps_the_previous_segments(tmp_path: Path) -> None:
    batches = build(tmp_path, 10, 6, segments=2)
    seg = last_segment(tmp_path)
    seg.write_bytes(b"\x01" * 100)
    with SegmentedLog.open(tmp_path, CONFIG) as log:
        assert log.end_offset == batches[10].base_offset
        assert log.read_batches(0, 1 << 30) == batches[:10]


def test_damaged_base_offset_after_open_is_reported_on_read(tmp_path: Path) -> None:
    # The CRC does not cover the base offset (as documented); reads check continuity.
    build(tmp_path, 20, 8)
    with SegmentedLog.open(tmp_path, CONFIG) as log:
        with last_segment(tmp_path).open("r+b") as f:
            f.seek(7)  # low byte of the first batch's base offset (0 -> 9)
            f.write(b"\x09")
        with pytest.raises(LogCorruptionError, match="discontinuity"):
            log.read_batches(0, 1 << 20)
