"""`RaftNode`: the sans-I/O Raft core. Events in, `Ready` out.

Events (each takes the driver's current time; the core never reads a clock):

* `tick(now_ms)`: time passed; fire whatever timers are due. Call it at
  `next_deadline_ms()` (the daemon's driver does) or on a short fixed period;
  ticking sooner than needed is harmless.
* `receive(message, now_ms)`: a message from a peer.
* `propose(records, now_ms, origin)`: append one batch if we lead -> `ProposeResult`.
* `flushed(offset, now_ms)`: the log is durable up to a `Ready.flush_to_offset`.
* `snapshot_loaded(snapshot_id, now_ms)`: a `Ready.snapshot_to_load` is in place.
* `compact(snapshot_id, now_ms)`: the state machine wrote this snapshot (at a
  committed offset); the log may drop what it covers.
* `resign(now_ms)`: clean shutdown of the leader: EndQuorumEpoch to the voters.
* `transfer_leadership(target, now_ms)`: hand leadership to one voter (leader.py).

Then `ready()` returns the work to do; see `Ready` for the order the driver must
do it in (the quorum state is durable before any message leaves).

A node is created from what it has durably: its log (flushed), its snapshot
store, and the last persisted `QuorumState` (None on first start).
"""

from __future__ import annotations

from controller.logformat import EPOCH_LIMIT, QuorumState, SnapshotId
from controller.raft.config import RaftConfig
from controller.raft.election import grant_pre_vote, grant_vote, log_is_up_to_date
from controller.raft.follower import FollowerMixin
from controller.raft.leader import LeaderMixin
from controller.raft.log import RaftLog
from controller.raft.membership import MembershipMixin
from controller.raft.messages import (
    REQUEST_TYPES,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    Request,
    VoteRequest,
    VoteResponse,
)
from controller.raft.ready import Ready
from controller.raft.roles import Role
from controller.raft.snapshot import SnapshotStore
from controller.raft.state import RandomSource
from controller.raft.voters import VoterSet


