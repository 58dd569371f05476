"""`QuorumController`: the single-threaded controller on top of the Raft driver -- its
lifecycle, the requests, the driver's callbacks and the timers. Its fields, mode
transitions and write path are `ControllerCore` (core.py).

Threading. Everything that touches controller state runs on the Raft driver's node
task: queued events (`QuorumPort.run_on_node_task`) and the commit callbacks
(`on_commit`, `on_leader_change`, `on_snapshot_loaded`). gRPC handlers only queue
an event (bounded: a full queue answers busy) and await its future. The events
queued meanwhile run together in one node-task turn (turns.py), each write as its
own batch, so one Raft flush and replication round carries them all. Running on the
node task is what makes a write atomic: nothing happens between reading the offset
the batch will get, replaying the records there and appending them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from controller.api.seam import (
    ControllerBusyError,
    ControllerTimeoutError,
    NotControllerError,
)
from controller.logformat import SnapshotId
from controller.logformat.batch import EMPTY_ORIGIN, BatchOrigin, RecordBatch
from controller.metadata.placement import RandomSource
from controller.quorum.driver import CommitListener
from controller.quorum.service import DriverStoppedError
from controller.quorum_controller.core import ControllerCore
from controller.quorum_controller.events import (
    Event,
    Generate,
    Mode,
    Query,
    settle,
)
from controller.quorum_controller.metrics import StateCounts
from controller.quorum_controller.ports import ControllerSettings, NodeAccess, QuorumPort
from controller.quorum_controller.snapshots import SnapshotScheduler, iter_snapshot_bytes
from controller.quorum_controller.turns import EventQueue
from controller.storage import snapshot_file as sf

logger = logging.getLogger("metakraft.controller")


class QuorumController(ControllerCore, CommitListener):
    def __init__(self, settings: ControllerSettings, *, clock_ms: Callable[[], int],
                 rng: RandomSource) -> None:
        super().__init__(settings, clock_ms=clock_ms, rng=rng)
        self._events = EventQueue(self._run_event)
        self._tick_queued = False
        self._quorum: QuorumPort | None = None
        self.snapshots: SnapshotScheduler | None = None
        self._counts_ms: int | None = None
        self._ticker: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def attach(self, quorum: QuorumPort) -> None:
        """Bind to the Raft layer (whose listener this controller is)."""
        self._quorum = quorum
        self._events.attach(quorum)

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
        for event in (*self._parked, *self._events.take_all()):
            settle(event.future, exc=NotControllerError(None, None))
        self._parked.clear()

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
    def queued_events(self) -> int:
        return len(self._events) + len(self._parked)

    @property
    def waiting_responses(self) -> int:
        return len(self._purgatory)

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
        if self.queued_events >= self.settings.max_queued_events:
            raise ControllerBusyError(
                f"the controller has {self.queued_events} requests queued "
                f"(limit {self.settings.max_queued_events}); retry later")
        try:
            self._events.put(event)
        except DriverStoppedError:
            raise NotControllerError(None, None) from None
        try:
            # asyncio.timeout, not wait_for: no extra task per request.
            async with asyncio.timeout(self.settings.request_timeout_ms / 1e3):
                return await event.future
        except TimeoutError:
            raise ControllerTimeoutError(
                f"{event.name}: no answer within {self.settings.request_timeout_ms} ms"
                + ("; the write may still be applied" if event.generate else "")) from None

    # ------------------------------------------------------------ on the node task

    def _run_event(self, event: Event, access: NodeAccess) -> None:
        """Run one queued event (an `EventQueue` turn calls this)."""
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
            # The node task is gone: the queued events will never run. Answer them
            # now (never appended).
            for event in self._events.driver_stopped():
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
