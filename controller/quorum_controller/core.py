"""`ControllerCore`: the controller's fields, its mode transitions (pending, active,
leadership lost) and the write path that the entry points in controller.py share.

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
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from controller.api.seam import ControllerTimeoutError, NotControllerError
from controller.logformat.batch import (
    EMPTY_ORIGIN,
    MAX_APPEND_BYTES,
    MAX_RECORDS_PER_BATCH,
    BatchOrigin,
)
from controller.metadata import METADATA_VERSION, MetadataState
from controller.metadata.errors import MetadataReplayError
from controller.metadata.placement import RandomSource
from controller.quorum.driver import NotLeaderError, ProposalRejectedError
from controller.quorum_controller.events import Event, Mode, RequestTooLargeError, settle
from controller.quorum_controller.metrics import ControllerMetrics
from controller.quorum_controller.ports import ControllerSettings, NodeAccess
from controller.quorum_controller.purgatory import BatchKey, Purgatory, Waiter
from controller.records import MetadataRecord, encode_record

logger = logging.getLogger("metakraft.controller")


class ControllerCore:
    def __init__(self, settings: ControllerSettings, *, clock_ms: Callable[[], int],
                 rng: RandomSource) -> None:
        self.settings = settings
        self._clock_ms = clock_ms
        self.state = MetadataState(cluster_id=settings.cluster_id, rng=rng,
                                   session_timeout_ms=settings.session_timeout_ms,
                                   controller_ids=frozenset(settings.voter_addresses))
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
        self.metrics: ControllerMetrics | None = None
        self.activations = 0  # times this node became the active controller

    def not_controller(self) -> NotControllerError:
        leader = self._leader_id if self._leader_id != self.settings.node_id else None
        return NotControllerError(leader, self.settings.leader_address(leader))

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
        if len(encoded) > MAX_RECORDS_PER_BATCH or size > MAX_APPEND_BYTES:
            settle(fut, exc=RequestTooLargeError(
                f"the request needs {len(encoded)} records ({size} bytes) in one batch; the "
                f"limit is {MAX_RECORDS_PER_BATCH} records and {MAX_APPEND_BYTES} bytes: "
                "split it into smaller requests"))
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
