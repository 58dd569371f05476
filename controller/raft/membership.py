"""Dynamic membership on the leader (KIP-853 AddVoter / RemoveVoter / UpdateVoter;
Raft thesis §4.1-4.2): the rules a voter change must pass, appending the new voter
set, and the hand-over of a leader that removed itself. What a voter set is and how
the log carries it: voters.py; how every replica follows it: state.py."""

from __future__ import annotations

from controller.logformat import EMPTY_ORIGIN
from controller.raft.control import encode_voters
from controller.raft.roles import Role
from controller.raft.state import NodeState
from controller.raft.voters import (
    MAX_VOTERS,
    Voter,
    VoterChangeError,
    VoterChangeResult,
    VoterSet,
)


class MembershipMixin(NodeState):
    def resign_if_removed(self) -> None:
        """We removed ourselves and the new voters committed it: hand over (thesis
        §4.2.2); the most caught-up voter takes over at once."""
        if self.role is Role.LEADER and not self.is_voter and not self.voter_change_pending:
            self.become_resigned(graceful=True)

    def add_voter(self, voter: Voter, now_ms: int, *, dry_run: bool = False
                  ) -> VoterChangeResult:
        """AddVoter (KIP-853): append the voter set plus `voter`. The replica must
        fetch from us now, with `voter.directory_id`, at or past our high watermark
        (it caught up as an observer), so the new majority can commit at once."""
        self.now_ms = max(self.now_ms, now_ms)
        refused = self._voter_change_refused()
        if refused is not None:
            return refused
        voters = self.voters
        if voters.get(voter.node_id) is not None:
            return self._refuse(
                VoterChangeError.DUPLICATE_VOTER,
                f"node {voter.node_id} is already a voter ({voters.describe()}); to replace "
                "it, remove the old directory id first",
            )
        if not voter.directory_id or not voter.endpoint:
            return self._refuse(
                VoterChangeError.INVALID, "a new voter needs a directory id and an endpoint"
            )
        if len(voters) >= MAX_VOTERS:
            return self._refuse(VoterChangeError.INVALID, f"at most {MAX_VOTERS} voters")
        seen = self._leading().observer_fetches.get(voter.node_id)
        timeout = self.config.check_quorum_timeout_ms
        if seen is None or self.now_ms - seen[1] > timeout:
            return self._refuse(
                VoterChangeError.NOT_CAUGHT_UP,
                f"node {voter.node_id} has not fetched from the leader in the last "
                f"{timeout} ms: start it (formatted for this cluster) and let it catch up",
            )
        if seen[2] != voter.directory_id:
            return self._refuse(
                VoterChangeError.INVALID,
                f"node {voter.node_id} fetches with directory id {seen[2] or '(none)'}, "
                f"not {voter.directory_id}",
            )
        if seen[0] < self.high_watermark:
            return self._refuse(
                VoterChangeError.NOT_CAUGHT_UP,
                f"node {voter.node_id} is at offset {seen[0]}, behind the high watermark "
                f"{self.high_watermark}: retry once it caught up",
            )
        return self._append_voters(voters.with_voter(voter), dry_run)

    def remove_voter(self, node_id: int, directory_id: str, now_ms: int, *,
                     dry_run: bool = False) -> VoterChangeResult:
        """RemoveVoter (KIP-853). Removing ourselves: we lead until the new voters
        commit it, then resign."""
        self.now_ms = max(self.now_ms, now_ms)
        refused = self._voter_change_refused()
        if refused is not None:
            return refused
        voters = self.voters
        current = voters.get(node_id)
        if current is None or current.directory_id != directory_id:
            return self._refuse(
                VoterChangeError.UNKNOWN_VOTER,
                f"no voter {node_id} with directory id {directory_id or '(none)'} in "
                f"{voters.describe()}",
            )
        if len(voters) == 1:
            return self._refuse(
                VoterChangeError.LAST_VOTER, f"node {node_id} is the only voter"
            )
        remaining = voters.without(node_id)
        live = self._leading().live_voters(self.now_ms, self.config.check_quorum_timeout_ms)
        if len(live & remaining.ids) < remaining.majority:
            return self._refuse(
                VoterChangeError.WOULD_LOSE_QUORUM,
                f"only {sorted(live & remaining.ids)} of the remaining voters "
                f"{sorted(remaining.ids)} fetched from the leader in the last "
                f"{self.config.check_quorum_timeout_ms} ms: without a live majority "
                "nothing could commit, not even a change back; bring voters back first",
            )
        return self._append_voters(remaining, dry_run)

    def update_voter(self, voter: Voter, now_ms: int, *, dry_run: bool = False
                     ) -> VoterChangeResult:
        """UpdateVoter: a voter's new endpoint (same id and directory id)."""
        self.now_ms = max(self.now_ms, now_ms)
        refused = self._voter_change_refused()
        if refused is not None:
            return refused
        current = self.voters.get(voter.node_id)
        if current is None or current.directory_id != voter.directory_id:
            return self._refuse(
                VoterChangeError.UNKNOWN_VOTER,
                f"no voter {voter.node_id} with directory id {voter.directory_id}",
            )
        if not voter.endpoint:
            return self._refuse(VoterChangeError.INVALID, "an endpoint is required")
        if current == voter:
            return VoterChangeResult(voters=self.voters, leader_id=self.node_id)
        return self._append_voters(self.voters.with_voter(voter), dry_run)

    def change_voters(self, kind: str, voter: Voter, now_ms: int, *, dry_run: bool = False
                      ) -> VoterChangeResult:
        """`add_voter` ("add"), `remove_voter` ("remove": by `voter`'s id and directory
        id) or `update_voter` ("update")."""
        if kind == "add":
            return self.add_voter(voter, now_ms, dry_run=dry_run)
        if kind == "remove":
            return self.remove_voter(voter.node_id, voter.directory_id, now_ms, dry_run=dry_run)
        assert kind == "update", kind
        return self.update_voter(voter, now_ms, dry_run=dry_run)

    def _refuse(self, error: VoterChangeError, message: str) -> VoterChangeResult:
        return VoterChangeResult(error=error, message=message, leader_id=self.leader_id)

    def _voter_change_refused(self) -> VoterChangeResult | None:
        """The rules every change shares (KIP-853): we lead; the voter set is dynamic;
        we committed in our epoch (so we know the set in force); no change pending."""
        if self.role is not Role.LEADER:
            return VoterChangeResult(
                error=VoterChangeError.NOT_LEADER,
                message="not the leader",
                leader_id=self.advertised_leader_id(),
            )
        if not self.voters.dynamic:
            return self._refuse(
                VoterChangeError.STATIC_QUORUM,
                "the voter set is static (the quorum was formatted without "
                "--initial-controllers); it cannot change online",
            )
        if self.high_watermark <= self._leading().epoch_start_offset:
            return self._refuse(
                VoterChangeError.NO_HIGH_WATERMARK,
                "the leader has not committed in its epoch yet; retry",
            )
        if self.voter_change_pending:
            return self._refuse(
                VoterChangeError.CHANGE_PENDING,
                "the previous voter change is not committed yet; retry",
            )
        return None

    def _append_voters(self, voters: VoterSet, dry_run: bool) -> VoterChangeResult:
        """Append the new set (it is in force from now on); `dry_run`: only say it
        would be accepted."""
        if dry_run:
            return VoterChangeResult(voters=voters, leader_id=self.node_id)
        offset = self.append_batch((encode_voters(voters),), True, EMPTY_ORIGIN)
        self.proposed_since_ready = True
        return VoterChangeResult(offset=offset, voters=voters, leader_id=self.node_id)
