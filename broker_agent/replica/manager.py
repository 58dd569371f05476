"""`ReplicaManager`: the built-in `ReplicaBackend`, replicated partition logs.

The asyncio driver around the `PartitionReplica` cores, on the broker's event
loop (one thread owns every log):
- the agent hands it the reconciler's instructions from its worker thread
  (`apply`, `apply_full`); they run on the loop, in order, and the agent waits;
- producers' batches are appended by the leader, made durable by the flusher
  (one group commit per turn across every partition written, off the loop) and
  answered by `acks`: 0 at once, 1 once fsynced here, all once the high
  watermark passed them;
- consumers read below the high watermark; followers replicate through fetch
  sessions (sessions.py) answered here, and fetch from their leaders through one
  `ReplicaFetcher` per leader broker (fetcher.py);
- retention deletes whole segments below the high watermark.

Nothing here decides who leads: the controller does, through the metadata log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path

from broker_agent.backend import ReplicaReport
from broker_agent.image import MetadataImage, PartitionKey
from broker_agent.metrics import BrokerMetrics
from broker_agent.reconciler import (
    BecomeFollower,
    BecomeLeader,
    DeleteReplica,
    Instruction,
    LocalReplica,
    ReplicaRole,
)
from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.config import DEFAULT_DATA_PLANE, DataPlaneConfig
from broker_agent.replica.errors import DataPlaneError
from broker_agent.replica.fetcher import ReplicaFetchers
from broker_agent.replica.isr_reports import IsrReporter
from broker_agent.replica.partition import PartitionReplica, Role
from broker_agent.replica.records import NO_PRODUCER, ProducerStamp
from broker_agent.replica.sessions import FetchSession, FetchSessions, Position
from controller.log import get_logger
from controller.records import metadata_pb2 as mpb
from controller.rpc import RpcLimits
from controller.security.acl import AclBinding
from controller.security.tls import TlsCredentials
from controller.storage.flush import PendingFlush
from controller.storage.log import LogConfig

log = get_logger("metakraft.broker.data")

LOGS_DIR = "partition-logs"
ACKS_ALL = -1
DEFAULT_PRODUCE_TIMEOUT_MS = 30_000
MAX_WAIT_MS_LIMIT = 30_000
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024
MAX_FETCH_BYTES = 16 * 1024 * 1024
_TOPIC_CONFIG = int(mpb.CONFIG_RESOURCE_TYPE_TOPIC)


_DEFAULT_LIMITS = RpcLimits()


def _epoch_or_unset(partition: dpb.FetchPartition, field: str) -> int:
    return getattr(partition, field) if partition.HasField(field) else -1  # type: ignore[arg-type]


def _run_all(flushes: list[PendingFlush]) -> None:
    for flush in flushes:
        flush.run()


class ReplicaManager:
    def __init__(self, broker_id: int, data_dir: Path, config: DataPlaneConfig = DEFAULT_DATA_PLANE,
                 tls: TlsCredentials | None = None, limits: RpcLimits = _DEFAULT_LIMITS,
                 broker_epoch: Callable[[], int] = lambda: -1,
                 clock_ms: Callable[[], int] = lambda: time.monotonic_ns() // 1_000_000,
                 wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self.broker_id = broker_id
        self.root = data_dir / LOGS_DIR
        self.config = config
        self.tls = tls
        self.limits = limits
        self.broker_epoch = broker_epoch
        self.clock_ms = clock_ms
        self.wall_ms = wall_ms
        self._log_config = LogConfig(segment_bytes=config.segment_bytes)
        self.image = MetadataImage.empty()
        self.partitions: dict[PartitionKey, PartitionReplica] = {}
        self.sessions = FetchSessions()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Offsets waited on: acks=1 (flushed) and acks=all (high watermark).
        self._flush_waiters: dict[PartitionKey, list[tuple[int, asyncio.Future[None]]]] = {}
        self._hw_waiters: dict[PartitionKey, list[tuple[int, asyncio.Future[None]]]] = {}
        # Consumers long-polling a partition.
        self._readers: dict[PartitionKey, set[asyncio.Event]] = {}
        self._dirty: set[PartitionKey] = set()
        self._flush_requests: list[tuple[set[PartitionKey], asyncio.Future[None]]] = []
        self._flush_wanted = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        # Follower side: one fetcher per leader broker.
        self.fetchers = ReplicaFetchers(self)
        self.refusals_fenced = 0
        self.metrics: BrokerMetrics | None = None
        # The leaders' ISR reports (isr_reports.py); the daemon gives it its sender.
        self.isr = IsrReporter(self)

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.root.mkdir(parents=True, exist_ok=True)
        self._tasks = [asyncio.create_task(self._flusher(), name="data-flusher"),
                       asyncio.create_task(self._retention(), name="data-retention"),
                       asyncio.create_task(self._isr_reports(), name="data-isr")]

    async def stop(self) -> None:
        await self.fetchers.stop_all()
        _flusher, *others = self._tasks
        for task in others:
            task.cancel()
        # The flusher finishes the group commit it is in (a cancelled one would
        # leave its log mid-flush) and one more of everything, then returns.
        self._closing = True
        self._dirty.update(k for k, r in self.partitions.items() if r.log is not None)
        self._flush_wanted.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.sessions.close_all()
        for key in list(self.partitions):
            self._fail_waiters(key, "the broker is stopping")
        for replica in self.partitions.values():
            replica.close()

    # ----------------------------------------------- instructions (the seam)

    def apply(self, instructions: Sequence[Instruction], image: MetadataImage) -> None:
        """From the agent's worker thread: apply a plan's instructions on the loop, in
        order; returns once done (raises what failed)."""
        self._call(lambda: self._apply(instructions, image))

    def apply_full(self, replicas: Sequence[LocalReplica], image: MetadataImage) -> None:
        """From the agent's worker thread: make the local replicas exactly `replicas`
        (start-up, a snapshot load): the ones not listed stop and keep their logs
        only if their directory is still wanted."""
        wanted = {(r.topic_id, r.partition) for r in replicas}

        def run() -> None:
            for key in [k for k in self.partitions if k not in wanted]:
                self._stop_replica(key, delete=False)
            self._apply([BecomeLeader(r) if r.role is ReplicaRole.LEADER else BecomeFollower(r)
                         for r in replicas], image)
            self._remove_unwanted_dirs({r.dir_name for r in replicas})

        self._call(run)

    def _call(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        assert loop is not None, "start() the manager first"
        done: Future[None] = Future()

        def run() -> None:
            try:
                fn()
                done.set_result(None)
            except BaseException as exc:  # handed to the agent's thread
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        done.result(timeout=120)

    def _apply(self, instructions: Iterable[Instruction], image: MetadataImage) -> None:
        configs_changed = image.configs is not self.image.configs
        self.image = image
        now_ms = self.clock_ms()
        if configs_changed:
            for led_key, led in self.partitions.items():
                if led.role is Role.LEADER:
                    self._set_min_isr(led)
                    if led.maybe_advance_high_watermark():
                        self._hw_moved(led_key, led)
        for instruction in instructions:
            if isinstance(instruction, DeleteReplica):
                key = (instruction.topic_id, instruction.partition)
                if key in self.partitions:
                    self._stop_replica(key, delete=True)
                else:
                    PartitionReplica.remove_dir(self.root / instruction.dir_name)
                continue
            want = instruction.replica
            key = (want.topic_id, want.partition)
            part = image.partition(key)
            assert part is not None, key
            replica = self.partitions.get(key)
            if replica is None:
                replica = PartitionReplica(self.broker_id, want.topic, want.topic_id,
                                           want.partition, self.root / want.dir_name,
                                           self._log_config)
                self.partitions[key] = replica
            if isinstance(instruction, BecomeLeader):
                self.fetchers.remove(key)
                self._set_min_isr(replica)
                replica.become_leader(part.leader_epoch, part.partition_epoch, part.replicas,
                                      part.isr, now_ms)
                if len(replica.isr) < replica.min_isr:
                    # The HW stands still below min ISR: acks=all writes waiting
                    # for it are answered now, as Kafka does.
                    self._fail_waiters(key, f"{replica.name}: ISR {list(replica.isr)} below "
                                       f"min.insync.replicas={replica.min_isr}",
                                       dpb.NOT_ENOUGH_REPLICAS_AFTER_APPEND, hw_only=True)
                self._hw_moved(key, replica)
            else:
                was_leader = replica.role is Role.LEADER
                replica.become_follower(part.leader, part.leader_epoch, part.partition_epoch,
                                        part.replicas, part.isr)
                if was_leader:
                    self._fail_waiters(key, f"broker {self.broker_id} no longer leads "
                                       f"{replica.name} (leader epoch {part.leader_epoch})")
                self.fetchers.follow(key, part.leader)
            self.sessions.notify(key)
            self._wake_readers(key)

    def _set_min_isr(self, replica: PartitionReplica) -> None:
        replica.min_isr = self.topic_config(replica.topic, "min.insync.replicas",
                                            self.config.min_insync_replicas)

    def _stop_replica(self, key: PartitionKey, delete: bool) -> None:
        replica = self.partitions.pop(key)
        self.fetchers.remove(key)
        self._fail_waiters(key, f"{replica.name} is no longer hosted here")
        self.sessions.notify(key)
        self._dirty.discard(key)
        if delete:
            replica.delete()
        else:
            replica.close()

    def _remove_unwanted_dirs(self, wanted: set[str]) -> None:
        if not self.root.exists():
            return
        for path in self.root.iterdir():
            if path.name not in wanted:
                PartitionReplica.remove_dir(path)

    def refresh_metrics(self) -> None:
        """The data plane's gauges (the daemon's once-a-second refresh)."""
        if self.metrics is None:
            return
        led = under = at = max_lag = 0
        for replica in self.partitions.values():
            if replica.role is not Role.LEADER:
                continue
            led += 1
            min_isr = self.topic_config(replica.topic, "min.insync.replicas",
                                        self.config.min_insync_replicas)
            under += len(replica.isr) < min_isr
            at += len(replica.isr) == min_isr
            end = replica.log_end_offset
            for follower in replica.isr:
                progress = replica.followers.get(follower)
                if progress is not None and progress.fetch_offset >= 0:
                    max_lag = max(max_lag, end - progress.fetch_offset)
        self.metrics.data_plane(led, under, at, max_lag)

    def reports(self) -> list[ReplicaReport]:
        return [ReplicaReport(r.topic, r.topic_id, r.partition,
                              ReplicaRole.LEADER if r.role is Role.LEADER else
                              ReplicaRole.FOLLOWER, r.leader_epoch, r.log_start_offset,
                              r.log_end_offset, r.high_watermark)
                for r in self.partitions.values()]

    # --------------------------------------------------------------- lookups

    def _key_of(self, topic: str, topic_id: str, partition: int) -> PartitionKey:
        if not topic_id:
            found = self.image.topic_ids.get(topic)
            if found is None:
                raise DataPlaneError(dpb.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"unknown topic {topic!r}")
            topic_id = found
        if partition < 0 or self.image.partition((topic_id, partition)) is None:
            raise DataPlaneError(dpb.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"unknown partition {topic or topic_id}-{partition}")
        return topic_id, partition

    def may_join_isr(self, broker_id: int) -> bool:
        """The image shows `broker_id` registered, unfenced and not shutting down (the
        controller would refuse it as INELIGIBLE_REPLICA otherwise)."""
        registration = self.image.brokers.get(broker_id)
        return registration is not None and not registration.fenced and \
            not registration.in_controlled_shutdown

    def topic_name(self, topic_id: str) -> str:
        topic = self.image.topics.get(topic_id)
        return "" if topic is None else topic.name

    def acl_version(self) -> int:
        """The authorizer's `AclSource`: the ACLs of the image this broker applied."""
        return self.image.acl_version

    def acl_bindings(self) -> Iterable[AclBinding]:
        return self.image.acls.values()

    def replica_of(self, topic: str, topic_id: str, partition: int) -> PartitionReplica:
        key = self._key_of(topic, topic_id, partition)
        replica = self.partitions.get(key)
        if replica is None:
            raise DataPlaneError(dpb.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {self.broker_id} hosts no replica of "
                                 f"{topic or topic_id}-{partition}")
        return replica

    def leader_fields(self, topic: str, topic_id: str, partition: int) -> tuple[int, str, int]:
        """(leader id, its address, leader epoch) as the image says (-1, "", -1: unknown)."""
        try:
            key = self._key_of(topic, topic_id, partition)
        except DataPlaneError:
            return -1, "", -1
        part = self.image.partition(key)
        assert part is not None
        return part.leader, self.image.broker_address(part.leader), part.leader_epoch

    def topic_config(self, topic: str, key: str, default: int) -> int:
        value = self.image.configs.get((_TOPIC_CONFIG, topic), {}).get(key)
        try:
            return default if value is None else int(value)
        except ValueError:
            return default

    # ------------------------------------------------------------------ produce

    async def produce(self, request: dpb.ProduceRequest, principal: str,
                      client_address: str) -> dpb.ProduceResponse:
        started = time.perf_counter()
        answer = await self._produce(request, principal, client_address)
        metrics = self.metrics
        if metrics is not None:
            acks = "all" if request.acks == ACKS_ALL else str(request.acks)
            metrics.produce_requests.labels(acks=acks,
                                            result=dpb.DataError.Name(answer.error)).inc()
            metrics.produce_time.labels(acks=acks).observe(time.perf_counter() - started)
            if answer.error == dpb.FENCED_LEADER_EPOCH:
                metrics.fenced_leader_refusals.inc()
        return answer

    async def _produce(self, request: dpb.ProduceRequest, principal: str,
                       client_address: str) -> dpb.ProduceResponse:
        try:
            replica = self.replica_of(request.topic, "", request.partition)
            replica.require_leader()
            try:
                replica.check_leader_epoch(
                    request.leader_epoch if request.HasField("leader_epoch") else -1)
            except DataPlaneError as exc:
                if exc.code == dpb.FENCED_LEADER_EPOCH:
                    self.refusals_fenced += 1
                raise
            acks = request.acks
            if acks not in (0, 1, ACKS_ALL):
                raise DataPlaneError(dpb.INVALID_RECORD, f"acks must be 0, 1 or -1, not {acks}")
            if acks == ACKS_ALL:
                min_isr = self.topic_config(replica.topic, "min.insync.replicas",
                                            self.config.min_insync_replicas)
                if len(replica.isr) < min_isr:
                    raise DataPlaneError(dpb.NOT_ENOUGH_REPLICAS,
                                         f"{replica.name}: ISR {list(replica.isr)} is smaller "
                                         f"than min.insync.replicas={min_isr}")
            stamp = None if request.producer_id == NO_PRODUCER else \
                ProducerStamp(request.producer_id, request.base_sequence)
            key = (replica.topic_id, replica.partition)
            result = replica.append_as_leader(request.batch, stamp, principal, client_address,
                                              self.wall_ms())
            if not result.duplicate:
                self._appended(key)
                if self.metrics is not None:
                    self.metrics.produced_records.inc(result.last_offset - result.base_offset + 1)
            if acks != 0:
                timeout_ms = request.timeout_ms or DEFAULT_PRODUCE_TIMEOUT_MS
                waiters = self._flush_waiters if acks == 1 else self._hw_waiters
                reached = replica.flushed_offset if acks == 1 else replica.high_watermark
                if reached <= result.last_offset:
                    await self._wait_for(waiters, key, result.last_offset, timeout_ms, replica)
            return dpb.ProduceResponse(base_offset=result.base_offset if acks else -1,
                                       log_append_time_ms=result.append_time_ms,
                                       leader_id=self.broker_id,
                                       leader_epoch=replica.leader_epoch,
                                       duplicate=result.duplicate)
        except DataPlaneError as exc:
            leader, address, epoch = self.leader_fields(request.topic, "", request.partition)
            return dpb.ProduceResponse(error=exc.code, message=exc.message,  # type: ignore[arg-type]
                                       base_offset=-1, leader_id=leader,
                                       leader_address=address, leader_epoch=epoch)

    async def _wait_for(self, waiters: dict[PartitionKey, list[tuple[int, asyncio.Future[None]]]],
                        key: PartitionKey, last_offset: int, timeout_ms: int,
                        replica: PartitionReplica) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.setdefault(key, []).append((last_offset, future))
        try:
            await asyncio.wait_for(future, timeout_ms / 1000)
        except TimeoutError:
            raise DataPlaneError(
                dpb.REQUEST_TIMED_OUT,
                f"{replica.name}: offset {last_offset} not acknowledged by the in-sync "
                f"replicas {list(replica.isr)} within {timeout_ms} ms (high watermark "
                f"{replica.high_watermark}); retry with the same producer id and sequence"
            ) from None

    def _release(self, waiters: dict[PartitionKey, list[tuple[int, asyncio.Future[None]]]],
                 key: PartitionKey, reached: int) -> None:
        pending = waiters.get(key)
        if not pending:
            return
        keep = []
        for offset, future in pending:
            if offset < reached:
                if not future.done():
                    future.set_result(None)
            elif not future.done():
                keep.append((offset, future))
        if keep:
            waiters[key] = keep
        else:
            del waiters[key]

    def _fail_waiters(self, key: PartitionKey, why: str,
                      code: int = dpb.NOT_LEADER_OR_FOLLOWER, hw_only: bool = False) -> None:
        for waiters in (self._hw_waiters,) if hw_only else (self._flush_waiters,
                                                             self._hw_waiters):
            for _, future in waiters.pop(key, []):
                if not future.done():
                    future.set_exception(DataPlaneError(
                        code, f"{why}: the write was not acknowledged (it may or may not be "
                        "kept; retry with the same producer id and sequence)"))

    def _appended(self, key: PartitionKey) -> None:
        self._dirty.add(key)
        self._flush_wanted.set()
        self.sessions.notify(key)

    def _hw_moved(self, key: PartitionKey, replica: PartitionReplica) -> None:
        self._release(self._hw_waiters, key, replica.high_watermark)
        self.sessions.notify(key)
        self._wake_readers(key)

    # ------------------------------------------------------------------ flushing

    async def flush(self, keys: set[PartitionKey]) -> None:
        """Return once the logs of `keys` are durable up to their current end."""
        if not keys:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_requests.append((keys, future))
        self._flush_wanted.set()
        await future

    async def _flusher(self) -> None:
        """One group commit per turn: every log written since the last turn, fsynced
        in one worker thread hop while the loop keeps appending."""
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            if self._closing and not self._dirty and not self._flush_requests:
                return
            requests, self._flush_requests = self._flush_requests, []
            keys = set(self._dirty)
            self._dirty.clear()
            for wanted, _ in requests:
                keys |= wanted
            pending = []
            for key in keys:
                replica = self.partitions.get(key)
                if replica is not None and replica.log is not None:
                    pending.append((key, replica, replica.log, replica.log.begin_flush()))
            try:
                await asyncio.to_thread(_run_all, [p[3] for p in pending])
            except OSError as exc:
                log.critical("partition_flush_failed", error=str(exc))
                for _, future in requests:
                    future.set_exception(exc)
                raise
            for key, replica, segmented, flush in pending:
                segmented.complete_flush(flush)
                if self.partitions.get(key) is not replica:
                    continue
                self._release(self._flush_waiters, key, replica.flushed_offset)
                if replica.maybe_advance_high_watermark():
                    self._hw_moved(key, replica)
            for _, future in requests:
                if not future.done():
                    future.set_result(None)
            if self._closing:
                self._flush_wanted.set()  # one more turn: return once nothing is left

    async def _isr_reports(self) -> None:
        while True:
            await asyncio.sleep(self.config.isr_check_interval_ms / 1000)
            try:
                await self.isr.report()
            except Exception:
                log.warning("isr_report_failed", exc_info=True)

    async def _retention(self) -> None:
        while True:
            await asyncio.sleep(self.config.retention_check_interval_ms / 1000)
            self.apply_retention()

    def apply_retention(self) -> None:
        now = self.wall_ms()
        for replica in self.partitions.values():
            if replica.log is None:
                continue
            retention_ms = self.topic_config(replica.topic, "retention.ms",
                                             self.config.retention_ms)
            retention_bytes = self.topic_config(replica.topic, "retention.bytes",
                                                self.config.retention_bytes)
            before = replica.log_start_offset
            after = replica.apply_retention(now, retention_ms, retention_bytes)
            if after != before:
                log.info("retention", partition=replica.name, log_start_offset=after)

    # ------------------------------------------------------------------- fetch

    async def fetch(self, request: dpb.FetchRequest) -> dpb.FetchResponse:
        max_wait_ms = max(0, min(request.max_wait_ms, MAX_WAIT_MS_LIMIT))
        max_bytes = min(request.max_bytes or DEFAULT_FETCH_MAX_BYTES, MAX_FETCH_BYTES)
        if self.metrics is not None:
            self.metrics.fetch_requests.labels(
                kind="consumer" if request.replica_id < 0 else "follower").inc()
        if request.replica_id < 0:
            return await self._consumer_fetch(request, max_wait_ms, max_bytes)
        return await self._follower_fetch(request, max_wait_ms, max_bytes)

    async def _consumer_fetch(self, request: dpb.FetchRequest, max_wait_ms: int,
                              max_bytes: int) -> dpb.FetchResponse:
        deadline = self.clock_ms() + max_wait_ms
        while True:
            answers = [self._consumer_read(p, max_bytes) for p in request.partitions]
            if any(a.records or a.error for a in answers) or self.clock_ms() >= deadline:
                return dpb.FetchResponse(partitions=answers)
            wake = asyncio.Event()
            keys = []
            for p in request.partitions:
                try:
                    key = self._key_of(p.topic, p.topic_id, p.partition)
                except DataPlaneError:
                    continue
                self._readers.setdefault(key, set()).add(wake)
                keys.append(key)
            try:
                await asyncio.wait_for(wake.wait(), max(deadline - self.clock_ms(), 0) / 1000)
            except TimeoutError:
                pass
            finally:
                for key in keys:
                    readers = self._readers.get(key)
                    if readers is not None:
                        readers.discard(wake)
                        if not readers:
                            del self._readers[key]

    def _wake_readers(self, key: PartitionKey) -> None:
        for wake in self._readers.get(key, ()):
            wake.set()

    def _consumer_read(self, p: dpb.FetchPartition, max_bytes: int) -> dpb.FetchedPartition:
        try:
            replica = self.replica_of(p.topic, p.topic_id, p.partition)
            replica.check_leader_epoch(_epoch_or_unset(p, "current_leader_epoch"))
            result = replica.read_for_consumer(p.fetch_offset, max_bytes)
            return dpb.FetchedPartition(
                topic=replica.topic, topic_id=replica.topic_id, partition=p.partition,
                high_watermark=result.high_watermark, log_start_offset=result.log_start_offset,
                log_end_offset=result.log_end_offset, records=result.records,
                leader_id=self.broker_id, leader_epoch=replica.leader_epoch)
        except DataPlaneError as exc:
            return self._fetch_error(p.topic, p.topic_id, p.partition, exc)

    def _fetch_error(self, topic: str, topic_id: str, partition: int,
                     exc: DataPlaneError) -> dpb.FetchedPartition:
        leader, address, epoch = self.leader_fields(topic, topic_id, partition)
        replica = None
        with contextlib.suppress(DataPlaneError):
            replica = self.partitions.get(self._key_of(topic, topic_id, partition))
        return dpb.FetchedPartition(
            topic=topic, topic_id=topic_id, partition=partition, error=exc.code,  # type: ignore[arg-type]
            message=exc.message, leader_id=leader, leader_address=address,
            leader_epoch=epoch,
            log_start_offset=-1 if replica is None else replica.log_start_offset,
            log_end_offset=-1 if replica is None else replica.log_end_offset,
            high_watermark=-1 if replica is None else replica.high_watermark)

    async def _follower_fetch(self, request: dpb.FetchRequest, max_wait_ms: int,
                              max_bytes: int) -> dpb.FetchResponse:
        if request.session_id == 0:
            session = self.sessions.open(request.replica_id)
        else:
            found = self.sessions.get(request.session_id, request.replica_id)
            if found is None or request.session_epoch != found.epoch + 1:
                return dpb.FetchResponse(error=dpb.FETCH_SESSION_NOT_FOUND,
                                         message=f"fetch session {request.session_id} "
                                         "unknown or out of step: send a full fetch")
            session = found
        session.epoch = request.session_epoch
        if request.replica_broker_epoch != session.broker_epoch:
            # Another incarnation (or the first registration): its progress counts
            # under the new epoch, so every partition is looked at again.
            session.broker_epoch = request.replica_broker_epoch
            session.ready.update(session.positions)
        forgotten = []
        for p in request.forgotten:
            forgotten.append((p.topic_id, p.partition))
        self.sessions.forget(session, forgotten)
        for p in request.partitions:
            self.sessions.update(session, (p.topic_id, p.partition),
                                 Position(p.fetch_offset,
                                          _epoch_or_unset(p, "last_fetched_epoch"),
                                          _epoch_or_unset(p, "current_leader_epoch")))
        deadline = self.clock_ms() + max_wait_ms
        while True:
            answers = self._session_answers(session, request.replica_id, max_bytes)
            if answers or self.clock_ms() >= deadline or \
                    self.sessions.get(session.session_id, request.replica_id) is None:
                return dpb.FetchResponse(session_id=session.session_id, partitions=answers)
            session.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(session.wake.wait(),
                                       max(deadline - self.clock_ms(), 0) / 1000)

    def _session_answers(self, session: FetchSession, replica_id: int,
                         max_bytes: int) -> list[dpb.FetchedPartition]:
        ready, session.ready = session.ready, set()
        answers: list[dpb.FetchedPartition] = []
        budget = max_bytes
        now_ms = self.clock_ms()
        for key in sorted(ready):
            position = session.positions.get(key)
            if position is None:
                continue
            topic_id, partition = key
            replica = self.partitions.get(key)
            try:
                if replica is None:
                    raise DataPlaneError(dpb.NOT_LEADER_OR_FOLLOWER,
                                         f"broker {self.broker_id} hosts no replica of "
                                         f"{topic_id}-{partition}")
                replica.require_leader()
                replica.check_leader_epoch(position.current_leader_epoch)
                if budget <= 0:
                    session.ready.add(key)  # answered next time
                    continue
                hw_before = replica.high_watermark
                result = replica.read_for_follower(replica_id, position.fetch_offset,
                                                   position.last_fetched_epoch, budget, now_ms,
                                                   session.broker_epoch)
                if replica.high_watermark != hw_before:
                    self._hw_moved(key, replica)
                    session.ready.discard(key)
            except DataPlaneError as exc:
                answers.append(self._fetch_error("", topic_id, partition, exc))
                continue
            if result.records or result.diverging is not None or \
                    result.high_watermark != session.sent_hw.get(key, -1):
                session.sent_hw[key] = result.high_watermark
                budget -= len(result.records)
                answers.append(dpb.FetchedPartition(
                    topic=replica.topic, topic_id=topic_id, partition=partition,
                    high_watermark=result.high_watermark,
                    log_start_offset=result.log_start_offset,
                    log_end_offset=result.log_end_offset, records=result.records,
                    diverging_epoch=None if result.diverging is None else dpb.DivergingEpoch(
                        epoch=result.diverging.epoch, end_offset=result.diverging.end_offset),
                    leader_id=self.broker_id, leader_epoch=replica.leader_epoch))
        return answers

    def list_offsets(self, request: dpb.ListOffsetsRequest) -> dpb.ListOffsetsResponse:
        try:
            replica = self.replica_of(request.topic, "", request.partition)
            replica.require_leader()
            return dpb.ListOffsetsResponse(
                log_start_offset=replica.log_start_offset,
                high_watermark=replica.high_watermark, log_end_offset=replica.log_end_offset,
                leader_id=self.broker_id, leader_epoch=replica.leader_epoch)
        except DataPlaneError as exc:
            leader, address, epoch = self.leader_fields(request.topic, "", request.partition)
            return dpb.ListOffsetsResponse(error=exc.code, message=exc.message,  # type: ignore[arg-type]
                                           leader_id=leader, leader_address=address,
                                           leader_epoch=epoch)
