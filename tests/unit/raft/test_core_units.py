"""Unit tests of the pieces of the Raft core that are easy to get subtly wrong."""

from __future__ import annotations

import pytest

from controller.logformat import EMPTY_ORIGIN, EpochEndOffset, RecordBatch
from controller.raft import ALLOWED_TRANSITIONS, MemoryRaftLog, RaftConfig, Role, SnapshotId
from controller.raft.election import VoteTally, grant_pre_vote, grant_vote, log_is_up_to_date
from controller.raft.replication import (
    FetchCheck,
    LeaderState,
    ReplicaProgress,
    check_fetch_position,
    follower_truncation_offset,
)
from controller.raft.roles import IllegalTransitionError, check_transition


def batch(base: int, epoch: int, n: int = 1) -> RecordBatch:
    return RecordBatch(
        base_offset=base,
        epoch=epoch,
        append_time_ms=0,
        is_control=False,
        origin=EMPTY_ORIGIN,
        records=tuple(b"r%d" % i for i in range(n)),
    )


def log_of(*spec: tuple[int, int]) -> MemoryRaftLog:
    """(epoch, records) per batch, appended from offset 0."""
    log = MemoryRaftLog()
    for epoch, n in spec:
        log.append(batch(log.end_offset, epoch, n))
    return log


def test_transition_table_is_enforced() -> None:
    for current, targets in ALLOWED_TRANSITIONS.items():
        for target in Role:
            if target in targets:
                check_transition(current, target, is_voter=True)
            else:
                with pytest.raises(IllegalTransitionError):
                    check_transition(current, target, is_voter=True)
    with pytest.raises(IllegalTransitionError):
        check_transition(Role.FOLLOWER, Role.PROSPECTIVE, is_voter=False)
    # A follower never jumps straight to candidate: pre-vote comes first.
    assert Role.CANDIDATE not in ALLOWED_TRANSITIONS[Role.FOLLOWER]


def test_up_to_date_rule() -> None:
    assert log_is_up_to_date(3, 5, 2, 100)  # later last epoch wins
    assert not log_is_up_to_date(2, 100, 3, 5)
    assert log_is_up_to_date(3, 5, 3, 5)
    assert not log_is_up_to_date(3, 4, 3, 5)


def test_vote_rules() -> None:
    assert grant_vote(candidate_id=2, voted_for=None, leader_id=None, log_ok=True)
    assert grant_vote(candidate_id=2, voted_for=2, leader_id=None, log_ok=True)
    assert not grant_vote(candidate_id=2, voted_for=3, leader_id=None, log_ok=True)
    assert not grant_vote(candidate_id=2, voted_for=None, leader_id=1, log_ok=True)
    common = {
        "candidate_id": 2,
        "voted_for": None,
        "leader_id": None,
        "is_leader": False,
        "log_ok": True,
    }
    assert grant_pre_vote(request_epoch=5, own_epoch=4, heard_from_leader_recently=False, **common)
    assert not grant_pre_vote(
        request_epoch=5, own_epoch=4, heard_from_leader_recently=True, **common
    )
    assert not grant_pre_vote(
        request_epoch=3, own_epoch=4, heard_from_leader_recently=False, **common
    )


def test_tally_counts_each_voter_once() -> None:
    tally = VoteTally(3, pre_vote=False, voters=frozenset({1, 2, 3, 4, 5}))
    tally.record(1, True)
    tally.record(2, True)
    tally.record(2, True)
    tally.record(9, True)  # not a voter
    assert not tally.won
    tally.record(3, True)
    assert tally.won
    tally.record(4, False)
    assert not tally.lost


def test_end_offset_for_epoch_and_fetch_check() -> None:
    log = log_of((1, 2), (1, 1), (3, 2), (4, 1))  # e1:[0,3) e3:[3,5) e4:[5,6)
    assert log.end_offset_for_epoch(1) == EpochEndOffset(1, 3)
    assert log.end_offset_for_epoch(2) == EpochEndOffset(1, 3)
    assert log.end_offset_for_epoch(3) == EpochEndOffset(3, 5)
    assert log.end_offset_for_epoch(9) == EpochEndOffset(4, 6)
    assert check_fetch_position(log, 3, 1) == (FetchCheck.VALID, None)
    assert check_fetch_position(log, 2, 1) == (FetchCheck.VALID, None)
    assert check_fetch_position(log, 4, 2) == (FetchCheck.DIVERGING, EpochEndOffset(1, 3))
    assert check_fetch_position(log, 7, 4) == (FetchCheck.DIVERGING, EpochEndOffset(4, 6))
    log.delete_below(SnapshotId(3, 1))
    assert log.start_offset == 3
    assert check_fetch_position(log, 2, 1) == (FetchCheck.SNAPSHOT, None)
    assert check_fetch_position(log, 3, 1) == (FetchCheck.VALID, None)
    assert check_fetch_position(log, 4, 0) == (FetchCheck.SNAPSHOT, None)


