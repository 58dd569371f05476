"""`QuorumController`: the asyncio driver of the controller's state machine
(`ControllerMachine`, machine.py) on top of the Raft driver: futures for the
callers, the node-task turns, the timers, snapshot files and metrics.

Threading. Everything that touches controller state runs on the Raft driver's node
task: queued requests (`QuorumPort.run_on_node_task`) and the commit callbacks
(`on_commit`, `on_leader_change`, `on_snapshot_loaded`). gRPC handlers only queue
a request (bounded: a full queue answers busy) and await its future. The requests
queued meanwhile run together in one node-task turn (turns.py), each write as its
own batch, so one Raft flush and replication round carries them all. Running on the
node task is what makes a write atomic: nothing happens between reading the offset
the batch will get, replaying the records there and appending them. After every
stimulus the machine's instructions settle the callers' futures.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.api.seam import (
    HIGH_WATERMARK,
    READ_OFFSET,
    Args,
    ControllerBusyError,
    ControllerTimeoutError,
    NotControllerError,
    Operation,
    ReadConsistency,
    ResultCodec,
)
from controller.logformat import SnapshotId
from controller.logformat.batch import BatchOrigin, RecordBatch
from controller.metadata import MetadataState
from controller.metadata.placement import RandomSource
from controller.quorum.contracts import CommitListener
from controller.quorum.service import DriverStoppedError
from controller.quorum_controller.events import Answer, Mode, Request
from controller.quorum_controller.machine import ControllerMachine
from controller.quorum_controller.metrics import ControllerMetrics, StateCounts
from controller.quorum_controller.ports import ControllerSettings, NodeAccess, QuorumPort
from controller.quorum_controller.snapshots import SnapshotScheduler, iter_snapshot_bytes
from controller.quorum_controller.turns import RequestQueue
from controller.raft.reads import ReadState
from controller.raft.ready import TransferError
from controller.raft.voters import Voter, VoterChangeError, VoterChangeResult, VoterSet
from controller.storage import snapshot_file as sf
from controller.wake_timer import WakeTimer
from timeline import SnapshotRegistry

# Voter changes that may succeed a moment later: retried by `change_voters`.
_RETRIED_VOTER_ERRORS = frozenset({VoterChangeError.NOT_CAUGHT_UP,
                                   VoterChangeError.CHANGE_PENDING,
                                   VoterChangeError.NO_HIGH_WATERMARK})
_VOTER_RETRY_S = 0.1


class QuorumController(CommitListener):
    def __init__(self, settings: ControllerSettings, *, clock_ms: Callable[[], int],
                 rng: RandomSource) -> None:
        self.settings = settings
        self._clock_ms = clock_ms
        self.machine = ControllerMachine(settings, rng=rng)
        self._ids = itertools.count(1)
        # Futures of the requests the machine has not answered yet, by request id.
        self._waiting: dict[int, asyncio.Future[Answer]] = {}
        self._events = RequestQueue(self._run_request)
        self._tick_queued = False
        self._quorum: QuorumPort | None = None
        self.snapshots: SnapshotScheduler | None = None
        self.metrics: ControllerMetrics | None = None
        # Append time of the last committed batch, and when this node last lost its
        # leader (None: it knows one), for metrics.
        self._last_append_ms: int | None = None
        self._leader_lost_ms: int | None = None
        self._counts_ms: int | None = None
        # The timer that queues the next tick (`_schedule_tick`), while started.
        self._tick_timer = WakeTimer(self.request_tick)
        self._ticking = False
        # Called (on the node task) with the new mode whenever it changes: the health
        # service's per-role status follows it.
        self.mode_listeners: list[Callable[[Mode], None]] = []
        # Called (on the node task) with the committed offset whenever it moves: a
        # commit, or a snapshot that replaced the state (watchers follow it).
        self.commit_listeners: list[Callable[[int], None]] = []
        self._reported_mode = Mode.STANDBY

    # ------------------------------------------------------------------ lifecycle

    def attach(self, quorum: QuorumPort) -> None:
        """Bind to the Raft layer (whose listener this controller is)."""
        self._quorum = quorum
        self._events.attach(quorum)

    def enable_snapshots(self, directory: Path) -> None:
        """Write snapshots into `directory` every `snapshot_interval_bytes` of
        committed records (and at least `snapshot_interval_image_multiple` times the
        newest snapshot's size, or `snapshot_max_interval_ms` after the newest one
        started), and compact the Raft log below each."""
        quorum = self._quorum
        assert quorum is not None, "attach() first"
        self.snapshots = SnapshotScheduler(
            self.state, directory, interval_bytes=self.settings.snapshot_interval_bytes,
            chunk_records=self.settings.snapshot_chunk_records,
            run_on_node_task=quorum.run_on_node_task, compact=quorum.compact,
            release_history=self.machine.release_history,
            phase_bytes=self.snapshot_phase_bytes(),
            image_multiple=self.settings.snapshot_interval_image_multiple,
            busy_percent=self.settings.snapshot_busy_percent,
            max_interval_ms=self.settings.snapshot_max_interval_ms)
        latest = sf.latest_snapshot(directory)
        if latest is not None:
            self.snapshots.note_image_bytes((directory / latest.file_name).stat().st_size)
        self.machine.snapshots = self.snapshots

    def snapshot_phase_bytes(self) -> int:
        """How much later than the interval this voter takes its first snapshot.

        Every voter counts the same committed bytes, so without a phase all of them
        snapshot at the same offset and pause together; a commit needs a majority,
        so two voters busy at once slow every request. Voter k of n (by id) starts
        k/n of an interval later, which keeps them apart from then on."""
        voters = sorted(self.settings.voter_addresses)
        if self.settings.node_id not in voters:
            return 0
        rank = voters.index(self.settings.node_id)
        return self.settings.snapshot_interval_bytes * rank // len(voters)

    def load_latest_snapshot(self, directory: Path) -> None:
        """At start, before the Raft log is opened: the log starts at the newest
        snapshot in `directory` (if any), so the state must too."""
        latest = sf.latest_snapshot(directory)
        if latest is not None:
            records = iter_snapshot_bytes(directory / latest.file_name)
            self.load_snapshot(latest.end_offset, latest.epoch, records)

    def load_snapshot(self, end_offset: int, epoch: int, records: Iterable[bytes]) -> None:
        self.machine.load_snapshot(end_offset, epoch, records)
        self._committed_moved()

    def _committed_moved(self) -> None:
        for listener in self.commit_listeners:
            listener(self.machine.committed_offset)

    def start(self) -> None:
        assert self._quorum is not None, "attach() first"
        self._ticking = True
        self._schedule_tick()

    async def stop(self) -> None:
        self._ticking = False
        self._tick_timer.cancel()
        if self.snapshots is not None:
            await self.snapshots.close()
        self.machine.shut_down()
        self._settle()
        for req in self._events.take_all():
            self._fail(req.id, NotControllerError(None, None))

    # ------------------------------------------------------------------ status

    @property
    def state(self) -> MetadataState:
        return self.machine.state

    @property
    def registry(self) -> SnapshotRegistry:
        return self.machine.registry

    @property
    def mode(self) -> Mode:
        return self.machine.mode

    @property
    def committed_offset(self) -> int:
        return self.machine.committed_offset

    @property
    def replayed_offset(self) -> int:
        return self.machine.replayed_offset

    def committed_read_epoch(self) -> int | None:
        return self.machine.committed_read_epoch()

    @property
    def leader_id(self) -> int | None:
        return self.machine.leader_id

    # -- OpContext: what an operation reads beside the state -------------------------

    @property
    def cluster_id(self) -> str:
        return self.settings.cluster_id

    def active_controller_id(self) -> int | None:
        return self.leader_id

    def quorum_is_dynamic(self) -> bool:
        assert self._quorum is not None, "attach() first"
        return self._quorum.status().voters.dynamic

    def voter_versions(self) -> Mapping[int, tuple[int, int]] | None:
        # Each voter's supported range, as its fetches told this leader (None when not
        # leading: a write is refused as NOT_CONTROLLER anyway).
        assert self._quorum is not None, "attach() first"
        replicas = self._quorum.status().replicas
        return {r.replica_id: r.supported_versions for r in replicas if r.is_voter} or None

    @property
    def activations(self) -> int:
        return self.machine.activations

    @property
    def queued_events(self) -> int:
        return len(self._events) + self.machine.parked_requests

    @property
    def waiting_responses(self) -> int:
        return self.machine.waiting_responses

    # ------------------------------------------------------------------ requests

    async def write(self, op: Operation, args: Args, origin: BatchOrigin,
                    codec: ResultCodec | None = None) -> Any:
        """Run write `op` on the active controller; its answer once committed. With a
        `codec` and a request id in `origin`, a retry gets the first answer."""
        assert op.run is not None, op.name
        answer = await self._submit(Request(next(self._ids), op, args, self, self._clock_ms(),
                                            origin=origin, codec=codec))
        READ_OFFSET.set(answer.read_offset)  # the committed end that covers it
        return answer.value

    async def read(self, op: Operation, args: Args,
                   consistency: ReadConsistency = ReadConsistency.LINEARIZABLE,
                   min_offset: int = 0) -> Any:
        """Run read `op` at a committed offset of at least `min_offset`: linearizable
        on the active controller (ReadIndex), or stale on this one once it has
        applied that far (`BehindError` past `stale_read_wait_ms`). Sets
        `READ_OFFSET` to the offset, and for a stale read `HIGH_WATERMARK` to the
        commit point this node knows."""
        assert op.query is not None, op.name
        answer = await self._submit(Request(next(self._ids), op, args, self, self._clock_ms(),
                                            consistency=consistency, min_offset=min_offset))
        READ_OFFSET.set(answer.read_offset)
        if consistency is ReadConsistency.STALE and self._quorum is not None:
            HIGH_WATERMARK.set(self._quorum.status().high_watermark)
        return answer.value

    async def change_voters(self, kind: str, voter: Voter, *, timeout_s: float,
                            dry_run: bool = False) -> VoterChangeResult:
        """AddVoter ("add"), RemoveVoter ("remove") or UpdateVoter ("update") on the
        active controller (else NOT_LEADER naming the leader). While the change cannot
        be made yet but soon may -- the new voter still catching up, the previous
        change or this leader's first commit pending -- it is retried until
        `timeout_s`; an accepted change is waited on until it commits. Raises
        `TimeoutError` (appended and not committed in time: it may still commit),
        `ProposalLostError` (cut from the log), `NotControllerError` (stopped)."""
        quorum = self._quorum
        assert quorum is not None, "attach() first"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            fut: asyncio.Future[tuple[VoterChangeResult, asyncio.Future[int] | None]] = \
                loop.create_future()

            def work(access: NodeAccess,
                     fut: asyncio.Future[tuple[VoterChangeResult, asyncio.Future[int] | None]]
                     = fut) -> None:
                if not fut.done():
                    fut.set_result(self.machine.change_voters(access, kind, voter, dry_run))
                self._settle()

            try:
                quorum.run_on_node_task(work)
            except DriverStoppedError:
                raise NotControllerError(None, None) from None
            result, committed = await asyncio.wait_for(fut, max(0.0, deadline - loop.time()))
            if result.error not in _RETRIED_VOTER_ERRORS or \
                    loop.time() + _VOTER_RETRY_S >= deadline:
                break
            await asyncio.sleep(_VOTER_RETRY_S)
        if committed is not None:
            await asyncio.wait_for(committed, max(0.0, deadline - loop.time()))
        return result

    async def transfer_leadership(self, target: int) -> TransferError | None:
        """Start handing leadership to voter `target` (the active controller only):
        the refusal, or None once under way (its end shows in `QuorumPort.status()`:
        no transfer target any more, and another leader or this one leading on)."""
        quorum = self._quorum
        assert quorum is not None, "attach() first"
        fut: asyncio.Future[TransferError | None] = asyncio.get_running_loop().create_future()

        def work(access: NodeAccess) -> None:
            if not fut.done():
                fut.set_result(self.machine.transfer_leadership(access, target))
            self._settle()

        try:
            quorum.run_on_node_task(work)
        except DriverStoppedError:
            raise NotControllerError(None, None) from None
        return await fut

    async def _submit(self, req: Request) -> Answer:
        if self.queued_events >= self.settings.max_queued_events:
            raise ControllerBusyError(
                f"the controller has {self.queued_events} requests queued "
                f"(limit {self.settings.max_queued_events}); retry later")
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        try:
            self._events.put(req)
        except DriverStoppedError:
            raise NotControllerError(None, None) from None
        self._waiting[req.id] = future
        try:
            # asyncio.timeout, not wait_for: no extra task per request.
            async with asyncio.timeout(self.settings.request_timeout_ms / 1e3):
                return await future
        except TimeoutError:
            raise ControllerTimeoutError(
                f"{req.name}: no answer within {self.settings.request_timeout_ms} ms"
                + ("; the write may still be applied" if req.is_write else "")) from None
        finally:
            if self._waiting.pop(req.id, None) is not None:
                self.machine.forget(req.id)  # gave up: a parked request never runs

    def _settle(self) -> None:
        """Hand the machine's answers to the callers still waiting; tell the mode
        listeners of a new mode."""
        mode = self.machine.mode
        if mode is not self._reported_mode:
            self._reported_mode = mode
            for listener in self.mode_listeners:
                listener(mode)
        for out in self.machine.take_instructions():
            future = self._waiting.pop(out.request_id, None)
            if future is None or future.done():
                continue  # the caller gave up waiting
            if isinstance(out, Answer):
                if out.commit_ms is not None and self.metrics is not None:
                    self.metrics.commit_latency.observe(out.commit_ms / 1e3)
                future.set_result(out)
            else:
                future.set_exception(out.error)
        self._schedule_tick()

    def _fail(self, request_id: int, error: BaseException) -> None:
        future = self._waiting.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(error)

    # ------------------------------------------------------------ on the node task

    def _run_request(self, req: Request, access: NodeAccess) -> None:
        """Run one queued request (an `RequestQueue` turn calls this)."""
        now = self._clock_ms()
        if self.metrics is not None:
            self.metrics.queue_time.labels(method=req.name).observe(
                max(0, now - req.enqueued_ms) / 1e3)
        future = self._waiting.get(req.id)
        if future is None or future.done():
            return  # the caller gave up before it ran: nothing applied
        began_s = time.perf_counter()
        self.machine.request(req, access, now)
        self._settle()
        if self.machine.owes_partition_moves:
            # A broker event left partition changes to write (partition_mover.py): they
            # go in the coming ticks, the first at once rather than at the next timer.
            self.request_tick()
        if self.metrics is not None:
            self.metrics.processing_time.labels(method=req.name).observe(
                time.perf_counter() - began_s)

    # ------------------------------------------------------- driver callbacks

    def on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        now = self._clock_ms()
        if leader_id is None:
            if self._leader_lost_ms is None:
                self._leader_lost_ms = now
        elif self.metrics is not None:
            self.metrics.leader_changes.inc()
            if self._leader_lost_ms is not None:
                self.metrics.election_latency.observe(max(0, now - self._leader_lost_ms) / 1e3)
        if leader_id is not None:
            self._leader_lost_ms = None
        self.machine.leader_changed(leader_id, epoch, self._clock_ms())
        self._settle()

    def on_commit(self, batches: Sequence[RecordBatch]) -> None:
        if batches:
            self._last_append_ms = batches[-1].append_time_ms
        if self.machine.committed(batches, self._clock_ms()):
            self.request_tick()
        self._settle()
        self._committed_moved()

    def on_voters_changed(self, voters: VoterSet) -> None:
        self.machine.voters_changed({v.node_id: v.endpoint for v in voters if v.endpoint})

    def on_reads_confirmed(self, reads: Sequence[ReadState]) -> None:
        self.machine.reads_confirmed((r.read_id, r.index) for r in reads)
        self._settle()

    def on_snapshot_loaded(self, snapshot_id: SnapshotId, path: Path) -> None:
        self.load_snapshot(snapshot_id.end_offset, snapshot_id.epoch,
                           iter_snapshot_bytes(path))

    # ------------------------------------------------------------------ timers

    def _schedule_tick(self) -> None:
        """Tick when the machine next needs it (`ControllerMachine.next_tick_ms`):
        every `tick_interval_ms` while something waits on a timer, a few times a
        second when idle. Called after every stimulus (`_settle`): the one timer
        follows it (`WakeTimer.wake_in`)."""
        if not self._ticking:
            return
        now = self._clock_ms()
        self._tick_timer.wake_in((self.machine.next_tick_ms(now) - now) / 1e3)

    def request_tick(self) -> None:
        if self._tick_queued or self._quorum is None:
            return
        try:
            self._quorum.run_on_node_task(self._on_tick)
        except DriverStoppedError:
            # The node task is gone: the queued requests will never run. Answer them
            # now (never appended).
            for req in self._events.driver_stopped():
                self._fail(req.id, NotControllerError(None, None))
            return
        self._tick_queued = True

    def _on_tick(self, access: NodeAccess) -> None:
        self._tick_queued = False
        now = self._clock_ms()
        self.machine.tick(access, now)
        self._settle()
        if self.machine.owes_partition_moves:
            # Partition changes still owed: the next batch in the next turn, after
            # whatever else is queued.
            self.request_tick()
        self._update_metrics(now)

    def _update_metrics(self, now: int) -> None:
        m = self.metrics
        if m is None:
            return
        machine = self.machine
        m.queue_depth.set(self.queued_events)
        m.waiting.set(machine.waiting_responses)
        m.last_applied.set(machine.replayed_offset - 1)
        m.last_committed.set(machine.committed_offset - 1)
        m.active.set(1 if machine.mode is Mode.ACTIVE else 0)
        m.timed_out_heartbeats.to(machine.brokers_timed_out)
        if self._last_append_ms is not None:
            m.last_applied_time.set(self._last_append_ms / 1e3)
            m.last_applied_lag.set(max(0, now - self._last_append_ms) / 1e3)
        if self.snapshots is not None:
            m.snapshots.to(self.snapshots.snapshots_written)
        if self._quorum is not None:
            m.set_raft(self._quorum.status())
        if self._counts_ms is None or now - self._counts_ms >= 1000:
            # Counting topics walks them: about once a second is enough.
            self._counts_ms = now
            m.set_counts(StateCounts.read(self.state, machine.committed_offset - 1))
