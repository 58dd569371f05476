"""`TierCopier`: moves committed history to the remote tier and trims the local log.

One asyncio task per controller. Each round:
1. every controller (active or standby) applies local retention: the floor below
   which its local segments may go, from the tier state it replayed
   (`retention.local_retention_floor`);
2. the active controller only:
   - finishes what a predecessor left half done: a COPY_STARTED object of an
     earlier leader epoch older than `copy_timeout_ms` (or one of its own from a
     round that failed) is abandoned, DELETE_STARTED objects are deleted;
   - copies the next range of committed batches, from the committed copied end
     offset (never from file names: segment boundaries differ between
     controllers) to the end of the first closed local segment past it, if that is
     committed and flushed and holds more than the tier's own records (else it
     waits for real data: copying a range of bookkeeping alone would write more
     bookkeeping, forever): COPY_STARTED is committed first, then the data object
     and its manifest are put, then COPY_FINISHED;
   - copies its newest snapshot when it is newer than the tier's;
   - applies remote retention (`retention.remote_expired`).
Every state change is a metadata record written through the controller like any
write (committed before the next step), so a successor knows exactly what the tier
holds. Tier failures leave writes and commits alone: the copier logs one line when
the tier starts failing and one when it is back, backs off, and local deletion
simply waits (the copied end does not move).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from controller.api.seam import (
    Args,
    ControllerBusyError,
    ControllerTimeoutError,
    NotControllerError,
    OpContext,
    Operation,
)
from controller.backoff import Backoff
from controller.log import get_logger
from controller.logformat.batch import EMPTY_ORIGIN, decode_batch, peek_batch_header
from controller.metadata.errors import ControllerResult
from controller.metadata.features import METADATA_VERSION
from controller.metadata.levels import Feature, enabled, needs_level
from controller.metadata.tier import ObjectKind, RemoteObject, SegmentState, TierStateError
from controller.quorum.contracts import LocalLogView
from controller.quorum.driver import RaftDriver
from controller.quorum.service import DriverStoppedError
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.events import Mode
from controller.records import MetadataRecord, decode_record, record_type
from controller.storage import snapshot_file as sf
from controller.storage.errors import StorageError
from controller.tier import retention
from controller.tier.config import TierConfig
from controller.tier.history import claim_tier
from controller.tier.metrics import TierMetrics
from controller.tier.objects import (
    Manifest,
    data_key,
    manifest_key,
    segment_manifest,
    snapshot_manifest,
)
from controller.tier.remote import RemoteStorage, TierError
from controller.tier.throttle import CopyThrottle

log = get_logger("metakraft.tier")

# What a controller write raises when leadership moves under it (not tier trouble).
_LEADERSHIP_CHANGED = (NotControllerError, ControllerTimeoutError, ControllerBusyError,
                       DriverStoppedError)

# Bytes read from the local log per call while assembling a copy. The reads run on
# the event loop (the log has one owner); small ones, with a yield between them,
# keep the controller's requests from waiting behind a whole segment.
_READ_CHUNK_BYTES = 64 * 1024


class TierCopier:
    def __init__(self, *, controller: QuorumController, driver: RaftDriver,
                 store: RemoteStorage, config: TierConfig, clock_ms: Callable[[], int],
                 metrics: TierMetrics | None = None) -> None:
        self._controller = controller
        self._driver = driver
        self._store = store
        self.config = config
        self._clock_ms = clock_ms
        self.metrics = metrics
        self._node_id = controller.settings.node_id
        self._cluster_id = controller.settings.cluster_id
        self._claimed = False
        self._failing: str | None = None
        self._warned_start: int | None = None
        # The last hand-over of a missing range logged: (target, start offset).
        self._handing_over: tuple[int, int] | None = None
        self._throttle = (CopyThrottle(config.copy_max_bytes_per_second, time.monotonic)
                          if config.copy_max_bytes_per_second > 0 else None)

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Round after round until cancelled; never raises for tier trouble."""
        backoff = Backoff(self.config.copy_interval_ms,
                          max(self.config.copy_interval_ms, self.config.max_backoff_ms),
                          random.random)
        while True:
            try:
                busy = await self.round()
                self._succeeded()
                backoff.reset()
                delay_ms: float = 0 if busy else self.config.copy_interval_ms
            except _LEADERSHIP_CHANGED:
                # A write met a change of leader: the next round sees who leads now.
                delay_ms = self.config.copy_interval_ms
            except Exception as exc:
                if not isinstance(exc, TierError | StorageError | OSError | TierStateError):
                    log.exception("tier_round_failed")  # a bug: say where
                self._failed(exc)
                delay_ms = backoff.next_delay()
            await asyncio.sleep(delay_ms / 1e3)

    def _succeeded(self) -> None:
        if self._failing is not None:
            log.info("tier_available", url=self._store.url)
            self._failing = None
        if self.metrics is not None:
            self.metrics.up.set(1)
            self.metrics.last_success.set(time.time())

    def _failed(self, exc: BaseException) -> None:
        reason = str(exc) or type(exc).__name__
        if self.metrics is not None:
            self.metrics.up.set(0)
            self.metrics.errors.inc()
        if self._failing is None:
            # One line when the tier starts failing, not one per retry.
            log.warning("tier_unavailable", url=self._store.url, error=reason)
        self._failing = reason

    async def round(self) -> bool:
        """One round (see the module docstring); True if it changed the tier, so the
        next round should come at once."""
        controller = self._controller
        committed = controller.committed_offset - 1
        objects = controller.state.tier.objects(committed)
        copied_end = controller.state.tier.copied_end_offset(committed)
        view = self._driver.local_log_view()
        await self._apply_local_retention(view, copied_end)
        self._update_metrics(view, objects, copied_end)
        if controller.mode is not Mode.ACTIVE:
            return False
        if not self._claimed:
            await asyncio.to_thread(claim_tier, self._store, self._cluster_id)
            self._claimed = True
        busy = await self._clean_up(objects)
        busy = await self._copy_log(view, objects, copied_end) or busy
        busy = await self._copy_snapshot(view, objects) or busy
        busy = await self._expire_remote(objects) or busy
        return busy

    # ---------------------------------------------------------------- local retention

    async def _apply_local_retention(self, view: LocalLogView, copied_end: int | None) -> None:
        cfg = self.config
        floor = retention.local_retention_floor(
            view.segments, snapshot_end_offset=view.snapshot_end_offset,
            copied_end_offset=copied_end, now_ms=int(time.time() * 1000),
            retention_ms=cfg.local_retention_ms, retention_bytes=cfg.local_retention_bytes)
        if floor > view.local_start_offset:
            start = await self._driver.apply_retention_floor(floor)
            log.info("local_segments_deleted", node=self._node_id, below=floor, log_start=start)

    # ------------------------------------------------------------------- writes

    async def _write(self, name: str,
                     generate: Callable[[], list[MetadataRecord]]) -> None:
        state = self._controller.state

        def run(_ctx: OpContext, _args: Args, _next_offset: int, _now_ms: int
                ) -> ControllerResult[Any]:
            # Asked where the records are generated: the level cannot move in between.
            level = state.features.finalized_level(METADATA_VERSION)
            if not enabled(Feature.REMOTE_TIER, level):
                return ControllerResult((), TierStateError(needs_level(Feature.REMOTE_TIER,
                                                                       level)))
            try:
                return ControllerResult(tuple(generate()), None)
            except TierStateError as exc:
                return ControllerResult((), exc)

        error = await self._controller.write(Operation(name, run=run), Args(), EMPTY_ORIGIN)
        if isinstance(error, TierStateError):
            raise error

    def _epoch(self) -> int:
        return self._driver.status().epoch

    async def _change_state(self, obj: RemoteObject, state: SegmentState) -> None:
        """Move `obj` (as it was when the round began) on to `state`."""
        tier = self._controller.state.tier
        epoch, now = self._epoch(), self._clock_ms()
        name = "Tier" + "".join(word.title() for word in state.name.split("_"))
        await self._write(name, lambda: tier.state_change_records(
            obj.segment_id, state, copier_id=self._node_id, copier_epoch=epoch, now_ms=now))

    async def _delete_objects(self, obj: RemoteObject) -> None:
        key = data_key(obj.kind.name.lower(), obj.start_offset, obj.end_offset,
                       obj.segment_id, obj.last_epoch)
        # The manifest first: from then on no reader takes the object as complete.
        await asyncio.to_thread(self._store.delete, manifest_key(key))
        await asyncio.to_thread(self._store.delete, key)

    async def _delete(self, obj: RemoteObject, reason: str) -> None:
        if obj.state is not SegmentState.DELETE_STARTED:
            await self._change_state(obj, SegmentState.DELETE_STARTED)
        await self._delete_objects(obj)
        await self._change_state(obj, SegmentState.DELETE_FINISHED)
        if self.metrics is not None:
            self.metrics.deletes.labels(kind=obj.kind.name.lower()).inc()
        log.info("tier_object_deleted", id=obj.segment_id, kind=obj.kind.name.lower(),
                 start_offset=obj.start_offset, end_offset=obj.end_offset, reason=reason)

    # ------------------------------------------------------------------ the steps

    async def _clean_up(self, objects: list[RemoteObject]) -> bool:
        now, epoch = self._clock_ms(), self._epoch()
        busy = False
        for obj in objects:
            if obj.state is SegmentState.DELETE_STARTED:
                await self._delete(obj, "unfinished_delete")
                busy = True
            elif obj.state is SegmentState.COPY_STARTED:
                mine = obj.copier_id == self._node_id and obj.copier_epoch == epoch
                # Our own: a round of ours failed half way (rounds do not overlap).
                # Another leader's: it may still be uploading; give it the timeout.
                if mine or now - obj.state_time_ms >= self.config.copy_timeout_ms:
                    await self._delete(obj, "abandoned_copy")
                    busy = True
        return busy

    async def _copy_log(self, view: LocalLogView, objects: list[RemoteObject],
                        copied_end: int | None) -> bool:
        start = copied_end if copied_end is not None else view.local_start_offset
        if copied_end is None and start > 0 and self._warned_start != start:
            self._warned_start = start
            log.warning("tier_history_starts", offset=start,
                        reason="the local log no longer holds older offsets: the tier's "
                               "history starts here")
        if start < view.local_start_offset:
            return await self._hand_over_missing_range(start, view.local_start_offset)
        committed = min(view.high_watermark, view.flushed_offset)
        ends = [s.next_offset for s in view.segments
                if not s.is_active and start < s.next_offset <= committed]
        # Copy up to the end of the first closed segment past `start`, or past it to
        # the first segment end that holds more than the tier's own bookkeeping: a
        # range of only COPY_* records waits for real data, or copying it would write
        # more of them, and an idle cluster would copy a tiny object forever.
        chunks: list[bytes] = []
        offset, target, substantive = start, None, False
        for end in ends:
            while offset < end:
                got = self._driver.read_committed_range(offset, end, _READ_CHUNK_BYTES)
                if not got:
                    raise TierError(f"the local log returned nothing at offset {offset}")
                chunks += got
                substantive = substantive or not all(map(_only_bookkeeping, got))
                offset = peek_batch_header(got[-1]).next_offset
                await asyncio.sleep(0)
            if substantive:
                target = end
                break
        if target is None:
            return False
        data = b"".join(chunks)
        segment_id = uuid.uuid4().hex
        epoch, now = self._epoch(), self._clock_ms()
        # On the hash chain from metadata.version 9: linked to the manifest of the
        # finished object this one follows (as the replicated tier state records it).
        prev = (self._controller.state.tier.chain_predecessor(start)
                if self._hash_chain() else None)
        # Indexing and hashing the batches is CPU work: off the loop. Their CRCs were
        # checked as the log served them; the object's own CRC-32C and SHA-256 cover
        # them from here on.
        manifest = await asyncio.to_thread(segment_manifest, self._cluster_id, segment_id,
                                           start, data, copier_id=self._node_id,
                                           copier_epoch=epoch, check_crcs=False,
                                           prev_manifest_sha256=prev)
        assert manifest.end_offset == target, (manifest.end_offset, target)
        obj = _object_of(manifest, ObjectKind.SEGMENT, now)
        await self._upload(obj, manifest, data)
        return True

    async def _hand_over_missing_range(self, start: int, local_start: int) -> bool:
        """This controller leads but its local log starts above the copied end (it was
        reset to a snapshot): hand leadership to a voter whose local log still holds
        `start` (its fetches say where its log starts), so the copy goes on without
        anyone restarting anything. TierError if no voter holds it."""
        status = self._driver.status()
        holders = sorted((r for r in status.replicas
                          if r.is_voter and r.replica_id != self._node_id
                          and 0 <= r.retained_start_offset <= start),
                         key=lambda r: (-r.log_end_offset, r.replica_id))
        missing = f"[{start}, {local_start})"
        if not holders:
            raise TierError(f"cannot copy offsets {missing}: this controller's local log "
                            f"starts at {local_start} (it was reset to a snapshot) and no "
                            "other voter has said it holds them")
        target = holders[0].replica_id
        if self._handing_over != (target, start):
            log.warning("tier_range_not_held", node=self._node_id, missing=missing,
                        to=target, action="transferring leadership to a voter that holds "
                        "them, so it copies them")
            self._handing_over = (target, start)
        refused = await self._controller.transfer_leadership(target)
        if refused is not None:
            raise TierError(f"cannot copy offsets {missing} (not held here); handing "
                            f"leadership to controller {target}, which holds them, was "
                            f"refused: {refused}")
        if self.metrics is not None:
            self.metrics.handovers.inc()
        return False

    async def _copy_snapshot(self, view: LocalLogView, objects: list[RemoteObject]) -> bool:
        latest = sf.latest_snapshot(self._driver.snapshot_dir)
        if latest is None or latest.end_offset > view.high_watermark:
            return False
        remote_ends = [o.end_offset for o in objects if o.kind is ObjectKind.SNAPSHOT]
        if remote_ends and max(remote_ends) >= latest.end_offset:
            return False
        path = self._driver.snapshot_dir / latest.file_name
        try:
            data = await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            return False  # pruned meanwhile: the next round takes the newer one
        now = self._clock_ms()
        manifest = await asyncio.to_thread(
            snapshot_manifest, self._cluster_id, uuid.uuid4().hex, latest.end_offset,
            latest.epoch, data, now, copier_id=self._node_id, copier_epoch=self._epoch(),
            hashed=self._hash_chain())
        await self._upload(_object_of(manifest, ObjectKind.SNAPSHOT, now), manifest, data)
        return True

    def _hash_chain(self) -> bool:
        level = self._controller.state.features.finalized_level(METADATA_VERSION)
        return enabled(Feature.TIER_HASH_CHAIN, level)

    async def _upload(self, obj: RemoteObject, manifest: Manifest, data: bytes) -> None:
        tier = self._controller.state.tier

        def announce() -> list[MetadataRecord]:
            # The level was read when the manifest was made; it may have moved since.
            # Either way the record must match the level it is written at.
            if bool(obj.manifest_sha256) != self._hash_chain():
                raise TierStateError("metadata.version moved across the SHA-256 level "
                                     "while the copy was prepared; the next round redoes it")
            return tier.copy_started_records(obj)

        if self._throttle is not None:
            # Before the copy is announced: a copy in progress is not kept waiting
            # (a successor would take it as abandoned after copy_timeout_ms).
            wait_s = self._throttle.delay_s()
            if wait_s > 0:
                if self.metrics is not None:
                    self.metrics.throttled.inc(wait_s)
                await asyncio.sleep(wait_s)
            self._throttle.took(len(data))
        await self._write("TierCopyStarted", announce)
        kind = obj.kind.name.lower()
        log.info("tier_copy_started", id=obj.segment_id, kind=kind, start_offset=obj.start_offset,
                 end_offset=obj.end_offset, bytes=len(data))
        started = time.monotonic()
        await asyncio.to_thread(self._store.put, manifest.data_key, data)
        await asyncio.to_thread(self._store.put, manifest.manifest_key, manifest.encode())
        await self._change_state(obj, SegmentState.COPY_FINISHED)
        if self.metrics is not None:
            self.metrics.copies.labels(kind=kind).inc()
            self.metrics.copied_bytes.labels(kind=kind).inc(len(data))
        log.info("tier_object_copied", id=obj.segment_id, kind=kind,
                 start_offset=obj.start_offset, end_offset=obj.end_offset, bytes=len(data),
                 ms=int((time.monotonic() - started) * 1000))

    async def _expire_remote(self, objects: list[RemoteObject]) -> bool:
        cfg = self.config
        expired = retention.remote_expired(objects, now_ms=int(time.time() * 1000),
                                           retention_ms=cfg.retention_ms,
                                           retention_bytes=cfg.retention_bytes)
        for obj in expired:
            await self._delete(obj, "retention")
        return bool(expired)

    # ------------------------------------------------------------------ metrics

    def _update_metrics(self, view: LocalLogView, objects: list[RemoteObject],
                        copied_end: int | None) -> None:
        m = self.metrics
        if m is None:
            return
        end = copied_end if copied_end is not None else view.local_start_offset
        m.copy_lag_offsets.set(max(0, view.high_watermark - end))
        m.copy_lag_bytes.set(sum(
            s.size_bytes for s in view.segments if s.next_offset > end))
        m.copied_end.set(-1 if copied_end is None else copied_end)
        m.local_start.set(view.local_start_offset)
        m.local_bytes.set(sum(s.size_bytes for s in view.segments))
        finished = [o for o in objects if o.state is SegmentState.COPY_FINISHED]
        m.remote_objects.set(len(finished))
        m.remote_bytes.set(sum(o.size_bytes for o in finished))


_BOOKKEEPING_TYPES = frozenset({"remote_log_segment", "remote_log_segment_state_change"})


def _only_bookkeeping(batch: bytes) -> bool:
    """True for a batch of the tier's own records only (the copier writes each of
    them as a batch of its own)."""
    decoded, _ = decode_batch(batch)
    if decoded.is_control or decoded.record_count > 4:
        return False
    return all(record_type(decode_record(r)) in _BOOKKEEPING_TYPES for r in decoded.records)


def _object_of(manifest: Manifest, kind: ObjectKind, now_ms: int) -> RemoteObject:
    return RemoteObject(manifest.segment_id, kind, manifest.start_offset, manifest.end_offset,
                        manifest.start_time_ms, manifest.end_time_ms, manifest.size_bytes,
                        manifest.last_epoch, manifest.copier_id, manifest.copier_epoch,
                        SegmentState.COPY_STARTED, now_ms,
                        manifest.sha256() if manifest.hashed else "")