def test_follower_truncation_lands_on_a_batch_boundary() -> None:
    # We hold epoch 1 in one 5-record batch; the leader's epoch 2 ended at 3, inside it.
    follower = log_of((1, 1), (1, 5))  # [0,1) [1,6)
    assert follower_truncation_offset(follower, EpochEndOffset(2, 3)) == 1
    assert follower_truncation_offset(follower, EpochEndOffset(1, 1)) == 1
    assert follower_truncation_offset(follower, EpochEndOffset(1, 9)) == 6


def test_high_watermark_needs_a_record_of_the_leaders_epoch() -> None:
    state = LeaderState(
        node_id=1, epoch=3, voters=frozenset({1, 2, 3}), epoch_start_offset=10, started_ms=0
    )
    state.record_fetch(2, 10, now_ms=1)
    assert state.high_watermark_candidate(own_flushed_offset=11) is None  # Figure 8
    state.record_fetch(2, 11, now_ms=2)
    assert state.high_watermark_candidate(own_flushed_offset=11) == 11
    state.record_fetch(4, 50, now_ms=3)  # an observer never counts
    assert state.high_watermark_candidate(own_flushed_offset=11) == 11
    assert state.high_watermark_candidate(own_flushed_offset=10) is None  # leader not flushed


def test_check_quorum_contact() -> None:
    state = LeaderState(
        node_id=1, epoch=1, voters=frozenset({1, 2, 3}), epoch_start_offset=0, started_ms=0
    )
    assert state.has_quorum_contact(100, 150)
    assert not state.has_quorum_contact(200, 150)
    state.record_fetch(3, 0, now_ms=190)
    assert state.has_quorum_contact(200, 150)


def test_memory_log_crash_keeps_a_prefix_of_unsynced_writes() -> None:
    log = log_of((1, 1), (1, 1))
    log.sync()
    log.append(batch(2, 2))
    log.truncate_to(1)
    log.append(batch(1, 3))
    log.crash(keep_ops=1)  # the append at 2 made it, the truncation did not
    assert [(b.base_offset, b.epoch) for b in log.batches] == [(0, 1), (1, 1), (2, 2)]


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        RaftConfig(node_id=1, cluster_id="c", voters=frozenset(), election_timeout_ms=100)
    with pytest.raises(ValueError):
        RaftConfig(
            node_id=1,
            cluster_id="c",
            voters=frozenset({1}),
            election_timeout_ms=100,
            fetch_max_wait_ms=100,
        )
    config = RaftConfig(node_id=4, cluster_id="c", voters=frozenset({1, 2, 3}))
    assert 4 not in config.voters


def test_replica_progress_reports_the_leaders_view_without_counting_observers() -> None:
    state = LeaderState(
        node_id=1, epoch=2, voters=frozenset({1, 2, 3}), epoch_start_offset=5, started_ms=0
    )
    state.record_fetch(2, 7, now_ms=10, caught_up=True)
    state.record_fetch(9, 4, now_ms=11, directory_id="d9")  # an observer
    state.record_fetch(8, None, now_ms=12)  # an observer whose position did not match
    # A replica of voter 3's id fetching with another directory id: an observer.
    state.record_fetch(3, 6, now_ms=13, is_voter=False, directory_id="new disk")
    assert state.replica_progress(own_end_offset=8, now_ms=20) == (
        ReplicaProgress(1, True, 8, 20, "", 20),
        ReplicaProgress(2, True, 7, 10, "", 10),
        ReplicaProgress(3, True, -1, -1),
        ReplicaProgress(3, False, 6, 13, "new disk"),
        ReplicaProgress(8, False, -1, 12),
        ReplicaProgress(9, False, 4, 11, "d9"),
    )
    # Reporting observers changes nothing the leader decides.
    assert state.high_watermark_candidate(own_flushed_offset=8) == 7
    assert 9 not in state.fetch_offsets and 9 not in state.last_contact_ms


