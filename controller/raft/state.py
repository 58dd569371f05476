"""`NodeState`: the fields of a Raft node, its role transitions, and the pieces of
bookkeeping every handler shares (sending, truncating, the high watermark, and
building the `Ready`).

All role changes go through the `become_*` methods here, and each first asserts
the move against `roles.ALLOWED_TRANSITIONS`.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from controller.logformat import (
    EMPTY_ORIGIN,
    BatchOrigin,
    LeaderAndEpoch,
    QuorumState,
    RecordBatch,
    SnapshotId,
)
from controller.raft.config import RaftConfig
from controller.raft.control import encode_leader_change, voters_in
from controller.raft.election import VoteTally
from controller.raft.log import RaftLog
from controller.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Message,
    VoteRequest,
)
from controller.raft.reads import ReadState
from controller.raft.ready import Ready
from controller.raft.repair import LogRepair
from controller.raft.replication import LeaderState, ReplicaProgress
from controller.raft.roles import Role, check_transition
from controller.raft.snapshot import SnapshotFetch, SnapshotStore
from controller.raft.voters import VoterHistory, VoterSet

# How far the election timeout's spread grows after elections without a winner.
_MAX_BACKOFF_STEPS = 3


class RandomSource(Protocol):
    """What the core needs of `random.Random`: a float in [0, 1)."""

    def random(self) -> float: ...


class NodeState:
    def __init__(
        self,
        config: RaftConfig,
        log: RaftLog,
        snapshot_store: SnapshotStore,
        rng: RandomSource,
        quorum_state: QuorumState | None,
        now_ms: int,
        voters: VoterSet | None = None,
        repair_to_offset: int | None = None,
    ) -> None:
        self.config = config
        self.log = log
        self.snapshot_store = snapshot_store
        self._rng = rng
        self.now_ms = now_ms
        qs = quorum_state if quorum_state is not None else QuorumState(0, None, None)

        # --- membership (voters.py) -----------------------------------------------
        # The set in force at the log start (the snapshot's; the static set of the
        # configuration when None), then every VotersRecord in the log. Invariant:
        # `voters` is the latest set in the log, committed or not (thesis §4.1).
        base = voters if voters is not None else VoterSet.static(config.voters)
        self.voter_history = VoterHistory(base, log.start_offset)
        self._scan_log_for_voters()
        self._reported_voters: VoterSet | None = None

        # --- quorum state: mirrored to disk through Ready.quorum_state ----------
        # Invariant: epoch never decreases; voted_for is our only vote in epoch;
        # leader_id is the only leader of epoch (one leader per epoch).
        self.epoch = qs.epoch
        self.voted_for = qs.voted_for
        self.leader_id = qs.leader_id
        self._persisted = qs

        # --- repair of a damaged log (repair.py) -----------------------------------
        # Not None while the log may lack records we acknowledged: we neither vote
        # nor campaign (can_campaign is False) until it holds them again.
        self.repair = LogRepair(repair_to_offset) if repair_to_offset is not None else None
        self._repaired_unreported = False
        # --- log positions ------------------------------------------------------
        # Invariant: log.start_offset <= high_watermark, and high_watermark never
        # decreases while the node lives. It is not persisted: after a restart it
        # is relearnt from the leader (everything below the snapshot is committed).
        self.high_watermark = log.start_offset
        # A node that finds itself the persisted leader restarted mid-epoch: its
        # in-memory leader state is gone, so it must not lead again in this epoch.
        if self.can_campaign and qs.leader_id == config.node_id:
            self.role = Role.RESIGNED
        else:
            self.role = Role.FOLLOWER
        # Next offset to hand to the state machine; == high_watermark after ready().
        self.applied_offset = log.start_offset
        # Invariant: flushed_offset <= log.end_offset. Everything in the log at
        # start-up is durable (the driver flushed on open).
        self.flushed_offset = log.end_offset
        self._flush_requested = log.end_offset
        # In-flight flushes, oldest first: [requested offset, cap]. A truncation
        # while a flush is in flight caps what that flush can vouch for: it wrote
        # the records we since removed, not the ones we append in their place.
        self._flushes: deque[list[int]] = deque()

        # --- timers and per-role state ----------------------------------------------
        # Our elections in a row that ended without a leader (the timeout's spread).
        self.failed_elections = 0
        self.election_deadline_ms = now_ms + self.random_election_timeout_ms()
        # Last time the leader of our epoch reached us (None: not since we learnt
        # of it). Pre-vote stickiness reads it; a leader *hint* never sets it.
        self.last_leader_contact_ms: int | None = None
        self.leader_state: LeaderState | None = None
        # Leadership transfers given up (the target did not catch up in time).
        self.transfers_abandoned = 0
        self.tally: VoteTally | None = None
        self.seq = 0
        # (seq, sent_at_ms) of the one outstanding Fetch, if any.
        self.fetch_inflight: tuple[int, int] | None = None
        self.next_fetch_ms = now_ms
        self.fetch_failures = 0
        # The highest ReadIndex barrier our leader sent us in this epoch (0: none);
        # echoed in every fetch (reads.py). Reset on every role change.
        self.read_barrier_seen = 0
        self.snapshot_fetch: SnapshotFetch | None = None
        self.snapshot_to_load: SnapshotId | None = None
        self._snapshot_load_reported = False

        # --- the Ready being accumulated ---------------------------------------
        self._messages: list[Message] = []
        self._confirmed_reads: list[ReadState] = []
        # Proposals appended since the last Ready: parked fetches are answered once,
        # when the Ready is built, so every batch proposed in between goes out in one
        # FetchResponse per follower (one replication round) instead of the first
        # batch alone answering them and the rest waiting for the next fetch.
        self.proposed_since_ready = False
        self._reported_role: Role | None = None
        self._reported_leader: LeaderAndEpoch | None = None
        self._reported_hw = -1

    # ---------------------------------------------------------------- helpers

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def directory_id(self) -> str:
        return self.config.directory_id

    @property
    def voters(self) -> VoterSet:
        """The latest voter set in our log (in force now, committed or not)."""
        return self.voter_history.latest

    @property
    def is_voter(self) -> bool:
        return self.voters.is_voter(self.config.node_id, self.config.directory_id)

    @property
    def can_campaign(self) -> bool:
        """May we run for leader? Voters may; so may a replica whose latest set removed
        it while that removal is not known committed and the set before it had us.
        Why: a leader that removed itself, appended more, and lost its quorum before
        the removal committed holds the longest log, so the other voters cannot win
        without it (their logs are behind), and it must not sit out: it runs, leads
        the new set without counting itself (thesis §4.2.2) until the removal
        commits, then hands over. Once it learns the removal committed it stops.
        A replica repairing a damaged log never runs (repair.py)."""
        if self.repair is not None:
            return False
        if self.is_voter:
            return True
        latest = self.voter_history.latest_offset
        if latest is None or latest < self.high_watermark:
            return False
        before = self.voter_history.in_force_at(latest - 1)
        return before.is_voter(self.node_id, self.directory_id)

    def is_voter_key(self, node_id: int, directory_id: str) -> bool:
        return self.voters.is_voter(node_id, directory_id)

    @property
    def voter_change_pending(self) -> bool:
        """Is the latest voter set's record not committed yet?"""
        at = self.voter_history.latest_offset
        return at is not None and at >= self.high_watermark

    def _scan_log_for_voters(self) -> None:
        for batch in self.log.control_batches(self.log.start_offset):
            found = voters_in(batch.records)
            if found is not None:
                self.voter_history.add(batch.base_offset, found)

    def _note_voters(self, batch: RecordBatch) -> None:
        """An appended batch: a VotersRecord in it is in force from now on."""
        if not batch.is_control:
            return
        found = voters_in(batch.records)
        if found is None:
            return
        was_voter = self.is_voter
        self.voter_history.add(batch.base_offset, found)
        self.voters_changed(was_voter)

    def voters_changed(self, was_voter: bool) -> None:
        """The latest voter set changed (appended or truncated away). Roles that
        only voters may hold are left; a new voter starts its election timer now
        (not at some deadline long past), a new voter set reaches the leader's
        bookkeeping."""
        now_voter = self.is_voter
        if self.leader_state is not None:
            self.leader_state.set_voters(self.voters.ids, self.now_ms)
        if now_voter and not was_voter:
            self.reset_election_timer()
        if not self.can_campaign and self.role in (Role.PROSPECTIVE, Role.CANDIDATE):
            self.become_follower(self.epoch, None)

    @property
    def leader(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.leader_id, self.epoch)

    def _leading(self) -> LeaderState:
        """The leader's per-epoch state (only while we lead)."""
        assert self.role is Role.LEADER and self.leader_state is not None
        return self.leader_state

    @property
    def replica_progress(self) -> tuple[ReplicaProgress, ...] | None:
        """The leader's view of every replica (None unless we lead); read-only."""
        state = self.leader_state
        if self.role is not Role.LEADER or state is None:
            return None
        return state.replica_progress(self.log.end_offset, self.now_ms,
                                      self.config.supported_versions,
                                      self.log.retained_start_offset)

    @property
    def quorum_state(self) -> QuorumState:
        return QuorumState(self.epoch, self.voted_for, self.leader_id)

    def advertised_leader_id(self) -> int | None:
        """The leader we name to others: never ourselves unless we lead now."""
        if self.leader_id == self.node_id and self.role is not Role.LEADER:
            return None
        return self.leader_id

    def live_leader_id(self) -> int | None:
        """The leader, if we lead or heard from it within the (minimum) election
        timeout: what pre-vote stickiness and VoteResponse.leader_id go by."""
        if self.role is Role.LEADER:
            return self.node_id
        contact = self.last_leader_contact_ms
        if contact is None or self.now_ms - contact >= self.config.election_timeout_ms:
            return None
        return self.leader_id

    def random_election_timeout_ms(self) -> int:
        """Drawn from [base, (2 + k) * base) after k elections in a row that ended
        without a leader (k at most `_MAX_BACKOFF_STEPS`): two candidates that split
        the vote draw from a wider range each round, so they soon stop running at the
        same moment (an even number of voters splits often: 2 of 4 is no majority)."""
        base = self.config.election_timeout_ms
        spread = base << min(self.failed_elections, _MAX_BACKOFF_STEPS)
        return base + int(self._rng.random() * spread)

    def reset_election_timer(self) -> None:
        self.election_deadline_ms = self.now_ms + self.random_election_timeout_ms()

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def send(self, message: Message) -> None:
        # Every message carries our epoch; a pre-vote asks about the next one.
        expected = (
            self.epoch + 1 if isinstance(message, VoteRequest) and message.pre_vote else self.epoch
        )
        assert message.src == self.node_id and message.epoch == expected, message
        self._messages.append(message)

    def other_voters(self) -> list[int]:
        return sorted(v for v in self.voters.ids if v != self.node_id)

    def set_high_watermark(self, offset: int) -> bool:
        """Raise the high watermark; returns whether it moved."""
        if offset <= self.high_watermark:
            return False
        assert offset <= self.log.end_offset, (offset, self.log.end_offset)
        self.high_watermark = offset
        return True

    def truncate_log(self, offset: int) -> None:
        """Cut the log at `offset`, never below the high watermark (those records
        are committed: cutting them would be a safety bug, so it is an assert)."""
        assert offset >= self.high_watermark, (offset, self.high_watermark)
        if offset >= self.log.end_offset:
            return
        self.log.truncate_to(offset)
        latest = self.voter_history.latest_offset
        if latest is not None and latest >= offset:
            was_voter = self.is_voter
            self.voter_history.truncate(offset)
            self.voters_changed(was_voter)
        self.flushed_offset = min(self.flushed_offset, offset)
        self._flush_requested = min(self._flush_requested, offset)
        for flush in self._flushes:
            flush[1] = min(flush[1], offset)

    def note_flushed(self, offset: int) -> None:
        cap = offset
        while self._flushes and self._flushes[0][0] <= offset:
            cap = self._flushes.popleft()[1]
        durable = min(offset, cap, self.log.end_offset)
        if durable > self.flushed_offset:
            self.flushed_offset = durable
        self.check_repaired()

    def leader_committed_in_its_epoch(self) -> bool:
        """Does our log show that our leader committed a record of its own epoch?
        Then its high watermark covers every record committed before (repair.py)."""
        if self.log.last_epoch != self.epoch:
            return False
        before = self.log.end_offset_for_epoch(self.epoch - 1)
        # None: even epoch - 1 is below our snapshot, which then ends in our epoch.
        return before is None or self.high_watermark > before.end_offset

    def check_repaired(self) -> None:
        if self.repair is not None and self.repair.done(self.flushed_offset):
            self.repair = None
            self._repaired_unreported = True
            self.reset_election_timer()

    def append_batch(
        self, records: tuple[bytes, ...], is_control: bool, origin: BatchOrigin
    ) -> int:
        assert self.role is Role.LEADER
        assert is_control or self._leading().transfer_target is None, \
            "a data batch appended while leadership is being transferred"
        base = self.log.end_offset
        batch = RecordBatch(
            base_offset=base,
            epoch=self.epoch,
            append_time_ms=self.now_ms,
            is_control=is_control,
            origin=origin,
            records=records,
        )
        self.log.append(batch)
        self._note_voters(batch)
        return base

    # ----------------------------------------------------------- transitions

    def _transition(self, target: Role) -> None:
        check_transition(self.role, target, is_voter=self.can_campaign)
        if self.role is Role.LEADER:
            # Parked fetches die with the epoch's leadership; fetchers time out
            # and find the new leader.
            self.leader_state = None
        self.tally = None
        self.fetch_inflight = None
        self.read_barrier_seen = 0
        self.role = target

    def become_follower(self, epoch: int, leader_id: int | None) -> None:
        """Follow `leader_id` in `epoch` (None: wait for one; unattached)."""
        assert epoch >= self.epoch, (epoch, self.epoch)
        assert leader_id != self.node_id
        if epoch == self.epoch and self.leader_id is not None:
            # One leader per epoch: we may learn it, never replace it.
            assert leader_id in (None, self.leader_id), (epoch, leader_id, self.leader_id)
            leader_id = self.leader_id
        was_leading = self.role in (Role.LEADER, Role.RESIGNED)
        self._transition(Role.FOLLOWER)
        if epoch > self.epoch:
            self.epoch, self.voted_for = epoch, None
        if leader_id != self.leader_id:
            self.last_leader_contact_ms = None
            self.fetch_failures = 0
        if leader_id is not None:
            self.failed_elections = 0
        self.leader_id = leader_id
        if self.snapshot_fetch is not None and self.snapshot_fetch.leader_id != leader_id:
            self.snapshot_fetch = None
        self.next_fetch_ms = self.now_ms
        if leader_id is not None or was_leading:
            self.reset_election_timer()
        # Otherwise keep the running timer (Raft §5.2: only a leader or a granted
        # vote resets it). Resetting on every newer epoch lets a node that keeps
        # losing elections hold back, for ever, the one voter that could win.

    def become_prospective(self) -> None:
        """Start a pre-vote round for epoch + 1 (our epoch does not change)."""
        if self.role is Role.CANDIDATE:
            self.failed_elections += 1  # our election timed out without a winner
        self._transition(Role.PROSPECTIVE)
        self.snapshot_fetch = None
        self.tally = VoteTally(self.epoch + 1, pre_vote=True, voters=self.voters.ids)
        self.tally.record(self.node_id, True)
        self.reset_election_timer()
        for voter in self.other_voters():
            self.send(self._vote_request(voter, pre_vote=True))
        if self.tally.won:
            self.become_candidate()

    def become_candidate(self) -> None:
        """A majority would vote for us: bump the epoch and vote for ourselves."""
        self._transition(Role.CANDIDATE)
        # Inputs above EPOCH_LIMIT are refused, so only a million of our own
        # elections could get here; the wire carries int32.
        assert self.epoch < 2**31 - 1, f"epoch {self.epoch} cannot grow"
        self.epoch += 1
        self.voted_for, self.leader_id = self.node_id, None
        self.last_leader_contact_ms = None
        self.tally = VoteTally(self.epoch, pre_vote=False, voters=self.voters.ids)
        self.tally.record(self.node_id, True)
        self.reset_election_timer()
        for voter in self.other_voters():
            self.send(self._vote_request(voter, pre_vote=False))
        if self.tally.won:
            self.become_leader()

    def become_leader(self) -> None:
        assert self.tally is not None and self.tally.won and not self.tally.pre_vote
        granted = frozenset(self.tally.granted)
        self._transition(Role.LEADER)
        self.failed_elections = 0
        self.leader_id = self.node_id
        others = self.other_voters()
        self.leader_state = LeaderState(
            node_id=self.node_id,
            epoch=self.epoch,
            voters=self.voters.ids,
            epoch_start_offset=self.log.end_offset,
            started_ms=self.now_ms,
            awaiting_begin=set(others),
            last_begin_sent_ms=self.now_ms,
        )
        record = encode_leader_change(self.node_id, self.epoch, self.voters.ids, granted)
        self.append_batch((record,), True, EMPTY_ORIGIN)
        for voter in others:
            self.send(self._begin_quorum_epoch(voter))

    def become_resigned(self, *, graceful: bool, successor: int | None = None) -> None:
        """Give up leading this epoch. On a planned stop (`graceful`) tell the
        voters, most caught up first (`successor` before all), so one of them takes
        over at once."""
        assert self.leader_state is not None
        successors = self.leader_state.successors_by_progress()
        if successor is not None:
            assert successor in successors, (successor, successors)
            successors = (successor, *(v for v in successors if v != successor))
        self._transition(Role.RESIGNED)
        self.reset_election_timer()
        if graceful:
            for voter in successors:
                self.send(
                    EndQuorumEpochRequest(
                        cluster_id=self.config.cluster_id,
                        src=self.node_id,
                        dst=voter,
                        epoch=self.epoch,
                        src_directory_id=self.directory_id,
                        dst_directory_id=self.voters.directory_id_of(voter),
                        preferred_successors=successors,
                    )
                )

    def _vote_request(self, voter: int, *, pre_vote: bool) -> VoteRequest:
        return VoteRequest(
            cluster_id=self.config.cluster_id,
            src=self.node_id,
            dst=voter,
            epoch=self.epoch + 1 if pre_vote else self.epoch,
            src_directory_id=self.directory_id,
            dst_directory_id=self.voters.directory_id_of(voter),
            pre_vote=pre_vote,
            last_epoch=self.log.last_epoch,
            end_offset=self.log.end_offset,
        )

    def _begin_quorum_epoch(self, voter: int) -> BeginQuorumEpochRequest:
        return BeginQuorumEpochRequest(
            cluster_id=self.config.cluster_id,
            src=self.node_id,
            dst=voter,
            epoch=self.epoch,
            src_directory_id=self.directory_id,
            dst_directory_id=self.voters.directory_id_of(voter),
        )

    # ------------------------------------------------------------------ Ready

    def build_ready(self) -> Ready:
        qs = self.quorum_state
        persist = None
        if qs != self._persisted:
            # The epoch only moves forward, and within an epoch the vote only
            # goes from None to a candidate.
            assert qs.epoch >= self._persisted.epoch, (qs, self._persisted)
            if qs.epoch == self._persisted.epoch and self._persisted.voted_for is not None:
                assert qs.voted_for == self._persisted.voted_for, (qs, self._persisted)
            persist = self._persisted = qs

        flush_to = None
        if self.log.end_offset != self._flush_requested:
            flush_to = self._flush_requested = self.log.end_offset
            self._flushes.append([flush_to, flush_to])

        committed: list[RecordBatch] = []
        if self.snapshot_to_load is None:
            while self.applied_offset < self.high_watermark:
                batches = self.log.read(self.applied_offset, 1024, 1 << 62)
                for batch in batches:
                    if batch.base_offset >= self.high_watermark:
                        break
                    assert batch.next_offset <= self.high_watermark, "hw inside a batch"
                    committed.append(batch)
                    self.applied_offset = batch.next_offset
                assert batches, "committed offsets missing from the log"

        hw = None
        if self.high_watermark != self._reported_hw:
            hw = self._reported_hw = self.high_watermark
        role = None
        if self.role is not self._reported_role:
            role = self._reported_role = self.role
        leader = None
        if self.leader != self._reported_leader:
            leader = self._reported_leader = self.leader

        voters = None
        if self.voters != self._reported_voters:
            voters = self._reported_voters = self.voters

        load = None
        if self.snapshot_to_load is not None and not self._snapshot_load_reported:
            load = self.snapshot_to_load
            self._snapshot_load_reported = True

        messages = tuple(self._messages)
        self._messages.clear()
        reads = tuple(self._confirmed_reads)
        self._confirmed_reads.clear()
        repaired, self._repaired_unreported = self._repaired_unreported, False
        return Ready(
            repaired=repaired,
            quorum_state=persist,
            flush_to_offset=flush_to,
            messages=messages,
            committed=tuple(committed),
            high_watermark=hw,
            role=role,
            leader=leader,
            snapshot_to_load=load,
            reads=reads,
            voters=voters,
        )