class RaftNode(LeaderMixin, MembershipMixin, FollowerMixin):
    def __init__(
        self,
        config: RaftConfig,
        log: RaftLog,
        snapshot_store: SnapshotStore,
        rng: RandomSource,
        *,
        quorum_state: QuorumState | None = None,
        now_ms: int = 0,
        voters: VoterSet | None = None,
        repair_to_offset: int | None = None,
    ) -> None:
        """`voters`: the voter set in force at the log's start (the one its snapshot
        carries; `EMPTY_VOTER_SET` for a fresh replica of a dynamic quorum); None for
        a static quorum (`config.voters`). `repair_to_offset`: the log lost records
        it had flushed below this offset (disk damage found on open): the node
        neither votes nor campaigns until it has them again (repair.py)."""
        super().__init__(config, log, snapshot_store, rng, quorum_state, now_ms, voters,
                         repair_to_offset)
        self.maybe_fetch()

    # ---------------------------------------------------------------- events

    def ready(self) -> Ready:
        """Everything to do since the last call (see `Ready`)."""
        if self.proposed_since_ready:
            self.proposed_since_ready = False
            self.answer_parked_fetches()
        self.resign_if_removed()
        return self.build_ready()

    def tick(self, now_ms: int) -> None:
        self.now_ms = max(self.now_ms, now_ms)
        if self.role is Role.LEADER:
            self.leader_tick()
            return
        if self.can_campaign and self.now_ms >= self.election_deadline_ms:
            self.become_prospective()
            return
        if self.role is Role.RESIGNED and self.now_ms >= self.election_deadline_ms:
            # A leader that removed itself from the voters: observe from now on.
            self.become_follower(self.epoch, None)
        if self.role is Role.FOLLOWER:
            self.follower_tick()

    def flushed(self, offset: int, now_ms: int) -> None:
        self.now_ms = max(self.now_ms, now_ms)
        self.note_flushed(offset)
        if self.role is Role.LEADER:
            self.update_high_watermark()
        else:
            self.maybe_fetch()

    def resign(self, now_ms: int) -> None:
        """Planned shutdown: stop leading and hand over at once (EndQuorumEpoch)."""
        self.now_ms = max(self.now_ms, now_ms)
        if self.role is Role.LEADER:
            self.become_resigned(graceful=True)

    def compact(self, snapshot_id: SnapshotId, now_ms: int) -> None:
        """The state machine durably wrote `snapshot_id` (to the snapshot store);
        drop the log below it. Only committed, flushed records may be compacted."""
        self.now_ms = max(self.now_ms, now_ms)
        assert snapshot_id.end_offset <= self.high_watermark, (snapshot_id, self.high_watermark)
        assert snapshot_id.end_offset <= self.flushed_offset, (snapshot_id, self.flushed_offset)
        if snapshot_id.end_offset > self.log.start_offset:
            self.log.delete_below(snapshot_id)
            self.voter_history.compact(self.log.start_offset)

    def next_deadline_ms(self) -> int:
        """When `tick` is next needed: the earliest timer due. Ticking more often
        is harmless; the driver may simply tick on a fixed short period instead."""
        cfg = self.config
        deadlines = [self.now_ms + cfg.request_timeout_ms]
        state = self.leader_state
        if state is not None:
            deadlines.extend(p.deadline_ms for p in state.parked.values())
            if state.awaiting_begin:
                deadlines.append(state.last_begin_sent_ms + cfg.begin_quorum_retry_ms)
            if state.transfer_target is not None:
                deadlines.append(state.transfer_deadline_ms)
            # Check quorum looks at least this often.
            deadlines.append(self.now_ms + cfg.check_quorum_timeout_ms // 4)
        elif self.can_campaign or self.role is Role.RESIGNED:
            deadlines.append(self.election_deadline_ms)
        if self.fetch_inflight is not None:
            deadlines.append(self.fetch_inflight[1] + cfg.request_timeout_ms)
        elif self.role is Role.FOLLOWER:
            deadlines.append(self.next_fetch_ms)
        if self.snapshot_fetch is not None:
            deadlines.append(self.snapshot_fetch.sent_at_ms + cfg.request_timeout_ms)
        return max(self.now_ms, min(deadlines))

    def receive(self, message: Message, now_ms: int) -> None:
        self.now_ms = max(self.now_ms, now_ms)
        if message.dst != self.node_id:
            return
        if message.cluster_id != self.config.cluster_id:
            if isinstance(message, REQUEST_TYPES):
                self._reject(message, Errors.INCONSISTENT_CLUSTER_ID)  # type: ignore[arg-type]
            return
        if message.dst_directory_id and message.dst_directory_id != self.directory_id:
            # Meant for another incarnation of our node id (before a disk was wiped
            # and reformatted, or after): we are not the replica it asks.
            if isinstance(message, REQUEST_TYPES):
                self._reject(message, Errors.INVALID_VOTER_KEY)  # type: ignore[arg-type]
            return
        if message.epoch > EPOCH_LIMIT:
            # No legitimate peer gets there; adopting it would leave no epochs to elect in.
            if isinstance(message, REQUEST_TYPES):
                self._reject(message, Errors.INVALID_REQUEST)  # type: ignore[arg-type]
            return
        if isinstance(message, VoteRequest):
            self._on_vote_request(message)
        elif isinstance(message, REQUEST_TYPES):
            self._on_request(message)  # type: ignore[arg-type]
        else:
            self._on_response(message)  # type: ignore[arg-type]

    # -------------------------------------------------------------- requests

    def _on_request(self, req: Request) -> None:
        """Epoch rules shared by every request but Vote, then dispatch.

        Only voters lead, so only a voter's request may move this replica's epoch or
        name its leader: Begin/EndQuorumEpoch from anyone else is refused, and an
        observer's fetch in a newer epoch is answered NOT_LEADER without adopting
        the epoch (a legitimate observer learned it from the real leader, whom it
        finds by itself)."""
        if req.epoch < self.epoch:
            self._reject(req, Errors.FENCED_LEADER_EPOCH)
            return
        from_voter = self.is_voter_key(req.src, req.src_directory_id)
        # In a dynamic quorum the leader may be outside our latest set (it removed
        # itself and leads until that commits; thesis §4.1: servers heed a leader
        # without consulting their configuration): it addresses us by directory id.
        from_leader = from_voter or bool(req.dst_directory_id)
        if isinstance(req, BeginQuorumEpochRequest | EndQuorumEpochRequest) and not from_leader:
            self._reject(req, Errors.NOT_VOTER)
            return
        if req.epoch > self.epoch and not from_voter:
            if isinstance(req, FetchRequest):
                self._replica_ahead(req.epoch, req.src_directory_id)
            self._reject(req, Errors.NOT_LEADER)
            return
        if isinstance(req, BeginQuorumEpochRequest):
            self._on_begin_quorum_epoch(req)
            return
        if isinstance(req, EndQuorumEpochRequest):
            self._on_end_quorum_epoch(req)
            return
        if req.epoch > self.epoch:
            # The sender knows a newer epoch than we do: we cannot be its leader.
            self.become_follower(req.epoch, None)
        if self.role is not Role.LEADER:
            self._reject(req, Errors.NOT_LEADER)
        elif isinstance(req, FetchRequest):
            self.on_fetch_request(req)
        elif isinstance(req, FetchSnapshotRequest):
            self.on_fetch_snapshot_request(req)

    def _replica_ahead(self, sender_epoch: int, sender_directory_id: str) -> bool:
        """A replica of our dynamic quorum is in a newer epoch than the one we lead:
        step down into it (Raft §5.1: a higher term deposes the leader), so the next
        election passes it. Returns whether we did.

        Why only the leader, and why a non-voter too: a voter that ran an election
        while cut off, and was removed meanwhile (or a replica that learnt that epoch
        from it), can never follow a leader of an older epoch (epochs never go back)
        and, not being a voter, can never move the quorum's epoch itself: it would
        stay stuck forever (simulation seeds 21824 and 71046). Once the quorum has
        passed its epoch it follows the new leader like any observer. A pre-vote
        carries its sender's epoch + 1, so a removed replica in our own epoch
        (thesis §4.2.3) still disturbs nobody. A static quorum's observers have no
        directory id and still move nothing."""
        if (
            self.role is not Role.LEADER
            or not self.voters.dynamic
            or not sender_directory_id
            or sender_epoch <= self.epoch
        ):
            return False
        self.become_follower(sender_epoch, None)
        return True

    def _reject(self, req: Request, error: Errors) -> None:
        cluster_id = (
            req.cluster_id if error is Errors.INCONSISTENT_CLUSTER_ID else self.config.cluster_id
        )
        leader_id = self.advertised_leader_id()
        if isinstance(req, VoteRequest):
            leader_id = self.live_leader_id()
        common = {
            "cluster_id": cluster_id,
            "src": self.node_id,
            "dst": req.src,
            "epoch": self.epoch,
            "src_directory_id": self.directory_id,
        }
        if isinstance(req, FetchRequest):
            self.fetch_error(req, error)
        elif isinstance(req, FetchSnapshotRequest):
            self.fetch_snapshot_error(req, error)
        elif isinstance(req, VoteRequest):
            self.send(
                VoteResponse(
                    **common,  # type: ignore[arg-type]
                    error=error,
                    pre_vote=req.pre_vote,
                    vote_epoch=req.epoch,
                    granted=False,
                    leader_id=leader_id,
                )
            )
        elif isinstance(req, BeginQuorumEpochRequest):
            self.send(BeginQuorumEpochResponse(**common, error=error, leader_id=leader_id))  # type: ignore[arg-type]
        else:
            self.send(EndQuorumEpochResponse(**common, error=error, leader_id=leader_id))  # type: ignore[arg-type]

    def _on_vote_request(self, req: VoteRequest) -> None:
        if not self.is_voter and not req.dst_directory_id:
            # A static quorum's observer. A replica of a dynamic quorum votes when
            # asked by its directory id (receive() checked it is ours) even if its
            # own latest set leaves it out (thesis §4.1: servers grant votes without
            # consulting their configuration): the candidate may know better, e.g. a
            # removal of ours that never committed and that it does not have.
            self._reject(req, Errors.NOT_VOTER)
            return
        if not self.voters.dynamic and req.src not in self.voters.ids:
            # A dynamic quorum grants votes to candidates outside its own voter set
            # (KIP-853): the candidate may hold a newer set we have not fetched yet.
            # Only voters of the candidate's set count its votes, and pre-vote keeps
            # removed replicas from disturbing a live leader (thesis §4.2.3).
            self._reject(req, Errors.NOT_VOTER)
            return
        if req.pre_vote and self._replica_ahead(req.epoch - 1, req.src_directory_id):
            self._reject(req, Errors.NOT_LEADER)
            return
        if req.epoch < self.epoch or (
            req.pre_vote and req.epoch == self.epoch and self.leader_id is not None
        ):
            self._reject(req, Errors.FENCED_LEADER_EPOCH)
            return
        # A replica repairing a damaged log does not know what its log held, so it
        # cannot say whether the candidate's is as up to date (repair.py).
        log_ok = self.repair is None and log_is_up_to_date(
            req.last_epoch, req.end_offset, self.log.last_epoch, self.log.end_offset
        )
        if req.pre_vote:
            recent = self.live_leader_id() is not None
            granted = grant_pre_vote(
                request_epoch=req.epoch,
                candidate_id=req.src,
                own_epoch=self.epoch,
                voted_for=self.voted_for,
                leader_id=self.leader_id,
                heard_from_leader_recently=recent,
                is_leader=self.role is Role.LEADER,
                log_ok=log_ok,
            )
        else:
            if req.epoch > self.epoch:
                self.become_follower(req.epoch, None)
            granted = grant_vote(
                candidate_id=req.src,
                voted_for=self.voted_for,
                leader_id=self.leader_id,
                log_ok=log_ok,
            )
            if granted and self.voted_for is None:
                # Persisted (Ready.quorum_state) before the response leaves.
                self.voted_for = req.src
            if granted:
                self.reset_election_timer()
        self.send(
            VoteResponse(
                cluster_id=self.config.cluster_id,
                src=self.node_id,
                dst=req.src,
                epoch=self.epoch,
                src_directory_id=self.directory_id,
                error=Errors.NONE,
                pre_vote=req.pre_vote,
                vote_epoch=req.epoch,
                granted=granted,
                leader_id=self.live_leader_id(),
            )
        )

    def _on_begin_quorum_epoch(self, req: BeginQuorumEpochRequest) -> None:
        if not self.is_voter and not req.dst_directory_id:
            self._reject(req, Errors.NOT_VOTER)
            return
        if req.epoch > self.epoch or self.leader_id is None or self.role is not Role.FOLLOWER:
            # Also a prospective that lost touch with this very leader: it is back.
            self.become_follower(req.epoch, req.src)
        assert self.leader_id == req.src, (self.leader_id, req)
        self.last_leader_contact_ms = self.now_ms
        self.reset_election_timer()
        self.send(
            BeginQuorumEpochResponse(
                cluster_id=self.config.cluster_id,
                src=self.node_id,
                dst=req.src,
                epoch=self.epoch,
                error=Errors.NONE,
                leader_id=self.leader_id,
            )
        )
        self.maybe_fetch()

    def _on_end_quorum_epoch(self, req: EndQuorumEpochRequest) -> None:
        if req.epoch > self.epoch or (self.leader_id is None and self.role is Role.FOLLOWER):
            self.become_follower(req.epoch, req.src)
        if self.can_campaign and self.role is Role.FOLLOWER and self.leader_id == req.src:
            # The leader is leaving on purpose: forget its lease (so we grant
            # pre-votes) and run soon, the best-placed successor first.
            successors = req.preferred_successors
            rank = successors.index(self.node_id) if self.node_id in successors else len(successors)
            self.last_leader_contact_ms = None
            self.election_deadline_ms = self.now_ms + rank * self.config.end_quorum_backoff_ms
        self.send(
            EndQuorumEpochResponse(
                cluster_id=self.config.cluster_id,
                src=self.node_id,
                dst=req.src,
                epoch=self.epoch,
                error=Errors.NONE,
                leader_id=self.leader_id,
            )
        )

    # ------------------------------------------------------------- responses

    def _on_response(
        self,
        resp: VoteResponse
        | BeginQuorumEpochResponse
        | EndQuorumEpochResponse
        | FetchResponse
        | FetchSnapshotResponse,
    ) -> None:
        if resp.epoch > self.epoch:
            # Someone is in a newer epoch: follow its leader, if it names one.
            leader = resp.leader_id if resp.leader_id != self.node_id else None
            self.become_follower(resp.epoch, leader)
            self.maybe_fetch()
            return
        if resp.epoch < self.epoch:
            if isinstance(resp, VoteResponse) and resp.pre_vote:
                # A pre-vote moves no epoch: a voter still in an older one answers our
                # round too (vote_epoch says which). Dropping it could leave a voter
                # that missed our failed election's vote requests unable to ever help
                # elect anyone (simulation seed 79076).
                self._on_vote_response(resp)
            return  # about an epoch we left
        if (
            isinstance(resp, VoteResponse)
            and self.role is Role.PROSPECTIVE
            and resp.leader_id is not None
            and resp.leader_id != self.node_id
            and self.leader_id in (None, resp.leader_id)
        ):
            # A voter heard from our epoch's leader within its election timeout
            # (that is all a VoteResponse's leader_id ever says): the leader lives,
            # only we lost it. Follow it again rather than keep asking for votes.
            # A mere "I follow X" must not do this: a quorum of followers of a
            # dead leader would keep sending each other back to it.
            self.become_follower(self.epoch, resp.leader_id)
            self.maybe_fetch()
            return
        if isinstance(resp, VoteResponse):
            self._on_vote_response(resp)
        elif isinstance(resp, FetchResponse):
            self.on_fetch_response(resp)
        elif isinstance(resp, FetchSnapshotResponse):
            self.on_fetch_snapshot_response(resp)

    def _on_vote_response(self, resp: VoteResponse) -> None:
        tally = self.tally
        if tally is None or resp.pre_vote != tally.pre_vote or resp.vote_epoch != tally.epoch:
            return
        if resp.error is not Errors.NONE and resp.error is not Errors.FENCED_LEADER_EPOCH:
            return
        if not self.is_voter_key(resp.src, resp.src_directory_id):
            return  # only the replicas of our voter set vote
        tally.record(resp.src, resp.granted)
        if not tally.won:
            return
        if self.role is Role.PROSPECTIVE:
            self.become_candidate()
        elif self.role is Role.CANDIDATE:
            self.become_leader()
