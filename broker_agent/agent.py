"""`BrokerAgent`: the publisher the loader feeds; runs the reconciler and applies its
plans to the local partition state.

The loader calls it on the Raft driver's task, which must not block: fsyncs there
would delay the next fetch (propagation latency) and the heartbeats (a large first
reconcile could even outlast the session timeout). So every plan is computed and
applied on one worker thread, in publication order (a single-thread executor is a
FIFO): the disk still moves from one committed image's state to the next. Images
are immutable, so handing them to the thread is safe.

A delta's plan is computed against the previous image; the first publication (and
a snapshot load) compares the image with what is on disk, which is what makes a
crash in the middle of a plan converge at the next start. The disk is read once
(the first full plan, or the first prewrite); later full plans use the store's
cache, which every change keeps equal to the disk (the store is the only writer).

While a snapshot decodes, the loader hands this agent its local partitions
(`prewrite`): their states are written as temp files in the background, so the
file system's work (two inodes per new replica) overlaps the decode, and the full
plan only renames them. Prewrites change nothing visible; the plan decides.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

from broker_agent.backend import ReplicaBackend
from broker_agent.delta import ImageChanges, SnapshotPartition
from broker_agent.image import MetadataImage
from broker_agent.local_state import LocalPartitionStore
from broker_agent.metrics import BrokerMetrics
from broker_agent.reconciler import (
    LocalReplica,
    Plan,
    desired_replica,
    plan_delta,
    plan_full,
)
from controller.gc_policy import gc_paused
from controller.log import get_logger

log = get_logger("metakraft.broker")


def desired_replicas(image: MetadataImage, broker_id: int) -> list[LocalReplica]:
    """Every replica `image` gives this broker (for a backend's full reconcile)."""
    wanted = []
    for topic, index, part in image.iter_partitions():
        replica = desired_replica(topic, index, part, broker_id)
        if replica is not None:
            wanted.append(replica)
    return wanted


class BrokerAgent:
    def __init__(self, broker_id: int, store: LocalPartitionStore,
                 metrics: BrokerMetrics | None = None,
                 backend: ReplicaBackend | None = None) -> None:
        self.broker_id = broker_id
        self.store = store
        self.metrics = metrics
        # The data plane the instructions drive (None: the local state only).
        self.backend = backend
        # The offset of the last image whose plan was applied (-1: none yet).
        self.reconciled_offset = -1
        self.plans_applied = 0
        # A local state write failed: the daemon stops (exit 1) rather than diverge.
        self.failure: BaseException | None = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reconcile")
        self._last: Future[None] | None = None

    def publish_full(self, image: MetadataImage) -> None:
        self._submit(image, None, None)

    def publish_delta(self, previous: MetadataImage, image: MetadataImage,
                      changes: ImageChanges) -> None:
        self._submit(image, previous, changes)

    def prewrite(self, partitions: list[SnapshotPartition]) -> None:
        """While a snapshot decodes (loader thread): start writing the local state of
        its partitions that differs from the disk, as temp files the coming full plan
        renames (`LocalPartitionStore.prewrite`); overlaps the file system's work with
        the decode. Changes nothing visible, so it is safe whatever comes next."""
        if self.failure is not None:
            return
        if not self.store.loaded:
            self.store.load()
        have = self.store.cached_replica
        wanted = []
        for topic, index, part in partitions:
            want = desired_replica(topic, index, part, self.broker_id)
            if want is not None and have(want.dir_name) != want:
                wanted.append(want)
        self.store.prewrite(wanted)

    def history_replaced(self) -> None:
        """The metadata was reloaded from the leader after its history was cut: the
        next image may be older than the last one reconciled. In publication order
        (after the plans already queued), forget that offset; the next plan is a full
        one against the disk."""
        if self.failure is None:
            self._last = self._worker.submit(self._forget_reconciled_offset)

    def _forget_reconciled_offset(self) -> None:
        self.reconciled_offset = -1

    def _submit(self, image: MetadataImage, previous: MetadataImage | None,
                changes: ImageChanges | None) -> None:
        if self.failure is None:
            self._last = self._worker.submit(self._reconcile, image, previous, changes)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until everything published so far is applied (tests, shutdown)."""
        last = self._last
        if last is not None:
            last.result(timeout_s)

    def close(self) -> None:
        self._worker.shutdown(wait=True)
        self.store.close()
        if self.failure is None and self.reconciled_offset >= 0:
            self.store.write_offset(self.reconciled_offset)

    # ------------------------------------------------------------ worker thread

    def _reconcile(self, image: MetadataImage, previous: MetadataImage | None,
                   changes: ImageChanges | None) -> None:
        if self.failure is not None:
            return
        try:
            if previous is None or changes is None:
                with gc_paused():
                    # The first full plan reads the disk; later ones its cache (the
                    # store is the only writer), so a snapshot load does not rescan.
                    plan = plan_full(self.store.cached(), image, self.broker_id)
                kind = "full"
            else:
                plan = plan_delta(previous, image, changes.changed_partitions,
                                  changes.removed_topics, self.broker_id)
                kind = "delta"
            self._apply(plan, image, kind)
            if kind == "full":
                self.store.write_offset(image.offset)
        except BaseException as exc:
            log.critical("reconcile_failed", offset=image.offset, exc_info=True)
            self.failure = exc

    def _apply(self, plan: Plan, image: MetadataImage, kind: str) -> None:
        assert image.offset >= self.reconciled_offset, (image.offset, self.reconciled_offset)
        started_ns = time.perf_counter_ns()
        self.store.apply_all(plan.instructions)
        # The local state first: what a crash leaves on disk is what the next start's
        # full plan hands the backend again.
        if self.backend is not None:
            if kind == "full":
                self.backend.apply_full(desired_replicas(image, self.broker_id), image)
            else:
                self.backend.apply(plan.instructions, image)
        self.reconciled_offset = image.offset
        if plan.empty:
            return
        self.plans_applied += 1
        if self.metrics is not None:
            self.metrics.reconciled(kind, len(plan.leaders), len(plan.followers),
                                    len(plan.deletes),
                                    (time.perf_counter_ns() - started_ns) / 1e9)
        # wall_ms lets a benchmark on the same machine time propagation across processes.
        log.info("reconciled", kind=kind, offset=image.offset, deletes=len(plan.deletes),
                 leaders=len(plan.leaders), followers=len(plan.followers),
                 apply_us=(time.perf_counter_ns() - started_ns) // 1000,
                 wall_ms=time.time_ns() // 1_000_000)
