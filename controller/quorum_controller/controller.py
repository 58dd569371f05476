"""`QuorumController`: the single-threaded controller on top of the Raft driver.

Threading. Everything that touches controller state runs on the Raft driver's node
task: queued events (`QuorumPort.run_on_node_task`) and the commit callbacks
(`on_commit`, `on_leader_change`, `on_snapshot_loaded`). gRPC handlers only queue
an event (bounded: a full queue answers busy) and await its future. The events
queued meanwhile run together in one node-task turn (`_run_queued`), each write
as its own batch, so one Raft flush and replication round carries them all. Running on the
node task is what makes a write atomic: nothing happens between reading the offset
the batch will get, replaying the records there and appending them.

A write (leader, active):
1. the manager generates records + a response from the latest, uncommitted state;
2. the records are replayed at `next_offset` (a replay error reverts and fails the
   request: nothing reaches the log), the registry snapshots at the batch's last
   offset, and the batch is appended -- not awaited;
3. the response waits in the purgatory until that batch commits; on each commit
   the registry drops the snapshots below the committed offset.
A request that produces no records waits for the newest uncommitted batch.

Modes. STANDBY replays committed batches (a hot standby). When this node wins an
election it is PENDING until the LeaderChange batch of its epoch commits -- all
earlier entries are then replayed -- and only then ACTIVE; requests arriving
meanwhile are parked (bounded, with a deadline). Losing leadership (noticed from
the driver's callback or from the node's role at the next event) reverts the
timeline to the committed offset, drops soft state, answers parked requests "not
controller", and leaves appended requests in the purgatory to learn their real
fate (see purgatory.py). Reads run on the active leader at the committed offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from controller.api.seam import (
    ControllerBusyError,
    ControllerTimeoutError,
    NotControllerError,
)
from controller.metadata import METADATA_VERSION, MetadataState
from controller.metadata.errors import MetadataReplayError
from controller.metadata.placement import RandomSource
from controller.quorum.driver import CommitListener, NotLeaderError, ProposalRejectedError
from controller.quorum.service import DriverStoppedError
from controller.quorum_controller.events import (
    Event,
    Generate,
    Mode,
    Query,
    RequestTooLargeError,
    settle,
)
from controller.quorum_controller.metrics import ControllerMetrics, StateCounts
from controller.quorum_controller.ports import ControllerSettings, NodeAccess, QuorumPort
from controller.quorum_controller.purgatory import BatchKey, Purgatory, Waiter
from controller.quorum_controller.snapshots import SnapshotScheduler, iter_snapshot_bytes
from controller.raft.values import SnapshotId
from controller.records import MetadataRecord, encode_record
from controller.storage import snapshot_file as sf
from controller.storage.batch import EMPTY_ORIGIN, BatchOrigin, RecordBatch

logger = logging.getLogger("metakraft.controller")

# Queued events run in one node-task turn at most (the driver builds a Ready, so
# flushes and sends, between turns).
MAX_EVENTS_PER_TURN = 64

class QuorumController(CommitListener):
    def __init__(self, settings: ControllerSettings, *, clock_ms: Callable[[], int],
                 rng: RandomSource) -> None:
        self.settings = settings
        self._clock_ms = clock_ms
        self.state = MetadataState(cluster_id=settings.cluster_id, rng=rng,
                                   session_timeout_ms=settings.session_timeout_ms)
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
        self._parked: deque[Event] = deque()
        # Events accepted and not yet run; they run together, in arrival order, in
        # one node-task turn (see `_run_queued`).
        self._inbox: deque[Event] = deque()
        self._turn_scheduled = False
        self._queued = 0
        self._tick_queued = False
        self._quorum: QuorumPort | None = None
        self.snapshots: SnapshotScheduler | None = None
        self.metrics: ControllerMetrics | None = None
        self._counts_ms: int | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.activations = 0  # times this node became the active controller

    # ------------------------------------------------------------------ lifecycle

    def attach(self, quorum: QuorumPort) -> None:
        """Bind to the Raft layer (whose listener this controller is)."""
        self._quorum = quorum

    def enable_snapshots(self, directory: Path) -> None:
        """Write snapshots into `directory` every `snapshot_interval_bytes` of
        committed records, and compact the Raft log below each."""
        quorum = self._quorum
        assert quorum is not None, "attach() first"
        self.snapshots = SnapshotScheduler(
            self.state, directory, interval_bytes=self.settings.snapshot_interval_bytes,
            chunk_records=self.settings.snapshot_chunk_records,
            run_on_node_task=quorum.run_on_node_task, compact=quorum.compact,
            release_history=self._release_history, phase_bytes=self.snapshot_phase_bytes())

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

    def start(self) -> None:
        assert self._quorum is not None, "attach() first"
        self._ticker = asyncio.create_task(self._tick_loop(), name="controller-ticker")

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        if self.snapshots is not None:
            await self.snapshots.close()
        self._purgatory.fail_all()
        for event in (*self._parked, *self._inbox):
            settle(event.future, exc=NotControllerError(None, None))
        self._parked.clear()
        self._queued -= len(self._inbox)
        self._inbox.clear()

    # ------------------------------------------------------------------ status

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def committed_offset(self) -> int:
        """The next offset to commit: every record below it is committed and replayed."""
        return self._committed_next

    @property
    def replayed_offset(self) -> int:
        return self._replayed_next

    @property
    def leader_id(self) -> int | None:
        return self.settings.node_id if self._mode is not Mode.STANDBY else self._leader_id

    @property
    def queued_events(self) -> int:
        return self._queued + len(self._parked)

    @property
    def waiting_responses(self) -> int:
        return len(self._purgatory)

    def not_controller(self) -> NotControllerError:
        leader = self._leader_id if self._leader_id != self.settings.node_id else None
        return NotControllerError(leader, self.settings.leader_address(leader))

    # ------------------------------------------------------------------ requests

    async def write(self, name: str, generate: Generate, origin: BatchOrigin) -> Any:
        """Run a write on the active controller; its response once committed."""
        return await self._submit(Event(name, self._future(), self._clock_ms(),
                                         generate=generate, origin=origin))

    async def read(self, name: str, query: Query) -> Any:
        """Run a read on the active controller at the committed offset."""
        return await self._submit(Event(name, self._future(), self._clock_ms(), query=query))

    @staticmethod
    def _future() -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    async def _submit(self, event: Event) -> Any:
        quorum = self._quorum
        assert quorum is not None, "attach() first"
        if self.queued_events >= self.settings.max_queued_events:
            raise ControllerBusyError(
                f"the controller has {self.queued_events} requests queued "
                f"(limit {self.settings.max_queued_events}); retry later")
        if not self._turn_scheduled:
            try:
                quorum.run_on_node_task(self._run_queued)
            except DriverStoppedError:
                raise NotControllerError(None, None) from None
            self._turn_scheduled = True
        self._queued += 1
        self._inbox.append(event)
        try:
            # asyncio.timeout, not wait_for: no extra task per request.
            async with asyncio.timeout(self.settings.request_timeout_ms / 1e3):
                return await event.future
        except TimeoutError:
            raise ControllerTimeoutError(
                f"{event.name}: no answer within {self.settings.request_timeout_ms} ms"
                + ("; the write may still be applied" if event.generate else "")) from None

    # ------------------------------------------------------------ on the node task

    def _run_queued(self, access: NodeAccess) -> None:
        """Run the queued events, oldest first, in one node-task turn (at most
        `MAX_EVENTS_PER_TURN`; the rest get the next turn).

        Coalescing: every write of the turn is generated, replayed and appended as
        its own batch -- its own origin, its own purgatory entry and answer, and a
        replay failure fails only that request -- but the Raft node builds its next
        Ready only after the turn, so the batches share one log flush and reach the
        followers in one FetchResponse each (one replication round for all)."""
        self._turn_scheduled = False
        inbox = self._inbox
        for _ in range(min(len(inbox), MAX_EVENTS_PER_TURN)):
            self._run_event(inbox.popleft(), access)
        if inbox and not self._turn_scheduled and self._quorum is not None:
            with contextlib.suppress(DriverStoppedError):
                self._quorum.run_on_node_task(self._run_queued)
                self._turn_scheduled = True

    def _run_event(self, event: Event, access: NodeAccess) -> None:
        self._queued -= 1
        now = self._clock_ms()
        if self.metrics is not None:
            self.metrics.queue_time.observe(max(0, now - event.enqueued_ms) / 1e3)
        self._sync_leadership(access, now)
        if event.future.done():
            return  # the caller gave up before it ran: nothing applied
        if self._mode is Mode.ACTIVE:
            self._dispatch(event, access, now)
        elif self._mode is Mode.PENDING:
            event.deadline_ms = now + self.settings.activation_wait_ms
            self._parked.append(event)
        else:
            settle(event.future, exc=self.not_controller())

    def _dispatch(self, event: Event, access: NodeAccess, now: int) -> None:
        if event.query is not None:
            try:
                result = event.query(self._committed_next - 1)
            except Exception as exc:
                logger.exception("event=read_failed name=%s", event.name)
                settle(event.future, exc=exc)
                return
            settle(event.future, result)
            return
        assert event.generate is not None
        try:
            generated = event.generate(access.next_offset, now)
        except Exception as exc:
            # A bug in a manager; nothing was replayed or appended.
            logger.exception("event=generate_failed name=%s", event.name)
            settle(event.future, exc=exc)
            return
        self._append(generated.records, generated.response, event.origin, access, event.future,
                     generated.encoded)

    def _append(self, records: Sequence[MetadataRecord], response: Any, origin: BatchOrigin,
                access: NodeAccess, fut: asyncio.Future[Any] | None,
                encoded: Sequence[bytes] | None = None) -> None:
        """Replay and append `records` (`encoded`: their bytes, if the manager wrote
        those already)."""
        assert self._mode is Mode.ACTIVE
        if not records:
            self._answer_after_last(response, fut)
            return
        if encoded is None:
            encoded = [encode_record(r) for r in records]
        assert len(encoded) == len(records)
        size = sum(len(r) for r in encoded)
        limits = self.settings
        if len(encoded) > limits.max_records_per_batch or size > limits.max_batch_bytes:
            settle(fut, exc=RequestTooLargeError(
                f"the request needs {len(encoded)} records ({size} bytes) in one batch; the "
                f"limit is {limits.max_records_per_batch} records and {limits.max_batch_bytes} "
                "bytes: split it into smaller requests"))
            return
        base = access.next_offset
        # Only our own appends go to the log while we are active.
        assert base == self._replayed_next, (base, self._replayed_next)
        last = base + len(encoded) - 1
        try:
            # From the bytes, as the followers replay them (the same fast path).
            self.state.replay_encoded(encoded, base)
        except MetadataReplayError as exc:
            self.registry.revert_to_snapshot(base - 1)
            logger.error("event=replay_refused offset=%d error=%r", base, str(exc))
            settle(fut, exc=exc)
            return
        self.registry.create_snapshot(last)
        try:
            appended = access.append(encoded, origin)
        except (NotLeaderError, ProposalRejectedError) as exc:
            self.registry.revert_to_snapshot(base - 1)
            if isinstance(exc, NotLeaderError):
                self._lose_leadership(exc.leader_id, self._clock_ms())
                settle(fut, exc=self.not_controller())
            else:
                settle(fut, exc=RequestTooLargeError(str(exc)))
            return
        assert appended == base, (appended, base)
        self._replayed_next = last + 1
        key = BatchKey(base, last, self._epoch)
        self._uncommitted[base] = key
        self._last_key = key
        if fut is not None:
            self._wait_for(key, response, fut)

    def _answer_after_last(self, response: Any, fut: asyncio.Future[Any] | None) -> None:
        key = self._last_key
        if key is not None and key.base_offset >= self._committed_next:
            if fut is not None:
                self._wait_for(key, response, fut)
        else:
            settle(fut, response)

    def _wait_for(self, key: BatchKey, response: Any, fut: asyncio.Future[Any]) -> None:
        def lost() -> None:
            settle(fut, exc=self.not_controller())

        def unknown() -> None:
            settle(fut, exc=ControllerTimeoutError(
                "leadership changed before the write was known to be committed; it may "
                "still be applied: check the state before retrying"))

        appended_ms = self._clock_ms()

        def success() -> None:
            if self.metrics is not None:
                self.metrics.commit_latency.observe(max(0, self._clock_ms() - appended_ms) / 1e3)
            settle(fut, response)

        self._purgatory.add(Waiter(key, success, lost, unknown))

    # ------------------------------------------------------------------ leadership

    def _sync_leadership(self, access: NodeAccess, now: int) -> None:
        """Catch up with the node's role (a resignation is not reported as a leader
        change: the leader id stays ours)."""
        epoch = access.leader_epoch
        if self._mode is not Mode.STANDBY and epoch != self._epoch:
            self._lose_leadership(access.known_leader_id, now)
        if self._mode is Mode.STANDBY and epoch is not None:
            self._become_pending(epoch)
        self._maybe_activate(access, now)

    def _become_pending(self, epoch: int) -> None:
        assert self._mode is Mode.STANDBY
        self._mode = Mode.PENDING
        self._epoch = epoch
        self._leader_id = self.settings.node_id
        self._epoch_started = self._last_committed_epoch == epoch
        logger.info("event=leader_elected node=%d epoch=%d committed=%d", self.settings.node_id,
                    epoch, self._committed_next)

    def _maybe_activate(self, access: NodeAccess, now: int) -> None:
        if not (self._mode is Mode.PENDING and self._epoch_started
                and access.leader_epoch == self._epoch):
            return
        assert access.next_offset == self._replayed_next == self._committed_next, (
            access.next_offset, self._replayed_next, self._committed_next)
        self._mode = Mode.ACTIVE
        self.activations += 1
        self.state.cluster.activate(now)
        logger.info("event=controller_active node=%d epoch=%d offset=%d",
                    self.settings.node_id, self._epoch, self._committed_next)
        if self.state.features.finalized_level(METADATA_VERSION) == 0:
            # A fresh cluster: the first active controller writes the feature levels.
            records = self.state.features.bootstrap_records()
            self._append(records, None, EMPTY_ORIGIN, access, None)
            logger.info("event=bootstrap_features records=%d", len(records))
        parked, self._parked = self._parked, deque()
        for event in parked:
            if not event.future.done():
                self._dispatch(event, access, now)

    def _lose_leadership(self, new_leader: int | None, now: int) -> None:
        if self._mode is Mode.STANDBY:
            return
        was = self._mode
        self._mode = Mode.STANDBY
        self._leader_id = new_leader if new_leader != self.settings.node_id else None
        reverted = self._replayed_next - self._committed_next
        self.state.revert_to_committed(self._committed_next - 1)
        self._replayed_next = self._committed_next
        self._uncommitted.clear()
        self._last_key = None
        self._purgatory.orphan(now + self.settings.orphan_timeout_ms)
        parked, self._parked = self._parked, deque()
        for event in parked:
            settle(event.future, exc=self.not_controller())
        logger.info("event=leadership_lost node=%d epoch=%d was=%s new_leader=%s "
                    "committed=%d reverted_records=%d waiting=%d", self.settings.node_id,
                    self._epoch, was.value, new_leader, self._committed_next, reverted,
                    len(self._purgatory))

    # ------------------------------------------------------- driver callbacks

    def on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        now = self._clock_ms()
        if self.metrics is not None and leader_id is not None:
            self.metrics.leader_changes.inc()
        if leader_id == self.settings.node_id:
            if self._mode is not Mode.STANDBY and self._epoch != epoch:
                self._lose_leadership(None, now)
            if self._mode is Mode.STANDBY:
                self._become_pending(epoch)
            return
        if self._mode is not Mode.STANDBY:
            self._lose_leadership(leader_id, now)
        self._leader_id = leader_id
        logger.info("event=leader_change node=%d leader=%s epoch=%d", self.settings.node_id,
                    leader_id, epoch)

    def on_commit(self, batches: Sequence[RecordBatch]) -> None:
        # Batches replayed here get one registry snapshot, after the last of them
        # (only the committed offset is ever read or reverted to), not one each: while
        # a snapshot file is written every registry snapshot after its offset stays,
        # and each one makes reads at that offset slower. `unsnapped` is the last
        # offset replayed without one (-1: none).
        unsnapped = -1
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
                        self._lose_leadership(None, self._clock_ms())
                        self._replay_committed(batch)
                        unsnapped = batch.last_offset
            else:
                self._replay_committed(batch)
                unsnapped = batch.last_offset
            self._committed_next = batch.next_offset
            self._last_committed_epoch = batch.epoch
            self._purgatory.committed(batch)
            if self.snapshots is not None and self.snapshots.committed(
                    sum(len(r) for r in batch.records), self._committed_next, batch.epoch
            ) and unsnapped == batch.last_offset:
                # A snapshot job starts here: it reads the registry snapshot at this offset.
                self.registry.create_snapshot(unsnapped)
                unsnapped = -1
            if self._mode is Mode.PENDING and batch.epoch == self._epoch:
                # Our LeaderChange committed: everything before it is replayed.
                self._epoch_started = True
                self.request_tick()
        if unsnapped >= 0:
            self.registry.create_snapshot(unsnapped)
        if batches:
            self._release_history()

    def _release_history(self) -> None:
        """Drop registry snapshots below the committed offset (and below the offset
        a snapshot being written still reads)."""
        keep = self._committed_next - 1
        pinned = None if self.snapshots is None else self.snapshots.pinned_offset
        self.registry.delete_snapshots_up_to(keep if pinned is None else min(keep, pinned))
        assert self.registry.has_snapshot(keep), self._committed_next

    def _replay_committed(self, batch: RecordBatch) -> None:
        """Replay a committed batch; the caller creates the registry snapshot."""
        assert batch.base_offset == self._replayed_next, (
            f"committed batch at {batch.base_offset} but the state is at {self._replayed_next}")
        try:
            self.state.replay_encoded(batch.records, batch.base_offset)
        except Exception:
            # The committed log does not fit our state: stop rather than diverge.
            logger.critical("event=replay_failed offset=%d epoch=%d", batch.base_offset,
                            batch.epoch, exc_info=True)
            raise
        self._replayed_next = batch.next_offset

    def on_snapshot_loaded(self, snapshot_id: SnapshotId, path: Path) -> None:
        self.load_snapshot(snapshot_id.end_offset, snapshot_id.epoch,
                           iter_snapshot_bytes(path))

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
        logger.info("event=snapshot_loaded end_offset=%d records=%d", end_offset, count)

    # ------------------------------------------------------------------ timers

    async def _tick_loop(self) -> None:
        interval_s = self.settings.tick_interval_ms / 1e3
        while True:
            await asyncio.sleep(interval_s)
            self.request_tick()

    def request_tick(self) -> None:
        if self._tick_queued or self._quorum is None:
            return
        try:
            self._quorum.run_on_node_task(self._on_tick)
        except DriverStoppedError:
            # The node task is gone: a turn scheduled for queued events will never
            # run. Answer them now (never appended) and schedule afresh next time.
            self._turn_scheduled = False
            inbox, self._inbox = self._inbox, deque()
            self._queued -= len(inbox)
            for event in inbox:
                settle(event.future, exc=NotControllerError(None, None))
            return
        self._tick_queued = True

    def _on_tick(self, access: NodeAccess) -> None:
        self._tick_queued = False
        now = self._clock_ms()
        self._sync_leadership(access, now)
        expired = self._purgatory.expire(now)
        if expired:
            logger.warning("event=orphans_expired count=%d", expired)
        while self._parked and self._parked[0].deadline_ms <= now:
            settle(self._parked.popleft().future, exc=self.not_controller())
        self._update_metrics(now)
        if self._mode is Mode.ACTIVE:
            result = self.state.cluster.fence_stale_brokers(now)
            if result.records:
                logger.info("event=fence_stale_brokers brokers=%s", list(result.response))
                self._append(result.records, None, EMPTY_ORIGIN, access, None)

    def _update_metrics(self, now: int) -> None:
        m = self.metrics
        if m is None:
            return
        m.queue_depth.set(self.queued_events)
        m.waiting.set(len(self._purgatory))
        m.last_applied.set(self._replayed_next - 1)
        m.last_committed.set(self._committed_next - 1)
        m.active.set(1 if self._mode is Mode.ACTIVE else 0)
        if self.snapshots is not None:
            m.snapshots.set(self.snapshots.snapshots_written)
        if self._counts_ms is None or now - self._counts_ms >= 1000:
            # Counting topics walks them: about once a second is enough.
            self._counts_ms = now
            m.set_counts(StateCounts.read(self.state, self._committed_next - 1))
