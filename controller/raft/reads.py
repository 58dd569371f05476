"""Linearizable reads without a log write: ReadIndex (Raft thesis §6.4), in the
pull-based shape of this Raft.

A leader may answer a read from its state machine only if no newer leader can have
committed anything it lacks. It proves that for every read like this:

1. The read's index is the leader's commit point when the read arrives (at least
   the end of the leader's LeaderChange batch: every entry of older epochs commits
   with it). The state machine answers once it has applied up to there.
2. The read joins a *barrier*, a number the leader puts into every FetchResponse it
   sends from then on. Followers echo the highest barrier they received from this
   leader in this epoch in each FetchRequest. A fetch in our epoch echoing barrier
   b was sent after the follower received a response sent after the read arrived,
   and the follower was still in our epoch when it sent it (a higher epoch makes
   us step down, a lower one is refused). Epochs only grow, so at the read's
   arrival that follower had not voted for a newer leader.
3. Once a majority of voters (us included) echoed b, no majority can have elected a
   newer leader before the read arrived (majorities intersect), so nothing newer
   than our commit point was committed then: the read is confirmed.

Reads arriving before the current barrier went out in any response share it
(batching: one round confirms them all), and the leader answers parked fetches at
once when a barrier is raised, so a read costs about one fetch round trip. No
clock is trusted. A single-voter quorum confirms at once.
"""

from __future__ import annotations

import attrs

# Reads waiting for confirmation on one leader; past this a read is refused (BUSY).
MAX_PENDING_READS = 100_000


@attrs.frozen(slots=True)
class ReadState:
    """Read `read_id` is confirmed: answer it once the state machine has applied
    every record below `index` (an end offset)."""

    read_id: int
    index: int


@attrs.define(slots=True)
class ReadBarriers:
    """A leader's reads in one epoch; dropped with its `LeaderState`.

    Invariants: barriers of `pending` are in increasing order and at most `current`;
    `acked[v] <= current` for every voter v (only our own responses carry barriers).
    """

    node_id: int
    voters: frozenset[int]
    current: int = 0
    # Whether `current` went out in a response yet (else a new read can share it).
    current_sent: bool = True
    # Per other voter: the highest barrier it echoed in a fetch of this epoch.
    acked: dict[int, int] = attrs.field(factory=dict)
    # (barrier, read id, index), oldest first.
    pending: list[tuple[int, int, int]] = attrs.field(factory=list)

    def add(self, read_id: int, index: int) -> bool:
        """A read arrived; False when too many are waiting (refuse it)."""
        if len(self.pending) >= MAX_PENDING_READS:
            return False
        if self.current_sent:
            self.current += 1
            self.current_sent = False
        self.pending.append((self.current, read_id, index))
        return True

    def barrier_for_response(self) -> int:
        """The barrier a FetchResponse carries; from now on it counts as sent."""
        self.current_sent = True
        return self.current

    def echoed(self, voter: int, barrier: int) -> None:
        """A voter's fetch in our epoch echoed `barrier`."""
        if voter == self.node_id or voter not in self.voters:
            return  # observers never count
        if barrier > self.current:
            return  # not one we sent: untrusted input proves nothing
        if barrier > self.acked.get(voter, 0):
            self.acked[voter] = barrier

    def confirmed(self) -> list[ReadState]:
        """Pop the reads a majority has now confirmed."""
        if not self.pending:
            return []
        marks = sorted((self.acked.get(v, 0) for v in self.voters if v != self.node_id),
                       reverse=True)
        # Other voters besides us; all of a majority when a voter change removed us.
        need = len(self.voters) // 2 + 1 - (self.node_id in self.voters)
        if need > len(marks):
            return []
        proven = self.current if need <= 0 else marks[need - 1]
        done = 0
        while done < len(self.pending) and self.pending[done][0] <= proven:
            done += 1
        out = [ReadState(read_id, index) for _, read_id, index in self.pending[:done]]
        del self.pending[:done]
        return out
