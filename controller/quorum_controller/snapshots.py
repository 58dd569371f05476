"""Controller snapshots: the metadata image at a committed offset, as a snapshot file.

Writing is cut into steps so the controller's loop keeps serving: each step reads
the next few topics (or the small sections) from the timeline *at the snapshot's
offset* -- a registry snapshot the controller keeps alive until the last step --
and appends their records to a `SnapshotWriter`. Newer writes go on meanwhile;
reads at a past offset do not see them. The record order is the one of
`MetadataState.snapshot_records` (features, brokers, topics and partitions,
configs, ACLs), so a snapshot replays into an equal image.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from controller.log import get_logger
from controller.logformat import SnapshotId
from controller.metadata import MetadataState
from controller.quorum.service import DriverStoppedError
from controller.records import MetadataRecord, encode_record
from controller.records.partition_wire import encode_partitions
from controller.storage import snapshot_file as sf
from controller.storage.snapshot_file import SnapshotReader, SnapshotWriter

log = get_logger("metakraft.controller")


def iter_snapshot_bytes(path: Path) -> Iterator[bytes]:
    """The encoded image records one at a time: loading 1M partitions must not hold a
    million records at once. The whole file (CRCs, footer) is verified here, before
    this returns, so a damaged file fails before the caller resets its state."""
    return SnapshotReader.open(path).records()


def iter_image_chunks(state: MetadataState, epoch: int, chunk_records: int, *,
                      voters: list[MetadataRecord] | None = None,
                      with_tier: bool = True) -> Iterator[list[bytes]]:
    """The image at `epoch` as encoded record lists of about `chunk_records` each (a
    topic's partitions are never split); between two chunks the caller may do other
    work, as long as the registry snapshot at `epoch` stays. PartitionRecords, nearly
    all of a snapshot, are encoded without messages (`encode_partitions`).

    A restore (`metakraft storage restore`) gives the new cluster's `voters` (the
    VotersRecord, or [] for a static quorum) instead of the state's, and leaves the
    old tier's objects out (`with_tier=False`)."""
    assert chunk_records > 0
    # Reads at `epoch` only from here on: older change hints can go.
    state.replication.forget_changes_up_to(epoch)
    head = (state.voters_snapshot_records(epoch) if voters is None else voters) \
        + state.features.snapshot_records(epoch) + state.cluster.snapshot_records(epoch)
    pending = [encode_record(r) for r in head]
    replication = state.replication
    for listing in replication.list_topics(epoch):
        tid = listing.topic_id
        pending.append(encode_record(replication.topic_snapshot_record(listing, epoch)))
        pending += encode_partitions(tid, replication.partitions_at(tid, epoch))
        if len(pending) >= chunk_records:
            yield pending
            pending = []
    pending += [encode_record(r) for r in state.tail_snapshot_records(epoch,
                                                                      with_tier=with_tier)]
    yield pending


class SnapshotJob:
    """One snapshot being written: `step()` until it returns True, then `finish()`."""

    def __init__(self, state: MetadataState, directory: Path, last_offset: int, epoch: int,
                 chunk_records: int) -> None:
        self.last_offset = last_offset
        self.snapshot_id = SnapshotId(last_offset + 1, epoch)
        self.started_s = time.monotonic()
        self._chunks = iter_image_chunks(state, last_offset, chunk_records)
        self._writer = SnapshotWriter(directory, self.snapshot_id)
        self.record_count = 0

    def step(self) -> bool:
        """Write the next chunk; True once every record is written (the timeline is
        no longer needed at `last_offset`)."""
        chunk = next(self._chunks, None)
        if chunk is None:
            return True
        self._writer.append(chunk)
        self.record_count += len(chunk)
        return False

    def finish(self) -> Path:
        """Footer, fsync, rename (blocking I/O: run it off the loop)."""
        return self._writer.freeze()

    def abort(self) -> None:
        self._writer.abort()


# Compacts the Raft log below a snapshot the state machine wrote (RaftDriver.compact).
Compact = Callable[[SnapshotId], Awaitable[None]]
# Queues work on the Raft node task (QuorumPort.run_on_node_task).
RunOnNodeTask = Callable[[Callable[[Any], None]], None]
# Calls a function after a delay in seconds (the event loop's call_later); returns a
# handle whose cancel() drops the call.
CallLater = Callable[[float, Callable[[], None]], Any]


