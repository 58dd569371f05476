"""`ControllerMachine`: the controller as a state machine, without I/O.

Stimuli in, instructions out (the Raft core's shape): `request` (an admin request
with its id), `leader_changed`, `committed` (batches the quorum committed),
`load_snapshot`, `tick` (with the time), `shut_down`. Each leaves `Answer` / `Fail`
instructions in `take_instructions()`. No asyncio, no futures, no clock: the time
comes with each stimulus, and the Raft node and the snapshot writer are seams
(`NodeAccess`, `SnapshotPolicy`). The asyncio daemon (`QuorumController`) is a thin
driver over it; the whole-system simulation drives the same machine.

A write (leader, active):
1. the manager generates records + a response from the latest, uncommitted state;
2. the records are replayed at `next_offset` (a replay error reverts and fails the
   request: nothing reaches the log), the registry snapshots at the batch's last
   offset, and the batch is appended -- not awaited;
3. the response waits in the purgatory until that batch commits; on each commit
   the registry drops the snapshots below the committed offset.
A request that produces no records waits for the newest uncommitted batch.

Exactly once: a write with a request id (and a response codec) appends, in its own
batch, a RequestResultRecord holding its answer (controller/metadata/requests.py).
A request with an id already in the table -- a client's retry, maybe to the next
leader after a failover -- is not run again: it gets the original answer, once the
original's batch has committed.

Modes (one table, `MODE_TRANSITIONS`). STANDBY replays committed batches (a hot
standby). When this node wins an election it is PENDING until the LeaderChange
batch of its epoch commits -- all earlier entries are then replayed -- and only
then ACTIVE; requests arriving meanwhile are parked (bounded, with a deadline).
Losing leadership (a leader-change stimulus, the node's role at the next
stimulus, or a commit that is not what we appended) reverts the timeline to the
committed offset, drops soft state, answers parked requests "not controller", and
leaves appended requests in the purgatory to learn their real fate (purgatory.py).
Reads are linearizable by default: the active controller asks the Raft node to
confirm its leadership (ReadIndex, controller/raft/reads.py) and answers once a
majority confirmed and its committed state reached the read's index. A STALE read
is answered at once, in any mode, from this node's committed state. Either way the
answer names the committed offset it was read at.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from controller.api.seam import (
    BehindError,
    ControllerBusyError,
    ControllerTimeoutError,
    NotControllerError,
    RequestIdReusedError,
    ResultNotKeptError,
)
from controller.log import get_logger
from controller.logformat.batch import (
    EMPTY_ORIGIN,
    MAX_APPEND_BYTES,
    MAX_RECORDS_PER_BATCH,
    BatchOrigin,
    RecordBatch,
)
from controller.metadata import METADATA_VERSION, MetadataState
from controller.metadata.errors import MetadataReplayError
from controller.metadata.features import UnsupportedFeatureLevelError
from controller.metadata.levels import Feature, enabled
from controller.metadata.placement import RandomSource
from controller.quorum.errors import (
    LeadershipTransferringError,
    NotLeaderError,
    ProposalRejectedError,
)
from controller.quorum_controller.events import (
    MODE_TRANSITIONS,
    Answer,
    Fail,
    Instruction,
    Mode,
    ReadConsistency,
    Request,
    RequestTooLargeError,
)
from controller.quorum_controller.partition_mover import PartitionMover
from controller.quorum_controller.ports import ControllerSettings, NodeAccess
from controller.quorum_controller.purgatory import BatchKey, Purgatory, Waiter
from controller.raft.control import encode_voters
from controller.raft.ready import TransferError
from controller.raft.voters import Voter, VoterChangeError, VoterChangeResult
from controller.records import MetadataRecord, NoOpRecord, encode_record, make_record

if TYPE_CHECKING:
    import asyncio

log = get_logger("metakraft.controller")

# Without a timer due, the machine still ticks this often (`next_tick_ms`).
IDLE_TICK_MS = 1000


class SnapshotPolicy(Protocol):
    """When to write a snapshot file (the writer itself is the driver's)."""

    def committed(self, batch_bytes: int, committed_next: int, epoch: int, now_ms: int) -> bool:
        """Count a committed batch (at `now_ms`, the machine's clock); True if a
        snapshot of the state at `committed_next - 1` starts now (the machine keeps
        that registry snapshot)."""
        ...

    @property
    def pinned_offset(self) -> int | None:
        """The offset whose registry snapshot a snapshot being written still reads."""
        ...

    def reset(self) -> None:
        """The state was replaced by a snapshot from the leader."""
        ...

    def snapshot_next(self) -> None:
        """Start a snapshot at the next committed batch, however few bytes came since
        the last (after an unsafe downgrade: a snapshot without the newer data)."""
        ...


class ControllerMachine:
    def __init__(self, settings: ControllerSettings, *, rng: RandomSource) -> None:
        self.settings = settings
        self.state = MetadataState(cluster_id=settings.cluster_id, rng=rng,
                                   session_timeout_ms=settings.session_timeout_ms,
                                   controller_ids=frozenset(settings.voter_addresses))
        # Voter id -> endpoint, from the log's voter set (a dynamic quorum).
        self.voter_endpoints: dict[int, str] = {}
        # Brokers this node fenced for a timed-out session, since start (metrics).
        self.brokers_timed_out = 0
        self.registry = self.state.registry
        # Invariants: a registry snapshot exists at committed_next - 1, and none below
        # it except from the offset a snapshot file being written reads; the newest
        # is at replayed_next - 1 (-1: the empty state).
        self.registry.create_snapshot(-1)
        self._committed_next = 0
        self._replayed_next = 0
        self._last_committed_epoch = 0
        self._mode = Mode.STANDBY
        self._epoch = 0  # our leader epoch while PENDING or ACTIVE
        self._epoch_started = False
        self._leader_id: int | None = None
        # Our appended, not yet committed batches, by base offset.
        self._uncommitted: dict[int, BatchKey] = {}
        self._last_key: BatchKey | None = None
        self._purgatory = Purgatory()
        # Linearizable reads the Raft node is confirming, by request id: the request,
        # and its read index once a majority confirmed our leadership (None before).
        self._reads: dict[int, tuple[Request, int | None]] = {}
        # Reads waiting for this node to apply the log up to their min_offset, in
        # arrival order, with the time they give up (`stale_read_wait_ms`).
        self._behind: deque[tuple[Request, int]] = deque()
        self._parked: deque[Request] = deque()
        # Requests whose callers gave up (never dispatched once parked).
        self._forgotten: set[int] = set()
        self._out: list[Instruction] = []
        self.snapshots: SnapshotPolicy | None = None
        self.activations = 0  # times this node became the active controller
        # When we last appended (active only): an idle log gets a NoOpRecord after
        # `metadata_max_idle_interval_ms` (metadata.version 6), so followers and
        # brokers see it move and their lag means what it says.
        self._last_append_ms = 0
        self.no_ops_written = 0
        # Partition changes owed to broker events, written a batch per turn (active only).
        self._mover = PartitionMover(self.state.replication)

    # ------------------------------------------------------------------ status

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def owes_partition_moves(self) -> bool:
        """Partition changes a broker event owes are still to be written (by `tick`)."""
        return self._mode is Mode.ACTIVE and self._mover.busy

    @property
    def committed_offset(self) -> int:
        """The next offset to commit: every record below it is committed and replayed."""
        return self._committed_next

    @property
    def last_committed_epoch(self) -> int:
        """The Raft epoch of the last committed batch (a snapshot there is named by it)."""
        return self._last_committed_epoch

    @property
    def replayed_offset(self) -> int:
        return self._replayed_next

    def committed_read_epoch(self) -> int | None:
        """The timeline epoch of the committed state: None (the latest) when nothing
        uncommitted is replayed, else the registry snapshot at the last committed offset."""
        if self._replayed_next == self._committed_next:
            return None
        return self._committed_next - 1

    @property
    def leader_id(self) -> int | None:
        return self.settings.node_id if self._mode is not Mode.STANDBY else self._leader_id

    @property
    def parked_requests(self) -> int:
        return len(self._parked)

    @property
    def waiting_responses(self) -> int:
        return len(self._purgatory) + len(self._reads)

    def not_controller(self) -> NotControllerError:
        leader = self._leader_id if self._leader_id != self.settings.node_id else None
        address = self.settings.leader_address(leader)
        if address is None and leader is not None:
            address = self.voter_endpoints.get(leader)
        return NotControllerError(leader, address)

    def change_voters(self, node: NodeAccess, kind: str, voter: Voter, dry_run: bool
                      ) -> tuple[VoterChangeResult, asyncio.Future[int] | None]:
        """A voter change, on the active controller only: the Raft node appends the
        VotersRecord, which is then replayed here like our own batches (the state at
        every offset is ours to snapshot, and only our appends may reach the log)."""
        if self._mode is not Mode.ACTIVE:
            error = VoterChangeError.NOT_LEADER if self._mode is Mode.STANDBY \
                else VoterChangeError.NO_HIGH_WATERMARK
            return VoterChangeResult(error=error, message="not the active controller yet",
                                     leader_id=self._leader_id), None
        base = node.next_offset
        assert base == self._replayed_next, (base, self._replayed_next)
        result, committed = node.change_voters(kind, voter, dry_run)
        if result.offset is not None:
            assert result.offset == base, (result.offset, base)
            self.state.replay_encoded([encode_voters(result.voters)] if result.voters else [],
                                      base)
            self.registry.create_snapshot(base)
            self._replayed_next = base + 1
            key = BatchKey(base, base, self._epoch)
            self._uncommitted[base] = key
            self._last_key = key
        return result, committed

    def transfer_leadership(self, node: NodeAccess, target: int) -> TransferError | None:
        """Hand leadership to voter `target` (the Raft node's transfer), from the
        active controller only. Until it ends every append is refused, and the
        request is answered "not controller" (nothing replayed stays)."""
        if self._mode is not Mode.ACTIVE:
            return TransferError.NOT_LEADER
        return node.transfer_leadership(target)

    def voters_changed(self, endpoints: Mapping[int, str]) -> None:
        """The voter set in the log names these endpoints (a dynamic quorum): where
        clients are sent when one of them is the active controller."""
        self.voter_endpoints = dict(endpoints)

    def take_instructions(self) -> list[Instruction]:
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------ stimuli

    def refuses(self, *, write: bool, consistency: ReadConsistency) -> bool:
        """Whether a request of this kind would be answered `not_controller()` now: a
        standby serves stale reads only."""
        return self._mode is Mode.STANDBY and (write or consistency is not ReadConsistency.STALE)

    def request(self, req: Request, node: NodeAccess, now_ms: int) -> None:
        """An admin request, run now (on the Raft node's turn)."""
        self._sync_leadership(node, now_ms)
        if not req.is_write and req.consistency is ReadConsistency.STALE:
            self._serve_read(req, now_ms)  # from our committed state, whatever our mode
            return
        if self._mode is Mode.ACTIVE:
            self._dispatch(req, node, now_ms)
        elif self._mode is Mode.PENDING:
            req.deadline_ms = now_ms + self.settings.activation_wait_ms
            self._parked.append(req)
        else:
            self._fail(req.id, self.not_controller())

    def forget(self, request_id: int) -> None:
        """The caller of `request_id` gave up: if it is still parked, never run it."""
        if any(r.id == request_id for r in self._parked):
            self._forgotten.add(request_id)
        self._reads.pop(request_id, None)
        if any(r.id == request_id for r, _ in self._behind):
            self._behind = deque(e for e in self._behind if e[0].id != request_id)

    def reads_confirmed(self, reads: Iterable[tuple[int, int]]) -> None:
        """The Raft node confirmed these (read id, read index) pairs (`Ready.reads`):
        each is answered once the committed state reaches its index."""
        for read_id, index in reads:
            entry = self._reads.get(read_id)
            if entry is not None:  # else failed meanwhile (leadership lost) or forgotten
                self._reads[read_id] = (entry[0], index)
        self._serve_confirmed_reads()

    def tick(self, node: NodeAccess, now_ms: int) -> None:
        """Timers: catch up with the node's role, expire orphans and parked requests,
        fence brokers whose session timed out, write the next batch of partition
        changes a broker event owes (`owes_partition_moves`: more to write)."""
        self._sync_leadership(node, now_ms)
        expired = self._purgatory.expire(now_ms)
        if expired:
            log.warning("orphans_expired", count=expired)
        while self._parked and self._parked[0].deadline_ms <= now_ms:
            self._fail(self._parked.popleft().id, self.not_controller())
        if self._behind:
            self._expire_behind_reads(now_ms, node.high_watermark)
        if self._mode is Mode.ACTIVE:
            result = self.state.cluster.fence_stale_brokers(now_ms)
            if result.records:
                for broker_id in result.response:
                    log.info("broker_fenced", broker=broker_id, reason="session_timeout",
                             session_timeout_ms=self.settings.session_timeout_ms)
                self.brokers_timed_out += len(result.response)
                self._append(result.records, None, EMPTY_ORIGIN, node, None, now_ms)
            moves = self._mover.step()
            if moves:
                self._append_encoded(moves, None, EMPTY_ORIGIN, node, None, now_ms)
            self._maybe_no_op(node, now_ms)

    def next_tick_ms(self, now_ms: int) -> int:
        """When `tick` is next needed (ticking sooner is harmless). Within
        `tick_interval_ms` while anything waits on a timer or owes work: becoming
        active, requests parked until then, reads waiting to catch up, answers
        waiting for a commit (an orphan's wait runs out), partition moves owed.
        Otherwise, when active, the next idle no-op or broker session expiry; and
        at least every `IDLE_TICK_MS` (the role is re-read from the node at every
        tick, a safety net behind the leader-change events)."""
        if (self._mode is Mode.PENDING or self._parked or self._behind or self._purgatory
                or self.owes_partition_moves):
            return now_ms + self.settings.tick_interval_ms
        due_ms = now_ms + IDLE_TICK_MS
        if self._mode is Mode.ACTIVE:
            no_op_ms = self._no_op_due_ms()
            if no_op_ms is not None:
                due_ms = min(due_ms, no_op_ms)
            cluster = self.state.cluster
            # No unfenced broker at the last check: one unfenced since expires a
            # session after its heartbeat at the earliest.
            expiry_ms = cluster.session_deadline_ms
            due_ms = min(due_ms, expiry_ms if expiry_ms is not None
                         else now_ms + cluster.session_timeout_ms + 1)
        return max(now_ms, due_ms)

    def _note_committed_level(self, batch: RecordBatch) -> None:
        """A committed batch lowered a feature level (an unsafe downgrade): snapshot at
        once, so nodes that load it start without what the level no longer keeps."""
        lowered = self.state.features.lowered_at()
        if batch.base_offset <= lowered <= batch.last_offset and self.snapshots is not None:
            log.warning("feature_level_lowered", offset=lowered,
                        action="writing a snapshot without the newer data")
            self.snapshots.snapshot_next()

    def _no_op_due_ms(self) -> int | None:
        """When an idle no-op is due (None: never, at this level or configuration)."""
        idle_ms = self.settings.metadata_max_idle_interval_ms
        if idle_ms == 0 or not enabled(Feature.IDLE_NO_OPS,
                                       self.state.features.finalized_level(METADATA_VERSION)):
            return None
        return self._last_append_ms + idle_ms

    def _maybe_no_op(self, node: NodeAccess, now_ms: int) -> None:
        due_ms = self._no_op_due_ms()
        if due_ms is None or now_ms < due_ms:
            return
        self.no_ops_written += 1
        self._append((make_record(NoOpRecord()),), None, EMPTY_ORIGIN, node, None, now_ms)

    def leader_changed(self, leader_id: int | None, epoch: int, now_ms: int) -> None:
        if leader_id == self.settings.node_id:
            if self._mode is not Mode.STANDBY and self._epoch != epoch:
                self._lose_leadership(None, now_ms)
            if self._mode is Mode.STANDBY:
                self._become_pending(epoch)
            return
        if self._mode is not Mode.STANDBY:
            self._lose_leadership(leader_id, now_ms)
        self._leader_id = leader_id
        log.info("leader_change", node=self.settings.node_id, leader=leader_id, epoch=epoch)

    def committed(self, batches: Sequence[RecordBatch], now_ms: int) -> bool:
        """The quorum committed `batches` (in log order). True when a tick should run
        soon: our LeaderChange committed, so this node may become active."""
        # Batches replayed here get one registry snapshot, after the last of them
        # (only the committed offset is ever read or reverted to), not one each: while
        # a snapshot file is written every registry snapshot after its offset stays,
        # and each one makes reads at that offset slower. `unsnapped` is the last
        # offset replayed without one (-1: none).
        unsnapped = -1
        tick_soon = False
        for batch in batches:
            if batch.base_offset < self._replayed_next:
                if self._mode is Mode.STANDBY and batch.next_offset <= self._replayed_next:
                    pass  # already in the state (loaded from a snapshot)
                else:
                    key = self._uncommitted.pop(batch.base_offset, None)
                    if key is None or not key.matches(batch):
                        # What committed is not what we appended: we lost leadership
                        # without being told yet. Our uncommitted state is wrong.
                        if unsnapped >= 0:  # the revert target must exist
                            self.registry.create_snapshot(unsnapped)
                        self._lose_leadership(None, now_ms)
                        self._replay_committed(batch)
                        unsnapped = batch.last_offset
            else:
                self._replay_committed(batch)
                unsnapped = batch.last_offset
            self._committed_next = batch.next_offset
            self._last_committed_epoch = batch.epoch
            self._purgatory.committed(batch, now_ms)
            self._note_committed_level(batch)
            if self.snapshots is not None and self.snapshots.committed(
                    sum(len(r) for r in batch.records), self._committed_next, batch.epoch,
                    now_ms) and unsnapped == batch.last_offset:
                # A snapshot starts here: it reads the registry snapshot at this offset.
                self.registry.create_snapshot(unsnapped)
                unsnapped = -1
            if self._mode is Mode.PENDING and batch.epoch == self._epoch:
                # Our LeaderChange committed: everything before it is replayed.
                self._epoch_started = True
                tick_soon = True
        if unsnapped >= 0:
            self.registry.create_snapshot(unsnapped)
        if batches:
            self.release_history()
            if self._reads:
                self._serve_confirmed_reads()
            if self._behind:
                self._serve_caught_up_reads()
        return tick_soon

    def _serve_caught_up_reads(self) -> None:
        for req, _ in self._take_behind(lambda req, _: req.min_offset <= self._committed_next):
            self._serve_read(req, None)

    def _expire_behind_reads(self, now_ms: int, high_watermark: int | None) -> None:
        """Reads whose wait for `min_offset` is over: refused, naming how far behind."""
        for req, _ in self._take_behind(lambda _, deadline_ms: deadline_ms <= now_ms):
            self._fail(req.id, BehindError(self._committed_next, req.min_offset,
                                           high_watermark))

    def _take_behind(self, due: Callable[[Request, int], bool]) -> list[tuple[Request, int]]:
        """Remove and return the waiting reads `due` says are done waiting, in order."""
        taken = [entry for entry in self._behind if due(*entry)]
        if taken:
            self._behind = deque(entry for entry in self._behind if not due(*entry))
        return taken

    def load_snapshot(self, end_offset: int, epoch: int, records: Iterable[bytes]) -> None:
        """Replace the whole state with a snapshot's encoded records covering
        [0, end_offset), all replayed at its last offset."""
        assert self._mode is Mode.STANDBY, "a leader never loads a snapshot"
        if self.snapshots is not None:
            self.snapshots.reset()
        self.registry.reset()
        count = 0

        def counted() -> Iterator[bytes]:
            nonlocal count
            for record in records:
                count += 1
                yield record

        self.state.replay_encoded(counted(), end_offset - 1, step=0)
        self.registry.create_snapshot(end_offset - 1)
        self._committed_next = self._replayed_next = end_offset
        self._last_committed_epoch = epoch
        log.info("snapshot_loaded", end_offset=end_offset, records=count)

    def shut_down(self) -> None:
        """The controller stops: every waiting request gets an answer."""
        self._purgatory.fail_all()
        self._fail_reads(NotControllerError(None, None))
        for req in self._parked:
            self._fail(req.id, NotControllerError(None, None))
        self._parked.clear()

    def release_history(self) -> None:
        """Drop registry snapshots below the committed offset (and below the offset
        a snapshot being written still reads)."""
        keep = self._committed_next - 1
        pinned = None if self.snapshots is None else self.snapshots.pinned_offset
        self.registry.delete_snapshots_up_to(keep if pinned is None else min(keep, pinned))
        assert self.registry.has_snapshot(keep), self._committed_next

    # ------------------------------------------------------------------ answers

    def _answer(self, request_id: int | None, value: Any, commit_ms: int | None = None,
                read_offset: int | None = None) -> None:
        if request_id is not None:
            self._out.append(Answer(request_id, value, commit_ms, read_offset))

    def _fail(self, request_id: int | None, error: BaseException) -> None:
        if request_id is not None:
            self._out.append(Fail(request_id, error))

    # ------------------------------------------------------------------ writes

    def _dispatch(self, req: Request, node: NodeAccess, now_ms: int) -> None:
        if not req.is_write:
            self._start_read(req, node, now_ms)
            return
        run = req.op.run
        assert run is not None
        # The request-result table is a metadata.version 4 feature (levels.py): below
        # it, a retried write is not recognised (at-least-once, as before 0.3.0).
        remember = req.codec is not None and bool(req.origin.request_id) and enabled(
            Feature.REQUEST_RESULTS, self.state.features.finalized_level(METADATA_VERSION))
        if remember and self._answer_retry(req):
            return
        try:
            generated = run(req.ctx, req.args, node.next_offset, now_ms)
            # The records' bytes: as the manager wrote them, or encoded now.
            encoded = generated.encoded
            if remember and encoded:
                assert req.codec is not None
                result = self.state.requests.result_record(
                    req.origin.principal, req.origin.request_id, req.op.stored_name, now_ms,
                    req.codec.encode(generated.response))
                encoded = (*encoded, encode_record(result))
        except Exception as exc:
            # A bug in a manager; nothing was replayed or appended.
            log.exception("generate_failed", name=req.name)
            self._fail(req.id, exc)
            return
        self._append_encoded(encoded, generated.response, req.origin, node, req.id, now_ms)

    def _answer_retry(self, req: Request) -> bool:
        """If `req` repeats a remembered write, answer it as the original was (once
        that one's batch commits) and return True."""
        seen = self.state.requests.lookup(req.origin.principal, req.origin.request_id)
        if seen is None:
            return False
        assert req.codec is not None
        if seen.method != req.op.stored_name:
            self._fail(req.id, RequestIdReusedError(
                f"request id {req.origin.request_id!r} was used by a {seen.method} request; "
                "a request id names one write"))
            return True
        log.info("request_retried", name=req.name, request_id=req.origin.request_id,
                 offset=seen.offset)
        if seen.result_dropped:
            self._fail(req.id, ResultNotKeptError(
                f"request {req.origin.request_id!r} was applied (offset {seen.offset}); its "
                "answer was too large to keep, and the work is not done twice"))
            return True
        value = req.codec.decode(seen.response)
        if seen.offset < self._committed_next:
            self._answer(req.id, value, read_offset=self._committed_next)
            return True
        # Still uncommitted: one of our own batches (we are active) holds it.
        key = next(k for k in self._uncommitted.values()
                   if k.base_offset <= seen.offset <= k.last_offset)
        self._wait_for(key, value, req.id, None)
        return True

    def _append(self, records: Sequence[MetadataRecord], response: Any, origin: BatchOrigin,
                node: NodeAccess, request_id: int | None, now_ms: int) -> None:
        """Replay and append `records`; `request_id` None: nobody waits for the answer."""
        self._append_encoded([encode_record(r) for r in records], response, origin, node,
                             request_id, now_ms)

    def _append_encoded(self, encoded: Sequence[bytes], response: Any, origin: BatchOrigin,
                        node: NodeAccess, request_id: int | None, now_ms: int) -> None:
        """`_append` of records given as their bytes only."""
        assert self._mode is Mode.ACTIVE
        if not encoded:
            self._answer_after_last(response, request_id)
            return
        size = sum(len(r) for r in encoded)
        if len(encoded) > MAX_RECORDS_PER_BATCH or size > MAX_APPEND_BYTES:
            self._fail(request_id, RequestTooLargeError(
                f"the request needs {len(encoded)} records ({size} bytes) in one batch; the "
                f"limit is {MAX_RECORDS_PER_BATCH} records and {MAX_APPEND_BYTES} bytes: "
                "split it into smaller requests"))
            return
        base = node.next_offset
        # Only our own appends go to the log while we are active.
        assert base == self._replayed_next, (base, self._replayed_next)
        last = base + len(encoded) - 1
        self._last_append_ms = now_ms
        try:
            # From the bytes, as the followers replay them (the same fast path).
            self.state.replay_encoded(encoded, base)
        except MetadataReplayError as exc:
            self.registry.revert_to_snapshot(base - 1)
            log.error("replay_refused", offset=base, error=str(exc))
            self._fail(request_id, exc)
            return
        self.registry.create_snapshot(last)
        try:
            appended = node.append(encoded, origin)
        except (NotLeaderError, ProposalRejectedError) as exc:
            self.registry.revert_to_snapshot(base - 1)
            if isinstance(exc, NotLeaderError):
                self._lose_leadership(exc.leader_id, now_ms)
                self._fail(request_id, self.not_controller())
            elif isinstance(exc, LeadershipTransferringError):
                # Still the leader, handing over: the write goes to the next one.
                self._fail(request_id, NotControllerError(None, None))
            else:
                self._fail(request_id, RequestTooLargeError(str(exc)))
            return
        assert appended == base, (appended, base)
        self._replayed_next = last + 1
        key = BatchKey(base, last, self._epoch)
        self._uncommitted[base] = key
        self._last_key = key
        if request_id is not None:
            self._wait_for(key, response, request_id, now_ms)

    def _answer_after_last(self, response: Any, request_id: int | None) -> None:
        key = self._last_key
        if key is not None and key.base_offset >= self._committed_next:
            if request_id is not None:
                self._wait_for(key, response, request_id, None)
        else:
            self._answer(request_id, response, read_offset=self._committed_next)

    def _wait_for(self, key: BatchKey, response: Any, request_id: int,
                  appended_ms: int | None) -> None:
        def success(now_ms: int) -> None:
            self._answer(request_id, response,
                         None if appended_ms is None else max(0, now_ms - appended_ms),
                         read_offset=key.last_offset + 1)

        def lost() -> None:
            self._fail(request_id, self.not_controller())

        def unknown() -> None:
            self._fail(request_id, ControllerTimeoutError(
                "leadership changed before the write was known to be committed; it may "
                "still be applied: check the state before retrying"))

        self._purgatory.add(Waiter(key, success, lost, unknown))

    # ------------------------------------------------------------------ reads

    def _start_read(self, req: Request, node: NodeAccess, now_ms: int) -> None:
        """A linearizable read: ask the node to confirm our leadership first."""
        try:
            node.read_index(req.id)
        except NotLeaderError as exc:
            self._lose_leadership(exc.leader_id, now_ms)
            self._fail(req.id, self.not_controller())
            return
        except ProposalRejectedError as exc:
            self._fail(req.id, ControllerBusyError(f"{req.name}: {exc}; retry later"))
            return
        self._reads[req.id] = (req, None)

    def _serve_confirmed_reads(self) -> None:
        due = [rid for rid, (_, index) in self._reads.items()
               if index is not None and index <= self._committed_next]
        for rid in due:
            self._serve_read(self._reads.pop(rid)[0], None)

    def _serve_read(self, req: Request, now_ms: int | None) -> None:
        """Answer a read from the committed state (a registry snapshot exists at
        `committed_next - 1`: the invariant of `__init__`), once that is at least at
        the read's `min_offset`: until then it waits in `_behind` (`now_ms` None: it
        was confirmed by a commit, the time is the one it arrived at)."""
        query = req.op.query
        assert query is not None
        offset = self._committed_next
        if offset < req.min_offset:
            if len(self._behind) >= self.settings.max_queued_events:
                self._fail(req.id, ControllerBusyError(
                    f"{len(self._behind)} reads already wait for this controller to catch "
                    "up; retry later, or at another controller"))
                return
            start_ms = req.enqueued_ms if now_ms is None else now_ms
            self._behind.append((req, start_ms + self.settings.stale_read_wait_ms))
            return
        try:
            result = query(req.ctx, req.args, offset - 1)
        except Exception as exc:
            log.exception("read_failed", name=req.name)
            self._fail(req.id, exc)
            return
        self._answer(req.id, result, read_offset=offset)

    def _fail_reads(self, error: BaseException) -> None:
        reads, self._reads = self._reads, {}
        for rid in reads:
            self._fail(rid, error)

    # ------------------------------------------------------------------ commits

    def _replay_committed(self, batch: RecordBatch) -> None:
        """Replay a committed batch; the caller creates the registry snapshot."""
        assert batch.base_offset == self._replayed_next, (
            f"committed batch at {batch.base_offset} but the state is at {self._replayed_next}")
        try:
            self.state.replay_encoded(batch.records, batch.base_offset)
        except UnsupportedFeatureLevelError as exc:
            # Not a bug: software too old for the cluster. One clear line, then stop.
            log.critical("unsupported_metadata_version", offset=batch.base_offset,
                         error=str(exc))
            raise
        except Exception:
            # The committed log does not fit our state: stop rather than diverge.
            log.critical("replay_failed", offset=batch.base_offset, epoch=batch.epoch,
                         exc_info=True)
            raise
        self._replayed_next = batch.next_offset

    # ------------------------------------------------------------------ leadership

    def _become(self, mode: Mode) -> None:
        assert mode in MODE_TRANSITIONS[self._mode], (self._mode, mode)
        self._mode = mode

    def _sync_leadership(self, node: NodeAccess, now_ms: int) -> None:
        """Catch up with the node's role (a resignation is not reported as a leader
        change: the leader id stays ours)."""
        epoch = node.leader_epoch
        if self._mode is not Mode.STANDBY and epoch != self._epoch:
            self._lose_leadership(node.known_leader_id, now_ms)
        if self._mode is Mode.STANDBY and epoch is not None:
            self._become_pending(epoch)
        self._maybe_activate(node, now_ms)

    def _become_pending(self, epoch: int) -> None:
        self._become(Mode.PENDING)
        self._epoch = epoch
        self._leader_id = self.settings.node_id
        self._epoch_started = self._last_committed_epoch == epoch
        log.info("leader_elected", node=self.settings.node_id, epoch=epoch,
                 committed=self._committed_next)

    def _maybe_activate(self, node: NodeAccess, now_ms: int) -> None:
        if not (self._mode is Mode.PENDING and self._epoch_started
                and node.leader_epoch == self._epoch):
            return
        assert node.next_offset == self._replayed_next == self._committed_next, (
            node.next_offset, self._replayed_next, self._committed_next)
        self._become(Mode.ACTIVE)
        self.activations += 1
        self.state.cluster.activate(now_ms)
        self._mover.activate()
        log.info("controller_active", node=self.settings.node_id, epoch=self._epoch,
                 offset=self._committed_next)
        if self.state.features.finalized_level(METADATA_VERSION) == 0:
            # A fresh cluster: the first active controller writes the feature levels.
            records = self.state.features.bootstrap_records(
                self.settings.bootstrap_metadata_version)
            self._append(records, None, EMPTY_ORIGIN, node, None, now_ms)
            log.info("bootstrap_features", records=len(records))
        parked, self._parked = self._parked, deque()
        forgotten, self._forgotten = self._forgotten, set()
        for req in parked:
            if req.id not in forgotten:
                self._dispatch(req, node, now_ms)

    def _lose_leadership(self, new_leader: int | None, now_ms: int) -> None:
        if self._mode is Mode.STANDBY:
            return
        was = self._mode
        self._become(Mode.STANDBY)
        self._mover.reset()
        self._leader_id = new_leader if new_leader != self.settings.node_id else None
        reverted = self._replayed_next - self._committed_next
        self.state.revert_to_committed(self._committed_next - 1)
        self._replayed_next = self._committed_next
        self._uncommitted.clear()
        self._last_key = None
        self._purgatory.orphan(now_ms + self.settings.orphan_timeout_ms)
        # A read changes nothing: "not controller" is always safe to retry elsewhere.
        self._fail_reads(self.not_controller())
        parked, self._parked = self._parked, deque()
        self._forgotten.clear()
        for req in parked:
            self._fail(req.id, self.not_controller())
        log.info("leadership_lost", node=self.settings.node_id, epoch=self._epoch, was=was.value,
                 new_leader=new_leader, committed=self._committed_next, reverted_records=reverted,
                 waiting=len(self._purgatory))
