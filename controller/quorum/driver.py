"""`RaftDriver`: one `RaftNode` on asyncio + grpc.aio, over a real data directory.

Concurrency model: a single task (`_run`) owns the node and the log. Everything
else -- gRPC handlers, answers from peers, the ticker, `propose` -- only puts
events into one bounded inbox and awaits a future. After each batch of events
(up to `max_events_per_ready`) the task drains `node.ready()` and does the work
in the order `Ready` prescribes:

1. quorum state written durably (atomic file + fsync) before anything else;
2. the log flushed -- one fsync for every batch appended since the last flush,
   however many proposals or fetched batches that is (group commit) -- and the
   flushed offset reported back to the node;
3. messages: responses complete the waiting handler's future, requests go to
   the peers (fetches on one stream per peer, the rest as unary calls) and
   their answers come back through the inbox;
4. committed batches handed in order to the listener, and proposals answered;
5. leadership changes reported; fetched snapshots made durable and loaded.

The fsync runs in a worker thread (`asyncio.to_thread`) while the node task, the
log's only writer, waits for it: the event loop keeps accepting requests and
answers meanwhile, and they pile up in the inbox, which is exactly what makes the
next fsync cover many of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from controller.log import get_logger
from controller.logformat import EMPTY_ORIGIN, BatchOrigin, RecordBatch, SnapshotId
from controller.quorum.bootstrap import snapshot_voters, starting_voters
from controller.quorum.contracts import CommitListener, DriverStatus, LocalLogView
from controller.quorum.driver_config import DriverConfig
from controller.quorum.errors import NotLeaderError, ProposalRejectedError, proposal_refused
from controller.quorum.log_adapter import DurableRaftLog, FileSnapshotStore
from controller.quorum.peers import PeerClients
from controller.quorum.proposals import PendingProposals, ProposalLostError
from controller.quorum.service import (
    DriverStoppedError,
    QueueFullError,
    ReplyWaiters,
    request_key,
)
from controller.quorum.wire import StoredBatchCache
from controller.raft.errors import CommittedHistoryCutError
from controller.raft.messages import (
    REQUEST_TYPES,
    EndQuorumEpochRequest,
    Errors,
    FetchRequest,
    FetchResponse,
    Message,
    Request,
    Response,
)
from controller.raft.node import RaftNode
from controller.raft.ready import ProposeError, Ready, TransferError
from controller.raft.roles import Role
from controller.raft.voters import Voter, VoterChangeResult
from controller.storage import quorum_state as qs_file
from controller.storage.errors import StorageError
from controller.storage.meta_properties import DataDir, check_meta_properties
from controller.wake_timer import WakeTimer

log = get_logger(__name__)

__all__ = [
    "DriverConfig",
    "NodeTaskAccess",
    "NotLeaderError",
    "ProposalLostError",
    "ProposalRejectedError",
    "RaftDriver",
]


class NodeTaskAccess:
    """What work queued with `RaftDriver.run_on_node_task` may do while it runs on the
    node task. Nothing else touches the node or the log meanwhile, so the offset
    `append` returns is the one `next_offset` said, and the caller may act on it (the
    controller replays its records at those offsets) before any other event."""

    def __init__(self, driver: RaftDriver) -> None:
        self._driver = driver

    def _node(self) -> RaftNode:
        node = self._driver._node
        assert node is not None, "driver not started"
        return node

    @property
    def next_offset(self) -> int:
        """The offset the first record of the next `append` will get."""
        return self._node().log.end_offset

    @property
    def leader_epoch(self) -> int | None:
        """Our epoch while this node leads (may append), else None."""
        node = self._node()
        return node.epoch if node.role is Role.LEADER else None

    @property
    def known_leader_id(self) -> int | None:
        """The leader to name to clients: never this node unless it leads."""
        return self._node().advertised_leader_id()

    @property
    def high_watermark(self) -> int | None:
        return self._node().high_watermark

    def append(self, records: Sequence[bytes], origin: BatchOrigin) -> int:
        """Append one batch now; its base offset. Raises `NotLeaderError` or
        `ProposalRejectedError` (nothing appended)."""
        node = self._node()
        result = node.propose(tuple(records), self._driver._clock_ms(), origin)
        if result.error is ProposeError.NOT_LEADER:
            leader = result.leader
            raise NotLeaderError(leader.leader_id if leader else None, result.epoch)
        if result.error is not None:
            raise proposal_refused(result.error)
        assert result.base_offset is not None
        return result.base_offset

    def transfer_leadership(self, target: int) -> TransferError | None:
        """Start handing leadership to voter `target` (`RaftNode.transfer_leadership`):
        None if under way; appends are refused (`LeadershipTransferringError`) until
        it ends."""
        node = self._node()
        error = node.transfer_leadership(target, self._driver._clock_ms())
        if error is None:
            log.info("leadership_transfer_started", node=node.node_id, epoch=node.epoch,
                     target=target, log_end_offset=node.log.end_offset)
        return error

    def change_voters(self, kind: str, voter: Voter, dry_run: bool
                      ) -> tuple[VoterChangeResult, asyncio.Future[int] | None]:
        """AddVoter ("add"), RemoveVoter ("remove", by id and directory id) or
        UpdateVoter ("update") now, on this node (it must lead). When a VotersRecord was
        appended (at `result.offset`), also a future that resolves once it commits
        (`ProposalLostError` if it is cut from the log)."""
        node = self._node()
        result = node.change_voters(kind, voter, self._driver._clock_ms(), dry_run=dry_run)
        if not result.ok or result.offset is None:
            return result, None
        committed: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._driver._proposals.add(result.offset, 1, node.epoch, committed)
        log.info("voters_change", kind=kind, node=voter.node_id, directory_id=voter.directory_id,
                 endpoint=voter.endpoint or "-", offset=result.offset,
                 voters=result.voters.describe() if result.voters else "-")
        return result, committed

    def read_index(self, read_id: int) -> None:
        """Start confirming a linearizable read (ReadIndex); it comes back through
        `CommitListener.on_reads_confirmed`. Raises `NotLeaderError`, or
        `ProposalRejectedError` when too many reads wait."""
        node = self._node()
        error = node.read_index(read_id, self._driver._clock_ms())
        if error is ProposeError.NOT_LEADER:
            raise NotLeaderError(node.advertised_leader_id(), node.epoch)
        if error is not None:
            raise ProposalRejectedError(f"read refused: {error.value} (too many reads waiting)")


# Inbox events. Tuples keep the hot path cheap.
_TICK = ("tick",)
_STOP = ("stop",)
# How long a busy node task pauses the loop so threads get the GIL (`_let_others_run`).
_GIL_PAUSE_S = 0.001


class SteadyWallClock:
    """Milliseconds since the epoch that never go back or jump.

    The core uses one clock for its timers and for the batches' `append_time_ms`
    (which the log and audits read as wall-clock time). Wall time read once at
    start plus monotonic time elapsed since gives both: real timestamps, and
    timers that a wall-clock step (NTP, an operator) cannot fire early.
    """

    def __init__(self) -> None:
        self._wall_start_ms = time.time_ns() // 1_000_000
        self._mono_start_ns = time.monotonic_ns()

    def __call__(self) -> int:
        return self._wall_start_ms + (time.monotonic_ns() - self._mono_start_ns) // 1_000_000


class RaftDriver:
    def __init__(self, config: DriverConfig, listener: CommitListener | None = None, *,
                 clock_ms: Callable[[], int] | None = None,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.listener = listener if listener is not None else CommitListener()
        self._clock_ms = clock_ms if clock_ms is not None else SteadyWallClock()
        self._rng = rng if rng is not None else random.Random()
        self.batch_cache = StoredBatchCache()
        # Unbounded as a queue; what outsiders may add is bounded in `_offer`.
        # Internal events are bounded by construction (one tick at a time, one
        # reply per call in flight, a few control events) and must never be
        # refused: a lost tick or reply could stall the node.
        self._inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._waiters = ReplyWaiters()
        self._peers = PeerClients(config.voter_addresses, config.cluster_id, self.batch_cache,
                                  config.rpc_limits, config.max_inflight_per_peer, self._deliver,
                                  tls=config.tls)
        self._proposals = PendingProposals()
        self._proposal_slots = asyncio.Semaphore(config.max_pending_proposals)
        self._node: RaftNode | None = None
        self._log: DurableRaftLog | None = None
        self._snapshots: FileSnapshotStore | None = None
        self._qs_file: qs_file.QuorumStateFile | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # EndQuorumEpoch calls of a resigning leader, awaited (briefly) on stop.
        self._handover_sends: set[asyncio.Task[None]] = set()
        self._tick_queued = False
        # The timer that queues the next tick (`_schedule_tick`).
        self._tick_timer = WakeTimer(self._tick_due)
        # How long the node task handles events before its Ready, and how long it may
        # stay busy before it pauses the loop (`_let_others_run`).
        self._turn_budget_ns = config.max_events_time_ms * 1_000_000
        # When the node task last let the loop block (see `_let_others_run`).
        self._busy_since_ns = time.monotonic_ns()
        # Requests and proposals queued and not yet handed to the node.
        self._outside_events = 0
        self._running = False
        self._failure: BaseException | None = None
        self._applied_offset = 0
        # Running totals for metrics (DriverStatus).
        self._fetches_served = self._records_fetched = self._flushes = self._ticks = 0
        self._flush_seconds = 0.0
        self._role = Role.FOLLOWER
        self._node_access = NodeTaskAccess(self)
        # The highest high watermark a fetch response reported (-1: none yet). An
        # observer compares it with what it applied to know it has caught up.
        self.fetched_high_watermark = -1
        self.stopped = asyncio.Event()

    # ---------------------------------------------------------------- lifecycle

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def cluster_id(self) -> str:
        return self.config.cluster_id

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    async def start(self) -> None:
        """Open the data directory and start the node task and the ticker."""
        assert not self._running and self._node is None, "start() twice"
        cfg = self.config
        data_dir = DataDir(Path(cfg.data_dir))
        meta = check_meta_properties(data_dir.root, cfg.cluster_id, cfg.node_id)
        self._qs_file = qs_file.QuorumStateFile(data_dir.quorum_state)
        stored = self._qs_file.read()
        self._log = DurableRaftLog.open(data_dir, cfg.log_config, cfg.on_log_damage)
        repair = self._log.pending_repair
        if repair is not None:
            log.error("log_repair_pending", node=cfg.node_id,
                      repair_to_offset=repair.repair_to_offset,
                      log_end_offset=self._log.end_offset, damage=repair.reason,
                      action="taking no part in elections until the lost records are "
                      "fetched again from the leader")
        self._log.cache = self.batch_cache
        if cfg.tiered:
            # Until the tier says what it holds, no local segment may go.
            self._log.retention_floor = 0
        self._snapshots = FileSnapshotStore(data_dir.snapshot_dir)
        self._node = RaftNode(cfg.raft_config(directory_id=meta.directory_id), self._log,
                              self._snapshots, self._rng, quorum_state=stored,
                              now_ms=self._clock_ms(),
                              voters=starting_voters(meta, data_dir, self._log.snapshot_id),
                              repair_to_offset=None if repair is None else repair.repair_to_offset)
        self._applied_offset = self._log.start_offset  # the snapshot's end
        self._running = True
        self._tasks = [asyncio.create_task(self._run(), name=f"raft-node-{cfg.node_id}")]
        self._schedule_tick()
        log.info("raft_started", node=cfg.node_id, epoch=self._node.epoch,
                 log_start_offset=self._log.start_offset, log_end_offset=self._log.end_offset)

    async def stop(self, *, resign: bool = True) -> None:
        """Clean shutdown: a leader hands over (EndQuorumEpoch) first, then stop."""
        if not self._running:
            return
        if resign and self._failure is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._inbox.put_nowait(("resign", done))
            with contextlib.suppress(TimeoutError, DriverStoppedError):
                await asyncio.wait_for(asyncio.shield(done), self.config.request_timeout_ms / 1e3)
                # Give the EndQuorumEpoch calls a moment to leave and be answered.
                pending = [t for t in self._handover_sends if not t.done()]
                if pending:
                    await asyncio.wait(pending, timeout=self.config.resign_wait_ms / 1e3)
        self._running = False
        self._inbox.put_nowait(_STOP)
        await self._shutdown_tasks()

    async def _shutdown_tasks(self) -> None:
        self._tick_timer.cancel()
        node_task = self._tasks[0] if self._tasks else None
        if node_task is not None and node_task is not asyncio.current_task():
            # Let the node task reach _STOP rather than cancel it mid-flush: a
            # cancelled await does not stop the fsync thread, which would then
            # race with the final flush and close below.
            await asyncio.wait([node_task], timeout=self.config.request_timeout_ms / 1e3)
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        stopped = DriverStoppedError("raft driver stopped")
        self._waiters.fail_all(stopped)
        self._proposals.fail_all(stopped)
        await self._peers.close()
        if self._log is not None:
            with contextlib.suppress(Exception):
                self._log.flush()
            self._log.close()
        self.stopped.set()

    # ---------------------------------------------------------------- public API

    async def propose(self, records: Sequence[bytes], origin: BatchOrigin = EMPTY_ORIGIN,
                      timeout_s: float | None = None) -> int:
        """Append `records` as one batch; returns the offset of its last record once
        committed. Raises `NotLeaderError`, `ProposalRejectedError`,
        `ProposalLostError`, `QueueFullError`, `DriverStoppedError`, or
        `TimeoutError` (outcome unknown: it may still commit)."""
        self._check_running()
        timeout = timeout_s if timeout_s is not None else self.config.propose_timeout_ms / 1e3
        async with self._proposal_slots:
            fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._offer(("propose", tuple(records), origin, fut))
            # On timeout wait_for cancels `fut`; the node then skips it.
            return await asyncio.wait_for(fut, timeout)

    def run_on_node_task(self, work: Callable[[NodeTaskAccess], None]) -> None:
        """Queue `work` to run on the node task, in order with every other event; it
        gets a `NodeTaskAccess` (append with the offset known at once). Not bounded
        here: the caller bounds what it queues. `work` must not raise: an exception
        stops the node, like any broken invariant."""
        self._check_running()
        self._inbox.put_nowait(("work", work))

    async def compact(self, snapshot_id: SnapshotId) -> None:
        """The state machine durably wrote `snapshot_id` (a committed offset) into
        `snapshot_dir`: drop the log below it. Fetchers behind it get the snapshot."""
        self._check_running()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inbox.put_nowait(("compact", snapshot_id, fut))
        await fut

    @property
    def snapshot_dir(self) -> Path:
        return DataDir(Path(self.config.data_dir)).snapshot_dir

    # ------------------------------------------------- the remote tier's view of the log

    def local_log_view(self) -> LocalLogView:
        """The local log as the tier copier and local retention see it now."""
        node, log = self._node, self._log
        assert node is not None and log is not None, "driver not started"
        return LocalLogView(tuple(log.segment_infos()), log.retained_start_offset,
                            log.start_offset, log.snapshot_id.epoch, node.high_watermark,
                            node.flushed_offset)

    def read_committed_range(self, from_offset: int, to_offset: int,
                             max_bytes: int) -> list[bytes]:
        """Stored batches in [from_offset, to_offset), both batch boundaries at or
        below the high watermark that the local log holds."""
        node, log = self._node, self._log
        assert node is not None and log is not None, "driver not started"
        assert to_offset <= node.high_watermark, (to_offset, node.high_watermark)
        return log.read_committed_range(from_offset, to_offset, max_bytes)

    def read_committed_batches(self, from_offset: int, to_offset: int,
                               max_bytes: int) -> list[RecordBatch]:
        """Decoded committed batches from the one holding `from_offset` to below
        `to_offset` (at most the high watermark), for watchers; `OffsetOutOfRangeError`
        / ValueError when the local log no longer (or not yet) holds `from_offset`."""
        node, log = self._node, self._log
        if node is None or log is None:
            raise DriverStoppedError("the Raft node is not running")
        to_offset = min(to_offset, node.high_watermark)
        if from_offset >= to_offset:
            return []
        return log.read_batches_below(from_offset, to_offset, max_bytes)

    def local_start_offset(self) -> int:
        """The first offset the local log holds (segments kept for the tier included)."""
        log = self._log
        if log is None:
            raise DriverStoppedError("the Raft node is not running")
        return log.retained_start_offset

    async def apply_retention_floor(self, floor: int | None) -> int:
        """Let local retention delete segments below `floor` (and the snapshot), on
        the node task; returns the local log's first offset."""
        self._check_running()
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def work(_access: NodeTaskAccess) -> None:
            # The deletion is done even if the caller stopped waiting (cancelled at
            # shutdown): setting a cancelled future's result would fail the node.
            assert self._log is not None
            try:
                start = self._log.apply_retention_floor(floor)
            except StorageError as exc:
                if not fut.done():
                    fut.set_exception(exc)
                return
            if not fut.done():
                fut.set_result(start)

        self._inbox.put_nowait(("work", work))
        return await fut

    def _repaired(self, node: RaftNode) -> None:
        assert self._log is not None
        self._log.repair_done()
        log.warning("log_repaired", node=self.node_id, log_end_offset=self._log.end_offset,
                    high_watermark=node.high_watermark, action="voting again")

    def status(self) -> DriverStatus:
        node, log = self._node, self._log
        assert node is not None and log is not None, "driver not started"
        role = node.role.value if node.is_voter or node.role is Role.LEADER else "observer"
        return DriverStatus(self.node_id, role, node.epoch, node.leader_id, node.high_watermark,
                            log.end_offset, node.flushed_offset, log.start_offset,
                            self._applied_offset, node.replica_progress or (),
                            node.directory_id, node.voters, self._fetches_served,
                            self._records_fetched, self._flushes, self._flush_seconds,
                            None if log.pending_repair is None
                            else log.pending_repair.repair_to_offset,
                            node.transfer_target, node.transfers_abandoned, self._ticks)

    def read_log(self, from_offset: int, max_bytes: int) -> list[bytes]:
        """Stored batches of this node's log (committed or not) from `from_offset`."""
        assert self._log is not None, "driver not started"
        return self._log.read_stored(from_offset, max_bytes)

    @property
    def dropped_messages(self) -> dict[str, int]:
        return dict(self._peers.dropped)

    def fetches_streamed_to(self, peer: int) -> bool:
        """Whether this node's fetches to `peer` go over a live FetchStream (not
        unary Fetch calls): diagnostics and tests."""
        return self._peers.streaming_to(peer)

    # ------------------------------------------------------- service side (RequestSink)

    def reply_timeout_s(self, req: Request) -> float:
        cfg = self.config
        if isinstance(req, FetchRequest):
            # A parked fetch is answered within its wait; leave slack for a busy loop.
            return (min(req.max_wait_ms, cfg.fetch_max_wait_ms) + cfg.reply_slack_ms) / 1e3
        return cfg.reply_slack_ms / 1e3

    async def submit_request(self, req: Request, timeout_s: float) -> Response:
        self._check_running()
        key = request_key(req)
        fut = self._waiters.register(key)
        try:
            self._offer(("request", req))
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._waiters.discard(key, fut)

    def _offer(self, event: tuple[Any, ...]) -> None:
        """Queue an event from outside (a request, a proposal), within the bound."""
        if self._outside_events >= self.config.max_inbox_events:
            raise QueueFullError("raft inbox full, retry later")
        self._outside_events += 1
        self._inbox.put_nowait(event)

    def _check_running(self) -> None:
        if not self._running or self._failure is not None:
            raise DriverStoppedError(f"raft node {self.node_id} is not running")

    # ---------------------------------------------------------------- node task

    def _schedule_tick(self) -> None:
        """Wake the node when its next timer is due (`RaftNode.next_deadline_ms`), not
        on a fixed period: an idle follower then ticks a few times a second (its
        fetch's timeout, its election timer), an idle leader at its parked fetches'
        deadlines, instead of a hundred times a second each. Called after every turn
        of the node task (any event may move a deadline, and only a turn can): the
        one timer follows it (`WakeTimer.wake_in`)."""
        node = self._node
        if node is None or not self._running:
            return
        # +1 ms: the node's clock counts whole milliseconds; a timer at the exact
        # deadline may see the millisecond before it and find nothing due.
        self._tick_timer.wake_in((node.next_deadline_ms() - self._clock_ms() + 1) / 1e3)

    def _tick_due(self) -> None:
        if not self._tick_queued and self._running:
            self._inbox.put_nowait(_TICK)
            self._tick_queued = True

    async def _run(self) -> None:
        inbox = self._inbox
        limit = self.config.max_events_per_ready
        budget_ns = self._turn_budget_ns
        monotonic_ns = time.monotonic_ns
        try:
            while True:
                event = await inbox.get()
                count = 0
                started_ns = monotonic_ns()
                while True:
                    if event is _STOP:
                        return
                    self._apply(event)
                    count += 1
                    # Also bounded in time: work that re-queues itself (a snapshot
                    # written in steps) or a few long events must not hold back the
                    # Ready -- flushes, fetch answers, commits -- for long.
                    if (count >= limit or inbox.empty()
                            or monotonic_ns() - started_ns >= budget_ns):
                        break
                    event = inbox.get_nowait()
                await self._drain_ready()
                self._schedule_tick()
                if inbox.empty():
                    # `inbox.get()` will wait: the loop may block in its I/O poll,
                    # which lets waiting threads take the GIL.
                    self._busy_since_ns = monotonic_ns()
                else:
                    # `inbox.get()` returns at once while events are queued, so
                    # without this the task could run on without ever letting the
                    # loop poll for I/O: work that keeps re-queueing itself (a
                    # snapshot written in steps) would starve every gRPC call --
                    # fetches, votes -- and cost the leadership.
                    await self._let_others_run()
        except asyncio.CancelledError:
            raise
        except CommittedHistoryCutError as exc:
            # An observer's committed history was rewritten upstream: whoever runs it
            # decides (a broker reloads the leader's snapshot).
            log.error("metadata_history_cut", node=self.node_id, leader=exc.leader_id,
                      applied_end_offset=exc.high_watermark, cut_to=exc.truncate_to)
            self._fail(exc)
        except BaseException as exc:
            # A broken invariant or a storage failure: stop rather than risk the log.
            log.critical("raft_failed", node=self.node_id, error=repr(exc), exc_info=True)
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        self._running = False
        asyncio.get_running_loop().call_soon(
            lambda: asyncio.ensure_future(self._shutdown_tasks()))

    async def _let_others_run(self) -> None:
        """Yield to the event loop; at least every `max_events_time_ms` of busy time,
        with a real pause. Why the pause: `sleep(0)` makes the loop poll for I/O
        with a zero timeout, which drops the GIL for an instant only -- too short
        for a thread waiting on it to wake and take it, yet long enough to reset
        CPython's switch interval. So while this task stays busy, threads that need
        the GIL -- the log flush in `asyncio.to_thread`, a follower's and the
        leader's alike -- were measured waiting up to 4 s (no flush, no commit, a
        lost leadership). A pause of `_GIL_PAUSE_S` blocks the loop's poll long
        enough for them to run; it bounds their wait to about one busy interval
        (~20 ms measured) and costs the busy task ~5% of its time."""
        now_ns = time.monotonic_ns()
        if now_ns - self._busy_since_ns >= self._turn_budget_ns:
            await asyncio.sleep(_GIL_PAUSE_S)
            self._busy_since_ns = time.monotonic_ns()
        else:
            await asyncio.sleep(0)

    def _apply(self, event: tuple[Any, ...]) -> None:
        node = self._node
        assert node is not None
        now = self._clock_ms()
        kind = event[0]
        if kind == "request":
            self._outside_events -= 1
            if isinstance(event[1], FetchRequest):
                self._fetches_served += 1
            node.receive(event[1], now)
        elif kind == "receive":
            message = event[1]
            if isinstance(message, FetchResponse) and message.error is Errors.NONE:
                self.fetched_high_watermark = max(self.fetched_high_watermark,
                                                  message.high_watermark)
                self._records_fetched += sum(len(b.records) for b in message.batches)
            node.receive(message, now)
        elif kind == "tick":
            self._tick_queued = False
            self._ticks += 1
            node.tick(now)
        elif kind == "propose":
            self._outside_events -= 1
            self._start_proposal(node, event[1], event[2], event[3], now)
        elif kind == "resign":
            node.resign(now)
            if not event[1].done():
                event[1].set_result(None)
        elif kind == "compact":
            self._compact(node, event[1], event[2], now)
        elif kind == "work":
            event[1](self._node_access)
        else:
            raise AssertionError(f"unknown event {event!r}")

    def _compact(self, node: RaftNode, sid: SnapshotId, fut: asyncio.Future[None],
                 now: int) -> None:
        # The core asserts these (a violation would be a bug in it); from the
        # outside they are bad input, refused without harming the node.
        assert self._snapshots is not None
        error: ValueError | None = None
        if sid.end_offset > min(node.high_watermark, node.flushed_offset):
            error = ValueError(f"{sid} is beyond the committed, flushed log")
        elif self._snapshots.size_bytes(sid) is None:
            error = ValueError(f"no snapshot file for {sid} in {self.snapshot_dir}")
        else:
            node.compact(sid, now)
        if fut.done():
            return  # the caller stopped waiting (cancelled at shutdown)
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(None)

    def _start_proposal(self, node: RaftNode, records: tuple[bytes, ...], origin: BatchOrigin,
                        fut: asyncio.Future[int], now: int) -> None:
        if fut.done():
            return  # the proposer gave up while queued
        result = node.propose(records, now, origin)
        if result.error is ProposeError.NOT_LEADER:
            leader = result.leader
            fut.set_exception(NotLeaderError(leader.leader_id if leader else None, result.epoch))
        elif result.error is not None:
            fut.set_exception(proposal_refused(result.error))
        else:
            assert result.base_offset is not None
            self._proposals.add(result.base_offset, len(records), result.epoch, fut)

    async def _drain_ready(self) -> None:
        node = self._node
        assert node is not None
        rounds = 0
        while not (ready := node.ready()).empty:
            await self._process(node, ready)
            rounds += 1
            if rounds % 64 == 0:
                # The core keeps producing work (a flood of fetches and flushes):
                # let the rest of the process breathe between rounds.
                await self._let_others_run()

    async def _process(self, node: RaftNode, ready: Ready) -> None:
        log, store, qsf = self._log, self._snapshots, self._qs_file
        assert log is not None and store is not None and qsf is not None
        if ready.quorum_state is not None:
            q = ready.quorum_state
            qsf.write(q)
        # Messages go out before the log flush (the quorum state, which votes and
        # epochs depend on, is already durable). Records sent before they are
        # flushed here are safe: the leader counts itself toward the high watermark
        # only up to its flushed offset, and a follower fetches (acknowledges)
        # only what it flushed. The gain: followers store a batch while the
        # leader's own fsync runs, instead of after it.
        for message in ready.messages:
            self._send(message)
        if ready.flush_to_offset is not None:
            # The fsync runs in a worker thread while this task (the log's only
            # writer) waits: the event loop keeps sending and accepting requests
            # meanwhile, and the next flush covers all of them (group commit).
            began_s = time.perf_counter()
            flushed = await asyncio.to_thread(log.flush)
            self._flushes += 1
            self._flush_seconds += time.perf_counter() - began_s
            assert flushed >= ready.flush_to_offset, (flushed, ready.flush_to_offset)
            node.flushed(ready.flush_to_offset, self._clock_ms())
        if ready.repaired:
            self._repaired(node)
        if ready.committed:
            self._commit(ready.committed)
        if ready.role is not None:
            self._role = ready.role
        if self._proposals and self._role is not Role.LEADER:
            self._proposals.truncated(log.end_offset)
        if ready.leader is not None:
            self.listener.on_leader_change(ready.leader.leader_id, ready.leader.epoch)
        if ready.voters is not None:
            for voter in ready.voters:
                # The configured address wins (the operator's word is the freshest,
                # e.g. a controller restarted on another port); the log's endpoint
                # reaches voters the configuration does not list.
                if voter.endpoint and voter.node_id != self.node_id and \
                        voter.node_id not in self.config.voter_addresses:
                    self._peers.set_address(voter.node_id, voter.endpoint)
            self.listener.on_voters_changed(ready.voters)
        if ready.snapshot_to_load is not None:
            sid = ready.snapshot_to_load
            path = store.finish_write(sid)
            self.listener.on_snapshot_loaded(sid, path)
            node.snapshot_loaded(sid, self._clock_ms(), snapshot_voters(path))
            self._applied_offset = max(self._applied_offset, sid.end_offset)
        if ready.reads:
            self.listener.on_reads_confirmed(ready.reads)

    def _send(self, message: Message) -> None:
        if not isinstance(message, REQUEST_TYPES):
            self._waiters.resolve(message)  # type: ignore[arg-type]
            return
        req: Request = message  # type: ignore[assignment]
        timeout_s = self.config.request_timeout_ms / 1e3
        if isinstance(req, FetchRequest):
            timeout_s = min(timeout_s, (req.max_wait_ms + self.config.reply_slack_ms) / 1e3)
        task = self._peers.send(req, timeout_s)
        if task is not None and isinstance(req, EndQuorumEpochRequest):
            self._handover_sends.add(task)
            task.add_done_callback(self._handover_sends.discard)

    async def _deliver(self, reply: Message) -> None:
        if self._running:
            self._inbox.put_nowait(("receive", reply))

    def _commit(self, batches: tuple[RecordBatch, ...]) -> None:
        assert batches[0].base_offset >= self._applied_offset, "commit went backwards"
        self._applied_offset = batches[-1].next_offset
        self.listener.on_commit(batches)
        self._proposals.committed(batches, self._applied_offset)
