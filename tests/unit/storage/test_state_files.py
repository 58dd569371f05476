"""Quorum state, leader-epoch checkpoint and the atomic-write helper."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.logformat import QuorumState
from controller.storage import fsutil
from controller.storage.errors import CheckpointCorruptionError, QuorumStateCorruptionError
from controller.storage.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochHistory,
    LeaderEpochCheckpoint,
    end_offset_for_epoch,
)
from controller.storage.quorum_state import QuorumStateFile

# ------------------------------------------------------------------ fsutil


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    fsutil.atomic_write_bytes(target, b"one")
    fsutil.atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["f"]


def test_abandoned_writer_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    fsutil.atomic_write_bytes(target, b"old")
    with fsutil.AtomicFileWriter(target) as writer:
        writer.write(b"half of the new")
        # leaving without commit() aborts
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["f"]


def test_a_crashed_writer_temp_file_is_ignored_and_removable(tmp_path: Path) -> None:
    target = tmp_path / "f"
    fsutil.atomic_write_bytes(target, b"old")
    (tmp_path / "f.tmp").write_bytes(b"torn")  # what a crash mid-write leaves
    assert target.read_bytes() == b"old"
    assert fsutil.remove_temp_files(tmp_path) == [tmp_path / "f.tmp"]
    fsutil.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"


# ------------------------------------------------------------- quorum state


def test_quorum_state_round_trip(tmp_path: Path) -> None:
    qs = QuorumStateFile(tmp_path / "quorum-state")
    assert qs.read() is None
    assert qs.read_or_default() == QuorumState(0, None, None)
    for state in (QuorumState(1, 2, None), QuorumState(5, None, 3), QuorumState(6, 1, 1)):
        qs.write(state)
        assert QuorumStateFile(tmp_path / "quorum-state").read() == state
    assert sorted(os.listdir(tmp_path)) == ["quorum-state"]


@pytest.mark.parametrize("damage", [
    b"",
    b"{",
    b"not json at all",
    b'{"data": {"epoch": 5}}',
])
def test_damaged_quorum_state_is_an_error(tmp_path: Path, damage: bytes) -> None:
    path = tmp_path / "quorum-state"
    path.write_bytes(damage)
    with pytest.raises(QuorumStateCorruptionError, match="quorum-state"):
        QuorumStateFile(path).read()


def test_edited_quorum_state_fails_the_crc(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    QuorumStateFile(path).write(QuorumState(7, 2, 2))
    doc = json.loads(path.read_text())
    doc["data"]["voted_for"] = 3  # a vote changed behind our back
    path.write_text(json.dumps(doc))
    with pytest.raises(QuorumStateCorruptionError, match="CRC"):
        QuorumStateFile(path).read()


def test_every_flipped_byte_of_quorum_state_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    QuorumStateFile(path).write(QuorumState(12, 4, 4))
    good = path.read_bytes()
    for i in range(len(good)):
        data = bytearray(good)
        data[i] ^= 0x01
        path.write_bytes(bytes(data))
        try:
            state = QuorumStateFile(path).read()
        except QuorumStateCorruptionError:
            continue
        # Only whitespace/formatting changes may pass, never a different state.
        assert state == QuorumState(12, 4, 4)


# ---------------------------------------------------------- epoch history


ENTRIES = [(1, 0), (3, 10), (6, 25)]


@pytest.mark.parametrize(("epoch", "expected"), [
    (6, (6, 40)),  # latest epoch: the log end
    (7, (UNDEFINED_EPOCH, UNDEFINED_OFFSET)),  # newer than anything known
    (5, (3, 25)),  # unknown epoch between: floor epoch, next epoch's start
    (3, (3, 25)),
    (2, (1, 10)),
    (1, (1, 10)),
    (0, (0, 0)),  # older than the first: start of the first known epoch
    (UNDEFINED_EPOCH, (UNDEFINED_EPOCH, UNDEFINED_OFFSET)),
])
def test_end_offset_for_epoch(epoch: int, expected: tuple[int, int]) -> None:
    assert end_offset_for_epoch(ENTRIES, epoch, 40) == expected


def test_end_offset_for_epoch_of_empty_history() -> None:
    assert end_offset_for_epoch([], 3, 10) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_epoch_history_truncation() -> None:
    h = EpochHistory(ENTRIES)
    assert not h.assign(3, 50)  # older/current epochs keep their start
    h.truncate_from_end(25)
    assert h.entries() == [(1, 0), (3, 10)]
    h.truncate_from_start(12)
    assert h.entries() == [(3, 12)]
    h.assign(4, 12)  # epoch 3 wrote nothing at/after 12 ... replaced
    assert h.entries() == [(4, 12)]
    with pytest.raises(ValueError):
        h.assign(5, 11)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 1000)), max_size=20))
def test_checkpoint_round_trip(pairs: list[tuple[int, int]]) -> None:
    import tempfile

    entries = sorted({e: s for e, s in pairs}.items())
    entries = [(e, s) for i, (e, s) in enumerate(entries)
               if all(s > s2 for _, s2 in entries[:i])]
    with tempfile.TemporaryDirectory() as d:
        cp = LeaderEpochCheckpoint(Path(d) / "leader-epoch-checkpoint")
        cp.replace(entries)
        cp.flush()
        assert LeaderEpochCheckpoint(Path(d) / "leader-epoch-checkpoint").entries() == entries


def test_checkpoint_mutations_and_flush(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cp = LeaderEpochCheckpoint(path)
    assert cp.entries() == [] and cp.latest_epoch == UNDEFINED_EPOCH
    cp.flush()  # creates an empty checkpoint
    for epoch, start in ENTRIES:
        cp.assign(epoch, start)
    assert LeaderEpochCheckpoint(path).entries() == []  # not flushed yet
    cp.flush()
    assert LeaderEpochCheckpoint(path).entries() == ENTRIES
    cp.truncate_from_end(10)
    cp.flush()
    reread = LeaderEpochCheckpoint(path)
    assert reread.entries() == [(1, 0)]
    assert reread.end_offset_for_epoch(1, 10) == (1, 10)


def test_every_flipped_byte_of_the_checkpoint_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cp = LeaderEpochCheckpoint(path)
    cp.replace(ENTRIES)
    cp.flush()
    good = path.read_bytes()
    for i in range(len(good)):
        data = bytearray(good)
        data[i] ^= 0x04
        path.write_bytes(bytes(data))
        try:
            entries = LeaderEpochCheckpoint(path).entries()
        except CheckpointCorruptionError as exc:
            assert "leader-epoch-checkpoint" in str(exc)
            continue
        assert entries == ENTRIES
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointCorruptionError):
        LeaderEpochCheckpoint(path)