class SnapshotScheduler:
    """Decides when to snapshot (every `interval_bytes` of committed records, and at
    least `image_multiple` times the newest snapshot's size; or, once `interval_bytes`
    came since the newest, when it started `max_interval_ms` ago) and drives a
    `SnapshotJob` one step per node-task event, then finishes it off the loop,
    compacts the log below it and prunes old snapshot files. Steps take at most
    `busy_percent` of the time while a job runs: after a step of d seconds the next
    is queued d * (100 / busy_percent - 1) seconds later (at 100, at once)."""

    def __init__(self, state: MetadataState, directory: Path, *, interval_bytes: int,
                 chunk_records: int, run_on_node_task: RunOnNodeTask, compact: Compact,
                 release_history: Callable[[], None], keep: int = 2,
                 phase_bytes: int = 0, image_multiple: int = 0, busy_percent: int = 100,
                 max_interval_ms: int = 0, call_later: CallLater | None = None,
                 clock_s: Callable[[], float] = time.perf_counter) -> None:
        assert interval_bytes > 0 and chunk_records > 0 and keep >= 1
        assert 0 <= phase_bytes < interval_bytes and image_multiple >= 0
        assert max_interval_ms >= 0
        assert 1 <= busy_percent <= 100
        self._state = state
        self.directory = directory
        self._interval_bytes = interval_bytes
        self._image_multiple = image_multiple
        # Committed bytes between two snapshots: `interval_bytes`, raised by
        # `note_image_bytes` for a large image.
        self.threshold_bytes = interval_bytes
        # The image multiple keeps a burst of writes from paying for one snapshot after
        # another, but after the burst nothing would come until the log grew by that
        # multiple again: a restart would replay the whole burst (at 1M partitions a
        # follower's newest snapshot held 29% of the log). So once `interval_bytes`
        # came since the newest snapshot, one is also due `max_interval_ms` after that
        # snapshot started (0: never): at most one image written per interval.
        self._max_interval_ms = max_interval_ms
        # The machine's clock when the newest snapshot started (or when counting
        # started: the first committed batch).
        self._last_started_ms: int | None = None
        self._chunk_records = chunk_records
        self._run = run_on_node_task
        self._compact = compact
        # Lets the controller drop the timeline history the job no longer reads.
        self._release_history = release_history
        self._keep = keep
        # The first snapshot comes `phase_bytes` later than the interval says; later
        # ones every interval after it (see `QuorumController.enable_snapshots`).
        self._bytes_since = -phase_bytes
        self._busy_percent = busy_percent
        self._call_later = call_later
        self._clock_s = clock_s
        # The next step's delayed queueing (busy_percent < 100), until it fires.
        self._next_step: Any = None
        self._job: SnapshotJob | None = None
        self._finishing: asyncio.Task[None] | None = None
        self.snapshots_written = 0
        self.last_snapshot: SnapshotId | None = None

    def note_image_bytes(self, size_bytes: int) -> None:
        """The newest snapshot is `size_bytes` (written now, or found at start)."""
        self.threshold_bytes = max(self._interval_bytes, self._image_multiple * size_bytes)

    @property
    def pinned_offset(self) -> int | None:
        """The offset whose registry snapshot a running job still reads."""
        return None if self._job is None else self._job.last_offset

    def committed(self, batch_bytes: int, committed_next: int, epoch: int, now_ms: int) -> bool:
        """Count a committed batch (at `now_ms`); True if a snapshot job starts at
        `committed_next - 1` (its first step runs later, on the node task, and reads
        the registry snapshot there: the caller makes sure one exists)."""
        self._bytes_since += batch_bytes
        if self._last_started_ms is None:
            self._last_started_ms = now_ms
        if (self._job is None and self._finishing is None and committed_next > 0
                and self._due(now_ms)):
            self._bytes_since = 0
            self._last_started_ms = now_ms
            self._job = SnapshotJob(self._state, self.directory, committed_next - 1, epoch,
                                    self._chunk_records)
            self._run(self._step)
            return True
        return False

    def _due(self, now_ms: int) -> bool:
        if self._bytes_since >= self.threshold_bytes:
            return True
        assert self._last_started_ms is not None
        return (self._max_interval_ms > 0 and self._bytes_since >= self._interval_bytes
                and now_ms - self._last_started_ms >= self._max_interval_ms)

    def snapshot_next(self) -> None:
        """The next committed batch starts a snapshot, whatever came since the last."""
        self._bytes_since = max(self._bytes_since, self.threshold_bytes)

    def reset(self) -> None:
        """The state was replaced (a snapshot from the leader): drop a running job."""
        if self._job is not None:
            self._job.abort()
            self._job = None
        if self._next_step is not None:
            self._next_step.cancel()
            self._next_step = None
        self._bytes_since = 0

    def _step(self, _access: Any) -> None:
        job = self._job
        if job is None:
            return  # aborted
        began_s = self._clock_s()
        if not job.step():
            if self._busy_percent >= 100:
                self._run(self._step)
                return
            # Leave the node task to everything else for a while: the job's CPU is the
            # same, spread thinner, so concurrent requests (here and on the voters
            # this one's fetches serve) wait behind fewer steps.
            rest_s = (self._clock_s() - began_s) * (100 / self._busy_percent - 1)
            call_later = self._call_later or asyncio.get_running_loop().call_later
            self._next_step = call_later(rest_s, self._queue_step)
            return
        self._job = None
        self._release_history()
        self._finishing = asyncio.ensure_future(self._finish(job))

    def _queue_step(self) -> None:
        self._next_step = None
        # The controller may be stopping meanwhile: then the job goes with it.
        with contextlib.suppress(DriverStoppedError):
            self._run(self._step)

    async def _finish(self, job: SnapshotJob) -> None:
        try:
            path = await asyncio.to_thread(job.finish)
            sid = job.snapshot_id
            self.last_snapshot = sid
            self.snapshots_written += 1
            size = path.stat().st_size
            self.note_image_bytes(size)
            log.info("snapshot_written", end_offset=sid.end_offset, epoch=sid.epoch,
                     records=job.record_count, bytes=size,
                     ms=int((time.monotonic() - job.started_s) * 1000),
                     next_after_bytes=self.threshold_bytes)
            try:
                await self._compact(sid)
            except (ValueError, DriverStoppedError) as exc:
                # E.g. a follower whose flush lags the commit: the next one compacts.
                log.warning("compaction_skipped", end_offset=sid.end_offset, reason=str(exc))
            sf.prune_snapshots(self.directory, self._keep)
        except Exception:
            log.exception("snapshot_failed", end_offset=job.snapshot_id.end_offset)
            job.abort()
        finally:
            self._finishing = None

    async def close(self) -> None:
        self.reset()
        if self._finishing is not None:
            await asyncio.gather(self._finishing, return_exceptions=True)
