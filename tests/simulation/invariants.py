"""Safety checks of the simulation, kept apart from the machinery that drives it.

`History` is the simulation's view of truth: the cluster-wide committed log (as
first learnt by any node), the leader of each epoch, the vote each node cast in
each epoch. Every method raises `InvariantViolation` the moment something is off.
"""

from __future__ import annotations

from controller.raft import RecordBatch
from controller.raft.control import voters_in
from controller.raft.voters import VoterSet


class InvariantViolation(AssertionError):
    pass


def same_batch(a: RecordBatch, b: RecordBatch) -> bool:
    return (a.base_offset, a.epoch, a.records, a.is_control) == (
        b.base_offset,
        b.epoch,
        b.records,
        b.is_control,
    )


class History:
    def __init__(self) -> None:
        # base offset -> the committed batch there. Only ever grows.
        self.committed: dict[int, RecordBatch] = {}
        self.committed_end = 0
        self.leaders: dict[int, int] = {}
        # (voter replica "id/directory id", epoch) -> the candidate it voted for.
        self.votes: dict[tuple[str, int], int] = {}
        # The voter set of the last VotersRecord committed (the static set if none).
        self.committed_voters = VoterSet((), dynamic=False)

    def fail(self, what: str) -> None:
        raise InvariantViolation(what)

    def note_leader(self, node_id: int, epoch: int) -> None:
        """At most one leader per epoch."""
        other = self.leaders.setdefault(epoch, node_id)
        if other != node_id:
            self.fail(f"two leaders in epoch {epoch}: {other} and {node_id}")

    def note_vote(self, voter: str, epoch: int, candidate: int) -> None:
        """A voter grants at most one candidate per epoch, across crashes too."""
        other = self.votes.setdefault((voter, epoch), candidate)
        if other != candidate:
            self.fail(f"node {voter} voted for {other} and {candidate} in epoch {epoch}")

    def check_committed(self, node_id: int, batch: RecordBatch) -> bool:
        """A node treats `batch` as committed. Returns True if it is new cluster-wide.

        Committed records never change: whatever any node ever applied at an
        offset, every node applies the same there.
        """
        known = self.committed.get(batch.base_offset)
        if known is not None:
            if not same_batch(known, batch):
                self.fail(
                    f"node {node_id} applied {batch!r} at {batch.base_offset}, "
                    f"but {known!r} was committed there"
                )
            return False
        if batch.base_offset != self.committed_end:
            # A new commit must extend the committed prefix exactly.
            if batch.base_offset < self.committed_end:
                self.fail(
                    f"node {node_id} applied an unknown batch below the committed end: {batch!r}"
                )
            self.fail(
                f"node {node_id} applied {batch.base_offset} past the committed end {self.committed_end}"
            )
        self.committed[batch.base_offset] = batch
        self.committed_end = batch.next_offset
        if batch.is_control:
            self.committed_voters = voters_in(batch.records) or self.committed_voters
        return True

    def is_committed(self, batch: RecordBatch) -> bool:
        known = self.committed.get(batch.base_offset)
        return known is not None and same_batch(known, batch)
