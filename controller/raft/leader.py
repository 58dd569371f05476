"""The leader's side: answering Fetch and FetchSnapshot, long polling, moving the
high watermark, proposals, and the leader's timers (check quorum, BeginQuorumEpoch
retries)."""

from __future__ import annotations

from controller.logformat import (
    EMPTY_ORIGIN,
    BatchOrigin,
    EpochEndOffset,
    RecordBatch,
    SnapshotId,
)
from controller.raft.messages import (
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from controller.raft.ready import ProposeError, ProposeResult, TransferError
from controller.raft.replication import FetchCheck, ParkedFetch, check_fetch_position
from controller.raft.roles import Role
from controller.raft.state import NodeState


class LeaderMixin(NodeState):
    # ------------------------------------------------------------- proposals

    def propose(
        self,
        records: tuple[bytes, ...] | list[bytes],
        now_ms: int,
        origin: BatchOrigin = EMPTY_ORIGIN,
    ) -> ProposeResult:
        """Append `records` as one batch if we lead; see `ProposeResult`."""
        self.now_ms = max(self.now_ms, now_ms)
        if self.role is not Role.LEADER:
            return ProposeResult(
                epoch=self.epoch, error=ProposeError.NOT_LEADER, leader=self.leader
            )
        if self._leading().transfer_target is not None:
            return ProposeResult(epoch=self.epoch, error=ProposeError.TRANSFERRING,
                                 leader=self.leader)
        records = tuple(records)
        if not records:
            return ProposeResult(epoch=self.epoch, error=ProposeError.EMPTY)
        size = sum(len(r) for r in records)
        if len(records) > self.config.max_batch_records or size > self.config.max_batch_bytes:
            return ProposeResult(epoch=self.epoch, error=ProposeError.TOO_LARGE)
        base = self.append_batch(records, False, origin)
        # Parked fetches get it when the Ready is built (see `proposed_since_ready`).
        self.proposed_since_ready = True
        return ProposeResult(base_offset=base, epoch=self.epoch)

    # ------------------------------------------------------- leadership transfer

    def transfer_leadership(self, target: int, now_ms: int) -> TransferError | None:
        """Hand leadership to voter `target` (the Raft thesis §3.10; etcd's
        MsgTransferLeader): append nothing more, wait until `target` holds the whole
        log, then resign naming it the first successor, so it runs at once and wins
        (no voter's log is ahead of its). None: under way. It ends with `target`
        leading a new epoch, or, if `target` did not catch up within an election
        timeout (or left the voters), with this node leading on and appending again."""
        self.now_ms = max(self.now_ms, now_ms)
        if self.role is not Role.LEADER:
            return TransferError.NOT_LEADER
        state = self._leading()
        if target == self.node_id or self.voters.get(target) is None:
            return TransferError.NOT_VOTER
        if state.transfer_target is not None:
            return TransferError.IN_PROGRESS
        if self.voter_change_pending:
            return TransferError.CHANGE_PENDING
        state.transfer_target = target
        state.transfer_deadline_ms = self.now_ms + self.config.election_timeout_ms
        self.maybe_hand_over()
        return None

    @property
    def transfer_target(self) -> int | None:
        """The voter leadership is being handed to, if a transfer is under way."""
        state = self.leader_state
        return None if state is None or self.role is not Role.LEADER else state.transfer_target

    def maybe_hand_over(self) -> None:
        """Resign to the transfer's target once it holds our whole log; give the
        transfer up at its deadline or when the target stops being a voter."""
        state = self.leader_state
        if self.role is not Role.LEADER or state is None or state.transfer_target is None:
            return
        target = state.transfer_target
        if self.voters.get(target) is None or self.now_ms >= state.transfer_deadline_ms:
            state.transfer_target = None
            self.transfers_abandoned += 1
            return
        if state.fetch_offsets.get(target, -1) >= self.log.end_offset:
            self.become_resigned(graceful=True, successor=target)

    # ------------------------------------------------------------------ reads

    def read_index(self, read_id: int, now_ms: int) -> ProposeError | None:
        """A linearizable read (ReadIndex, reads.py): None when accepted; it comes back
        in `Ready.reads` with its index once a majority confirmed our leadership, or
        never if we lose it first (the caller fails its reads on a leader change)."""
        self.now_ms = max(self.now_ms, now_ms)
        if self.role is not Role.LEADER:
            return ProposeError.NOT_LEADER
        state = self._leading()
        # Every entry of an older epoch commits with our LeaderChange batch.
        index = max(self.high_watermark, state.epoch_start_offset + 1)
        if not state.reads.add(read_id, index):
            return ProposeError.BUSY
        self._confirm_reads()
        # Parked fetches carry the new barrier out at the next ready().
        self.proposed_since_ready = True
        return None

    def _confirm_reads(self) -> None:
        if self.role is Role.LEADER:
            self._confirmed_reads.extend(self._leading().reads.confirmed())

    # ------------------------------------------------------------------ Fetch

    def fetch_error(self, req: FetchRequest, error: Errors) -> None:
        self.send(
            FetchResponse(
                cluster_id=req.cluster_id
                if error is Errors.INCONSISTENT_CLUSTER_ID
                else self.config.cluster_id,
                src=self.node_id,
                dst=req.src,
                epoch=self.epoch,
                seq=req.seq,
                error=error,
                leader_id=self.advertised_leader_id(),
                fetch_offset=req.fetch_offset,
                last_fetched_epoch=req.last_fetched_epoch,
                high_watermark=self.high_watermark,
                log_start_offset=self.log.start_offset,
            )
        )

    def on_fetch_request(self, req: FetchRequest) -> None:
        """A fetch in our epoch (the caller settled epochs and roles)."""
        state = self._leading()
        is_voter = self.is_voter_key(req.src, req.src_directory_id)
        if is_voter:
            state.reads.echoed(req.src, req.read_barrier)
            self._confirm_reads()
        check, diverging = check_fetch_position(self.log, req.fetch_offset, req.last_fetched_epoch)
        if check is FetchCheck.VALID:
            state.record_fetch(
                req.src,
                req.fetch_offset,
                self.now_ms,
                is_voter=is_voter,
                directory_id=req.src_directory_id,
                caught_up=req.fetch_offset >= self.log.end_offset,
                supported_versions=req.supported_versions,
                retained_start_offset=req.retained_start_offset,
            )
            self.update_high_watermark()
            if self._has_news(req, not state.reads.current_sent) or req.max_wait_ms <= 0:
                self._answer_fetch(req)
            else:
                deadline = self.now_ms + min(req.max_wait_ms, self.config.fetch_max_wait_ms)
                state.parked[req.src] = ParkedFetch(req, self._hurried(req, deadline))
            if req.src == state.transfer_target:
                self.maybe_hand_over()
            return
        state.record_fetch(
            req.src, None, self.now_ms, is_voter=is_voter, directory_id=req.src_directory_id,
            supported_versions=req.supported_versions,
            retained_start_offset=req.retained_start_offset,
        )
        state.parked.pop(req.src, None)
        if check is FetchCheck.DIVERGING:
            self._answer_fetch(req, diverging=diverging)
        else:
            self._answer_fetch(req, snapshot_id=self.log.snapshot_id)

    def _answer_fetch(
        self,
        req: FetchRequest,
        *,
        diverging: EpochEndOffset | None = None,
        snapshot_id: SnapshotId | None = None,
    ) -> None:
        batches: tuple[RecordBatch, ...] = ()
        if diverging is None and snapshot_id is None:
            batches = tuple(
                self.log.read(
                    req.fetch_offset, self.config.fetch_max_batches, self.config.fetch_max_bytes
                )
            )
        self.send(
            FetchResponse(
                cluster_id=self.config.cluster_id,
                src=self.node_id,
                dst=req.src,
                epoch=self.epoch,
                seq=req.seq,
                error=Errors.NONE,
                leader_id=self.node_id,
                fetch_offset=req.fetch_offset,
                last_fetched_epoch=req.last_fetched_epoch,
                high_watermark=self.high_watermark,
                log_start_offset=self.log.start_offset,
                batches=batches,
                diverging=diverging,
                snapshot_id=snapshot_id,
                read_barrier=self._leading().reads.barrier_for_response(),
            )
        )

    def _has_news(self, req: FetchRequest, barrier_news: bool) -> bool:
        """Whether a fetch must be answered now: records it lacks, a read barrier no
        response carried yet (reads wait on it), or -- without a linger -- a newer
        high watermark."""
        return (
            req.fetch_offset < self.log.end_offset
            or barrier_news
            or (
                self.config.high_watermark_linger_ms == 0
                and req.high_watermark != self.high_watermark
            )
        )

    def _hurried(self, req: FetchRequest, deadline_ms: int) -> int:
        """A parked fetch's deadline, brought forward to the end of the high
        watermark linger when the follower's high watermark is behind ours."""
        if req.high_watermark == self.high_watermark:
            return deadline_ms
        return min(deadline_ms, self.now_ms + self.config.high_watermark_linger_ms)

    def answer_parked_fetches(self, *, due_only: bool = False) -> None:
        """Answer parked fetches that now have news (`_has_news`), and those whose
        wait is over; a newer high watermark alone shortens the wait to the linger."""
        if self.role is not Role.LEADER:
            return
        state = self._leading()
        # A barrier no response carried yet: reads wait on it, so it is news.
        barrier_news = not state.reads.current_sent
        for replica, parked in list(state.parked.items()):
            req = parked.request
            if (not due_only and self._has_news(req, barrier_news)) \
                    or self.now_ms >= parked.deadline_ms:
                del state.parked[replica]
                self._answer_fetch(req)
            else:
                deadline_ms = self._hurried(req, parked.deadline_ms)
                if deadline_ms != parked.deadline_ms:
                    state.parked[replica] = ParkedFetch(req, deadline_ms)

    def update_high_watermark(self) -> None:
        """Move the high watermark to what a majority of voters stored durably."""
        if self.role is not Role.LEADER:
            return
        candidate = self._leading().high_watermark_candidate(self.flushed_offset)
        if candidate is not None and self.set_high_watermark(candidate):
            self.answer_parked_fetches()

    # --------------------------------------------------------- FetchSnapshot

    def on_fetch_snapshot_request(self, req: FetchSnapshotRequest) -> None:
        state = self._leading()
        state.record_contact(req.src, self.now_ms)
        size = self.snapshot_store.size_bytes(req.snapshot_id)
        data = b""
        error = Errors.NONE
        if size is None or not 0 <= req.position <= size:
            error, size = Errors.SNAPSHOT_NOT_FOUND, 0
        else:
            max_bytes = max(1, min(req.max_bytes, self.config.snapshot_chunk_bytes))
            data = self.snapshot_store.read_chunk(req.snapshot_id, req.position, max_bytes)
        self.send(
            FetchSnapshotResponse(
                cluster_id=self.config.cluster_id,
                src=self.node_id,
                dst=req.src,
                epoch=self.epoch,
                seq=req.seq,
                error=error,
                leader_id=self.node_id,
                snapshot_id=req.snapshot_id,
                position=req.position,
                size_bytes=size,
                data=data,
            )
        )

    def fetch_snapshot_error(self, req: FetchSnapshotRequest, error: Errors) -> None:
        self.send(
            FetchSnapshotResponse(
                cluster_id=req.cluster_id
                if error is Errors.INCONSISTENT_CLUSTER_ID
                else self.config.cluster_id,
                src=self.node_id,
                dst=req.src,
                epoch=self.epoch,
                seq=req.seq,
                error=error,
                leader_id=self.advertised_leader_id(),
                snapshot_id=req.snapshot_id,
                position=req.position,
                size_bytes=0,
            )
        )

    # ------------------------------------------------------------------ timers

    def leader_tick(self) -> None:
        state = self._leading()
        if not state.has_quorum_contact(self.now_ms, self.config.check_quorum_timeout_ms):
            # Check quorum (thesis §6.2): we may be on the small side of a
            # partition; stop taking writes so clients go to the real leader.
            self.become_resigned(graceful=False)
            return
        self.maybe_hand_over()
        if self.role is not Role.LEADER:
            return
        self.answer_parked_fetches(due_only=True)
        if self.now_ms - state.last_begin_sent_ms < self.config.begin_quorum_retry_ms:
            return
        # BeginQuorumEpoch again to voters that never fetched in this epoch, and to
        # those silent for longer than a fetch can take: a voter stuck as a
        # prospective, or in a newer epoch whose election failed, learns of us (or
        # we of its newer epoch, and step down so an election includes it).
        silent_since = self.now_ms - self.config.request_timeout_ms
        targets = set(state.awaiting_begin) | {
            v
            for v in self.other_voters()
            if state.last_contact_ms.get(v, state.started_ms) <= silent_since
        }
        if targets:
            state.last_begin_sent_ms = self.now_ms
            for voter in sorted(targets):
                self.send(self._begin_quorum_epoch(voter))