def test_proposals_between_two_readies_reach_a_parked_follower_in_one_fetch_response() -> None:
    from controller.raft import messages as msgs
    from tests.raft.harness import Script

    script = Script()
    script.cmd_cluster("voters=1,2,3")
    script.cmd_run("300")
    leader = script.raft(1)
    assert leader.role is Role.LEADER
    end = leader.log.end_offset
    script.sent = []
    # The followers' fetches are parked at the leader (caught up, nothing new).
    for batch in (b"a", b"b", b"c"):
        assert leader.propose([batch], script.now_ms).ok
    ready = leader.ready()
    answers = [m for m in ready.messages if isinstance(m, msgs.FetchResponse)]
    assert sorted(m.dst for m in answers) == [2, 3]
    for answer in answers:
        assert [b.base_offset for b in answer.batches] == [end, end + 1, end + 2]
        assert [b.records for b in answer.batches] == [(b"a",), (b"b",), (b"c",)]
    # Nothing more to tell them until something changes.
    assert not any(isinstance(m, msgs.FetchResponse) for m in leader.ready().messages)


def test_removing_a_voter_keeps_the_replica_of_its_id_that_fetches_with_a_new_disk() -> None:
    """Replacing a lost disk: the new replica of node 3 fetches (an observer: another
    directory id) while the old identity is still a voter; removing the old identity
    must not erase what the leader knows of the new replica, which is added next."""
    state = LeaderState(
        node_id=1, epoch=2, voters=frozenset({1, 2, 3}), epoch_start_offset=5, started_ms=0
    )
    state.record_fetch(3, 9, now_ms=10, is_voter=False, directory_id="new disk")
    state.set_voters(frozenset({1, 2}), now_ms=11)
    assert state.observer_fetches[3] == (9, 10, "new disk")
    # Added back, it starts from the progress it made as an observer.
    state.set_voters(frozenset({1, 2, 3}), now_ms=12)
    assert state.fetch_offsets[3] == 9 and 3 not in state.observer_fetches


def test_a_pre_vote_granted_by_a_voter_in_an_older_epoch_counts() -> None:
    """Pre-votes move no epoch, so a voter that missed our failed election's vote
    requests still answers from an older epoch; dropping its grant (as a stale
    response) left a quorum unable to elect anyone (simulation seed 79076)."""
    from controller.logformat import QuorumState
    from controller.raft import MemorySnapshotStore, RaftNode
    from controller.raft.messages import Errors, VoteResponse

    class Fixed:
        def random(self) -> float:
            return 0.0

    config = RaftConfig(node_id=2, cluster_id="c", voters=frozenset({1, 2, 3}))
    node = RaftNode(config, MemoryRaftLog(), MemorySnapshotStore(), Fixed(),
                    quorum_state=QuorumState(2, 2, None), now_ms=0)
    node.tick(10_000)
    assert node.role is Role.PROSPECTIVE and node.epoch == 2
    node.receive(VoteResponse(cluster_id="c", src=3, dst=2, epoch=1, error=Errors.NONE,
                              pre_vote=True, vote_epoch=3, granted=True, leader_id=None), 10_001)
    assert node.role is Role.CANDIDATE and node.epoch == 3


def test_the_leader_reports_what_each_replica_said_it_supports() -> None:
    state = LeaderState(
        node_id=1, epoch=3, voters=frozenset({1, 2, 3}), epoch_start_offset=10, started_ms=0
    )
    state.record_fetch(2, 10, now_ms=1, supported_versions=(1, 6))
    state.record_fetch(7, None, now_ms=1, is_voter=False, supported_versions=(1, 5))
    progress = {p.replica_id: p.supported_versions
                for p in state.replica_progress(11, now_ms=2, own_versions=(1, 6))}
    # Node 3 never fetched: not said. An observer (a broker) is reported too.
    assert progress == {1: (1, 6), 2: (1, 6), 3: (0, 0), 7: (1, 5)}


def test_the_leader_reports_where_each_replicas_local_log_starts() -> None:
    """What the tier copier asks when it leads without a range to copy: which voter
    still holds it (each fetch says where the fetcher's local log starts)."""
    state = LeaderState(
        node_id=1, epoch=3, voters=frozenset({1, 2, 3}), epoch_start_offset=10, started_ms=0
    )
    state.record_fetch(2, 10, now_ms=1, retained_start_offset=0)
    state.record_fetch(3, 10, now_ms=1, retained_start_offset=400)
    state.record_fetch(7, None, now_ms=1, is_voter=False)
    starts = {p.replica_id: p.retained_start_offset
              for p in state.replica_progress(11, now_ms=2, own_retained_start=250)}
    assert starts == {1: 250, 2: 0, 3: 400, 7: -1}
    state.record_fetch(2, 11, now_ms=3, retained_start_offset=300)  # it trimmed its log
    assert {p.replica_id: p.retained_start_offset
            for p in state.replica_progress(11, now_ms=4)}[2] == 300
