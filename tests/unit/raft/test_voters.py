"""Voter sets and their history in the log (controller/raft/voters.py)."""

from __future__ import annotations

import pytest

from controller.raft.control import encode_voters, voters_in
from controller.raft.voters import (
    EMPTY_VOTER_SET,
    MAX_VOTERS,
    Voter,
    VoterHistory,
    VoterSet,
)


def voters(*ids: int) -> VoterSet:
    return VoterSet.of(Voter(i, f"dir{i}", f"h:{9000 + i}") for i in ids)


def test_a_replica_is_its_id_and_its_directory_id() -> None:
    vs = voters(1, 2, 3)
    assert vs.is_voter(1, "dir1") and not vs.is_voter(1, "another disk")
    assert not vs.is_voter(4, "dir4")
    # A static set (no directory ids) goes by id alone.
    static = VoterSet.static({1, 2, 3})
    assert static.is_voter(2, "") and static.is_voter(2, "anything") and not static.dynamic
    assert vs.majority == 2 and voters(1, 2, 3, 4).majority == 3
    assert vs.with_voter(Voter(4, "dir4", "h:4")).ids == {1, 2, 3, 4}
    assert vs.without(2).ids == {1, 3}
    assert vs.with_voter(Voter(2, "new", "h:2b")).get(2) == Voter(2, "new", "h:2b")


def test_bad_voter_sets_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        VoterSet((Voter(1, "a"), Voter(1, "b")))
    with pytest.raises(ValueError, match="directory id"):
        VoterSet.of([Voter(1)], dynamic=True)
    with pytest.raises(ValueError, match="at most"):
        voters(*range(MAX_VOTERS + 1))
    with pytest.raises(ValueError, match="out of range"):
        Voter(-1, "d")
    with pytest.raises(ValueError, match="too long"):
        Voter(1, "d" * 100)


def test_the_voters_record_round_trips() -> None:
    vs = voters(1, 2, 5)
    assert voters_in([encode_voters(vs)]) == vs
    assert voters_in([]) is None
    with pytest.raises(AssertionError):
        encode_voters(VoterSet.static({1}))


def test_the_history_follows_the_log() -> None:
    history = VoterHistory(EMPTY_VOTER_SET, 0)
    history.add(0, voters(1, 2, 3))
    history.add(10, voters(1, 2, 3, 4))
    history.add(20, voters(2, 3, 4))
    assert history.latest == voters(2, 3, 4) and history.latest_offset == 20
    assert history.in_force_at(5) == voters(1, 2, 3) and history.in_force_at(15).ids == {1, 2, 3, 4}
    # Truncation takes back what was cut; compaction folds the old sets into the base.
    history.truncate(20)
    assert history.latest == voters(1, 2, 3, 4)
    history.compact(12)
    assert history.base == voters(1, 2, 3, 4) and history.entries == ()
    assert history.latest_offset is None
    with pytest.raises(AssertionError):
        history.add(11, voters(1))  # below the log start
    history.reset(voters(7), 40)
    assert history.latest == voters(7) and history.base_offset == 40
