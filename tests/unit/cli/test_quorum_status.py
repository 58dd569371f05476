"""`quorum describe --status`'s follower lag, from the leader's view of its voters."""

from __future__ import annotations

from controller.api.seam import QuorumDescription, ReplicaState
from controller.cli.admin_cluster_cmds import follower_lag
from controller.cli.admin_output import human_bytes


def quorum(*voters: ReplicaState, leader: int = 1) -> QuorumDescription:
    return QuorumDescription(leader, 3, 100, voters)


def test_lag_is_the_worst_voter_behind_the_leaders_log_end_on_the_leaders_clock() -> None:
    leader = ReplicaState(1, 120, 5_000, 5_000)
    desc = quorum(leader, ReplicaState(2, 118, 4_990, 4_900), ReplicaState(3, 100, 4_000, 3_200))
    assert follower_lag(desc) == (20, 1_800)


def test_lag_is_unknown_without_the_leaders_view() -> None:
    # Answered by a standby (a stale read): it knows only its own log end.
    assert follower_lag(quorum(ReplicaState(1), ReplicaState(2, 50))) == (None, None)
    # A voter the leader never heard from.
    desc = quorum(ReplicaState(1, 10, 5, 5), ReplicaState(2, -1, -1, -1))
    assert follower_lag(desc) == (None, None)
    # A single voter has no followers: no lag.
    assert follower_lag(quorum(ReplicaState(1, 10, 5, 5))) == (0, 0)


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (-1, 0, 1023, 1024, 5 << 20, 3 << 30, 5 << 40)] == [
        "?", "0 B", "1023 B", "1.0 KiB", "5.0 MiB", "3.0 GiB", "5120.0 GiB"]
