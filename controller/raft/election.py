"""Election rules (Raft §5.2, §5.4.1; thesis §9.6 pre-vote), as pure functions and
a vote tally. `RaftNode` owns the state; this module only decides."""

from __future__ import annotations

import attrs


def log_is_up_to_date(
    candidate_last_epoch: int, candidate_end_offset: int, own_last_epoch: int, own_end_offset: int
) -> bool:
    """Election restriction (§5.4.1): the candidate's log is at least as up to date
    as ours: a later last epoch, or the same last epoch and at least as long.

    Any majority that elects a leader overlaps every majority that stored a
    committed record, so this is what makes a new leader hold every committed
    record.
    """
    return (candidate_last_epoch, candidate_end_offset) >= (own_last_epoch, own_end_offset)


def grant_pre_vote(
    *,
    request_epoch: int,
    candidate_id: int,
    own_epoch: int,
    voted_for: int | None,
    leader_id: int | None,
    heard_from_leader_recently: bool,
    is_leader: bool,
    log_ok: bool,
) -> bool:
    """Would we vote for `candidate_id` in `request_epoch`? Nothing changes here.

    A voter that heard from a live leader within the minimum election timeout
    says no (thesis §9.6): a node that was partitioned away and comes back must
    not make a healthy quorum hold an election.
    """
    if is_leader or heard_from_leader_recently or not log_ok:
        return False
    if request_epoch > own_epoch:
        return True
    # Same epoch: only if a real vote in it would still be possible.
    return request_epoch == own_epoch and leader_id is None and voted_for in (None, candidate_id)


def grant_vote(
    *, candidate_id: int, voted_for: int | None, leader_id: int | None, log_ok: bool
) -> bool:
    """The real vote, in our epoch (the caller first moved to the request's epoch).

    One vote per epoch: once `voted_for` is set it is the only candidate we grant
    (again, for a duplicated request). A known leader for the epoch means the
    election is over.
    """
    return log_ok and leader_id is None and voted_for in (None, candidate_id)


@attrs.define(slots=True)
class VoteTally:
    """Votes gathered for one round: a pre-vote for `epoch` or a vote in `epoch`.

    Invariant: `granted` and `rejected` are disjoint subsets of `voters`.
    """

    epoch: int
    pre_vote: bool
    voters: frozenset[int]
    granted: set[int] = attrs.field(factory=set)
    rejected: set[int] = attrs.field(factory=set)

    def record(self, voter: int, granted: bool) -> None:
        if voter not in self.voters or voter in self.granted or voter in self.rejected:
            return  # a duplicate or a stranger: the first answer counts
        (self.granted if granted else self.rejected).add(voter)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def won(self) -> bool:
        return len(self.granted) >= self.majority

    @property
    def lost(self) -> bool:
        return len(self.rejected) > len(self.voters) - self.majority
