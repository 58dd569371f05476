"""`PartitionReplica`: one partition's log on this broker, as leader or follower.

The core of the data plane, with no asyncio and no gRPC: the manager
(manager.py) calls it on its event loop and does the waiting, flushing and
networking. Every rule about offsets lives here:

- the leader appends producers' batches with its leader epoch and assigns
  offsets; an idempotent producer's retried batch is found, not written twice;
- the high watermark (HW) is the smallest of the leader's flushed offset and the
  fetch offsets of the in-sync followers; it never moves back while leading, and
  consumers read only below it;
- a follower's fetch carries the epoch of its last batch: when the leader's log
  has a different end for that epoch the follower diverged (a zombie leader's
  tail) and truncates to the common point before fetching again (KIP-320, as
  etcd's and DLedger's "compare and truncate"); so replica logs are prefixes of
  one another up to the HW;
- followers append the leader's batches verbatim (one format: the metadata log's
  batches, CRC-checked on every append and read).

The log is opened lazily: a partition nobody has produced to has no directory
(brokers may host a million replicas of idle partitions).
"""

from __future__ import annotations

import enum
import shutil
from pathlib import Path

import attrs

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.errors import DataPlaneError
from broker_agent.replica.producers import ProducerTable
from broker_agent.replica.records import (
    NO_PRODUCER,
    ProducerStamp,
    RecordFormatError,
    decode_record,
    stamp_of,
    stamp_origin,
)
from controller.log import get_logger
from controller.logformat.batch import (
    MAX_RECORDS_PER_BATCH,
    RecordBatch,
    iter_batches,
)
from controller.logformat.errors import StorageError
from controller.storage.leader_epoch import UNDEFINED_EPOCH, end_offset_for_epoch
from controller.storage.log import LogConfig, LogDamage, SegmentedLog

logger = get_logger("metakraft.broker.data")

TOPIC_ID_FILE = "topic-id"
RECOVERY_POINT_FILE = "recovery-point"


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@attrs.define
class FollowerProgress:
    """What the leader knows of one follower: its log end (the next offset it asked
    for, everything below it flushed on the follower), when it was last caught up,
    and the broker epoch it fetched with (the incarnation the progress belongs to)."""

    fetch_offset: int = -1
    last_caught_up_ms: int = 0
    broker_epoch: int = -1
    # Kafka's rule for "caught up": at the leader's log end when it fetched, or
    # past the log end the leader had at its previous fetch (then caught up as of
    # that fetch).
    last_fetch_leader_end: int = -1
    last_fetch_ms: int = 0

    def fetched(self, fetch_offset: int, leader_end: int, broker_epoch: int,
                now_ms: int) -> None:
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = now_ms
        elif fetch_offset >= self.last_fetch_leader_end >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.fetch_offset = fetch_offset
        self.broker_epoch = broker_epoch
        self.last_fetch_leader_end = leader_end
        self.last_fetch_ms = now_ms


@attrs.frozen
class AppendResult:
    base_offset: int
    last_offset: int
    append_time_ms: int
    duplicate: bool = False


@attrs.frozen
class Diverged:
    epoch: int
    end_offset: int


@attrs.frozen
class ReadResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging: Diverged | None = None


class PartitionReplica:
    """One replica of one partition. `directory` holds its log (created on the first
    append); `clock_ms` is monotonic time for lag, wall time is taken from batches."""

    # A broker hosts one per local replica (hundreds of thousands): no __dict__.
    __slots__ = ("_log", "_log_config", "broker_id", "damage", "directory", "followers",
                 "high_watermark", "isr", "leader_epoch", "leader_id",
                 "leadership_start_offset", "min_isr", "partition", "partition_epoch",
                 "pending_isr", "producers", "replicas", "role", "topic", "topic_id")

    def __init__(self, broker_id: int, topic: str, topic_id: str, partition: int,
                 directory: Path, log_config: LogConfig) -> None:
        self.broker_id = broker_id
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.directory = directory
        self._log_config = log_config
        self.role = Role.FOLLOWER
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        # Invariant: log_start_offset <= high_watermark <= log_end_offset (checked by
        # `check`); while leading it only grows.
        self.high_watermark = 0
        self.followers: dict[int, FollowerProgress] = {}
        # Leader: the log end when this leadership began (a follower joins the ISR
        # only past it), and the ISR sent to the controller and not committed yet
        # (None: none in flight). The HW counts its new members already (Kafka's
        # "maximal ISR"), so a member it adds never lacks a record below the HW.
        self.leadership_start_offset = 0
        self.pending_isr: tuple[int, ...] | None = None
        # The topic's min.insync.replicas (the manager keeps it current). Below it the
        # HW stands still (KIP-966): a replica that left the ISR meanwhile is an
        # eligible leader, which it can only be if it holds everything below the HW.
        self.min_isr = 1
        self.producers = ProducerTable()
        self._log: SegmentedLog | None = None
        # What recovery cut from records this replica had fsynced (None: nothing).
        self.damage: LogDamage | None = None
        if (directory / TOPIC_ID_FILE).exists():
            self._open_log()

    # ----------------------------------------------------------------- the log

    def _open_log(self) -> SegmentedLog:
        if self._log is None:
            id_file = self.directory / TOPIC_ID_FILE
            if id_file.exists() and id_file.read_text().strip() != self.topic_id:
                # The directory of a deleted topic with the same name: not ours.
                shutil.rmtree(self.directory)
            self.directory.mkdir(parents=True, exist_ok=True)
            if not id_file.exists():
                id_file.write_text(self.topic_id + "\n")
            # Damage to records this replica had fsynced is cut like a torn tail, and
            # said loudly: the records are fetched again from the leader, and a log
            # missing them serves nothing wrong (only less).
            self._log = SegmentedLog.open(self.directory, self._log_config,
                                          recovery_point_path=self.directory /
                                          RECOVERY_POINT_FILE, on_damage=self._damaged)
            self._rebuild_producers()
            self.high_watermark = max(self.high_watermark, self._log.start_offset)
        return self._log

    def _damaged(self, damage: LogDamage) -> None:
        self.damage = damage
        logger.error("partition_log_damaged", partition=self.name, damage=damage.describe(),
                  action="cut at the damage; the records are fetched again from the leader")

    @property
    def log(self) -> SegmentedLog | None:
        return self._log

    @property
    def log_end_offset(self) -> int:
        return 0 if self._log is None else self._log.end_offset

    @property
    def log_start_offset(self) -> int:
        return 0 if self._log is None else self._log.start_offset

    @property
    def flushed_offset(self) -> int:
        return 0 if self._log is None else self._log.flushed_offset

    @property
    def last_epoch(self) -> int:
        return UNDEFINED_EPOCH if self._log is None else self._log.last_epoch

    def _rebuild_producers(self) -> None:
        self.producers.clear()
        log = self._log
        if log is None or log.end_offset == log.start_offset:
            return
        offset = log.start_offset
        while offset < log.end_offset:
            batches = log.read_batches(offset, max_bytes=4 * 1024 * 1024)
            for batch in batches:
                stamp = stamp_of(batch.origin)
                if stamp is not None:
                    self.producers.record(stamp, batch.record_count, batch.base_offset)
            offset = batches[-1].next_offset

    # ------------------------------------------------------------- transitions

    def become_leader(self, leader_epoch: int, partition_epoch: int,
                      replicas: tuple[int, ...], isr: tuple[int, ...], now_ms: int) -> None:
        new_leadership = self.role is not Role.LEADER or leader_epoch != self.leader_epoch
        assert leader_epoch >= self.leader_epoch or self.role is not Role.LEADER, \
            (leader_epoch, self.leader_epoch)
        self.role = Role.LEADER
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        if isr != self.isr or new_leadership:
            self.pending_isr = None  # committed (or superseded): decide again
        self.isr = isr
        if new_leadership:
            # What we knew of followers belonged to another leadership.
            self.followers = {r: FollowerProgress(last_caught_up_ms=now_ms)
                              for r in replicas if r != self.broker_id}
            self.leadership_start_offset = self.log_end_offset
        else:
            for r in replicas:
                if r != self.broker_id:
                    self.followers.setdefault(r, FollowerProgress(last_caught_up_ms=now_ms))
            for gone in set(self.followers) - set(replicas):
                del self.followers[gone]
        self.maybe_advance_high_watermark()

    def become_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int,
                        replicas: tuple[int, ...], isr: tuple[int, ...]) -> None:
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        self.followers = {}
        self.pending_isr = None
        # Only what the leader told us is known to be committed.
        self.high_watermark = min(self.high_watermark, self.log_end_offset)

    # ------------------------------------------------------------------ checks

    def check_leader_epoch(self, epoch: int) -> None:
        """A request's idea of the leader epoch against ours (-1: unchecked)."""
        if epoch < 0 or epoch == self.leader_epoch:
            return
        if epoch < self.leader_epoch:
            raise DataPlaneError(dpb.FENCED_LEADER_EPOCH,
                                 f"leader epoch {epoch} is older than {self.leader_epoch}")
        raise DataPlaneError(dpb.UNKNOWN_LEADER_EPOCH,
                             f"leader epoch {epoch} is newer than this broker's "
                             f"{self.leader_epoch}: its metadata lags")

    def require_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise DataPlaneError(dpb.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {self.broker_id} does not lead {self.name}")

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # ------------------------------------------------------------ leader: writes

    def append_as_leader(self, raw_batch: bytes, stamp: ProducerStamp | None, principal: str,
                         client_address: str, now_wall_ms: int) -> AppendResult:
        """Check a producer's batch and append it with our offsets and epoch."""
        self.require_leader()
        try:
            batches = iter_batches(raw_batch)
        except StorageError as exc:
            raise DataPlaneError(dpb.CORRUPT_MESSAGE, f"the batch does not check: {exc}") \
                from None
        if len(batches) != 1:
            raise DataPlaneError(dpb.INVALID_RECORD,
                                 f"a produce carries one batch, this one {len(batches)}")
        batch = batches[0]
        if batch.base_offset != 0 or batch.is_control:
            raise DataPlaneError(dpb.INVALID_RECORD, "a produced batch has base offset 0 "
                                 f"and no control flag (got {batch.base_offset})")
        for index, body in enumerate(batch.records):
            try:
                decode_record(body)
            except RecordFormatError as exc:
                raise DataPlaneError(dpb.INVALID_RECORD, f"record {index}: {exc}") from None
        count = batch.record_count
        assert count <= MAX_RECORDS_PER_BATCH
        if stamp is not None:
            if stamp.producer_id < 0 or stamp.base_sequence < 0:
                raise DataPlaneError(dpb.INVALID_RECORD, "producer id and sequence are >= 0")
            written = self.producers.check(stamp, count)
            if written is not None:
                return AppendResult(written[0], written[1], now_wall_ms, duplicate=True)
        log = self._open_log()
        stored = RecordBatch(log.end_offset, self.leader_epoch, now_wall_ms, False,
                             stamp_origin(principal, client_address, stamp), batch.records)
        log.append(stored)
        if stamp is not None:
            self.producers.record(stamp, count, stored.base_offset)
        return AppendResult(stored.base_offset, stored.last_offset, now_wall_ms)

    def maybe_advance_high_watermark(self) -> bool:
        """Leader: HW = min(flushed here, fetch offsets of the in-sync followers), while
        the ISR is at least min ISR."""
        if self.role is not Role.LEADER:
            return False
        candidate = self.flushed_offset
        if len(self.isr) < self.min_isr:
            return False
        counted = self.isr if self.pending_isr is None else \
            (*self.isr, *(r for r in self.pending_isr if r not in self.isr))
        for replica in counted:
            if replica == self.broker_id:
                continue
            progress = self.followers.get(replica)
            candidate = min(candidate, -1 if progress is None else progress.fetch_offset)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def isr_change(self, now_ms: int, lag_max_ms: int) -> tuple[int, ...] | None:
        """Leader: the ISR it observes, if it differs from the committed one (None:
        no change). A follower leaves once it has not been caught up for
        `lag_max_ms` (and is not simply idle at our log end); a replica joins once
        its log reaches the HW and the start of this leadership and it is caught up
        (at our log end, or recently)."""
        if self.role is not Role.LEADER:
            return None
        end = self.log_end_offset
        keep = []
        for replica in self.isr:
            progress = self.followers.get(replica)
            if replica == self.broker_id or progress is None or \
                    progress.fetch_offset >= end or \
                    now_ms - progress.last_caught_up_ms <= lag_max_ms:
                keep.append(replica)
        join_at = max(self.high_watermark, self.leadership_start_offset)
        for replica in self.replicas:
            progress = self.followers.get(replica)
            if replica in self.isr or replica == self.broker_id or progress is None:
                continue
            caught_up = progress.fetch_offset >= end or \
                now_ms - progress.last_caught_up_ms <= lag_max_ms
            if progress.broker_epoch >= 0 and progress.fetch_offset >= join_at and caught_up:
                keep.append(replica)
        wanted = tuple(keep)
        return None if wanted == self.isr else wanted

    # ------------------------------------------------------------- leader: reads

    def read_for_follower(self, replica_id: int, fetch_offset: int, last_fetched_epoch: int,
                          max_bytes: int, now_ms: int, broker_epoch: int = -1) -> ReadResult:
        """A follower's fetch: record its progress (HW may move), check divergence,
        and return the batches from `fetch_offset` (beyond the HW)."""
        self.require_leader()
        if replica_id not in self.replicas:
            raise DataPlaneError(dpb.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {replica_id} is not a replica of {self.name}")
        if last_fetched_epoch >= 0 and self._log is not None:
            epoch, end = self._end_offset_for_epoch(last_fetched_epoch)
            if epoch != last_fetched_epoch or end < fetch_offset:
                return self._result(b"", Diverged(epoch, end))
        if fetch_offset > self.log_end_offset or fetch_offset < self.log_start_offset:
            raise DataPlaneError(dpb.OFFSET_OUT_OF_RANGE,
                                 f"follower fetch offset {fetch_offset} outside "
                                 f"[{self.log_start_offset}, {self.log_end_offset}]")
        progress = self.followers.setdefault(replica_id, FollowerProgress())
        progress.fetched(fetch_offset, self.log_end_offset, broker_epoch, now_ms)
        self.maybe_advance_high_watermark()
        records = b"" if self._log is None or fetch_offset == self.log_end_offset else \
            b"".join(self._log.read(fetch_offset, max_bytes))
        return self._result(records)

    def _end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch` in our history, where it ends), counting this
        leadership as an epoch that starts at `leadership_start_offset` even before we
        appended in it (Kafka assigns it in the epoch cache on becoming leader): a
        follower whose last epoch is newer than all our batches but older than our
        leadership then keeps what we share, instead of being told to drop it all."""
        assert self._log is not None
        entries = self._log.epoch_history()
        if not entries or entries[-1][0] < self.leader_epoch:
            entries = [*entries, (self.leader_epoch, self.leadership_start_offset)]
        return end_offset_for_epoch(entries, epoch, self.log_end_offset)

    def read_for_consumer(self, fetch_offset: int, max_bytes: int) -> ReadResult:
        self.require_leader()
        if not self.log_start_offset <= fetch_offset <= self.high_watermark:
            raise DataPlaneError(dpb.OFFSET_OUT_OF_RANGE,
                                 f"offset {fetch_offset} outside [{self.log_start_offset}, "
                                 f"{self.high_watermark}] (log start, high watermark)")
        if self._log is None or fetch_offset == self.high_watermark:
            return self._result(b"")
        return self._result(b"".join(self._log.read(fetch_offset, max_bytes,
                                                    max_offset=self.high_watermark)))

    def _result(self, records: bytes, diverging: Diverged | None = None) -> ReadResult:
        return ReadResult(records, self.high_watermark, self.log_start_offset,
                          self.log_end_offset, diverging)

    # --------------------------------------------------------------- follower

    def append_as_follower(self, records: bytes, leader_high_watermark: int) -> int:
        """Append the leader's batches (verified by the log) and take its HW; returns
        the number of bytes appended."""
        assert self.role is Role.FOLLOWER
        if records:
            log = self._open_log()
            log.append(records)
            for batch in iter_batches(records):
                stamp = stamp_of(batch.origin)
                if stamp is not None:
                    self.producers.record(stamp, batch.record_count, batch.base_offset)
        self.high_watermark = max(self.high_watermark,
                                  min(leader_high_watermark, self.log_end_offset))
        return len(records)

    def truncate_for_divergence(self, diverging: Diverged) -> int:
        """The leader's log ends epoch `diverging.epoch` at `end_offset`: cut ours to
        the point both logs share. Returns the new log end."""
        assert self.role is Role.FOLLOWER
        log = self._log
        if log is None:
            return 0
        if diverging.epoch < 0 or diverging.end_offset < 0:
            target = log.start_offset  # no epoch in common: nothing is shared
        else:
            # Kafka's rule: the smaller of the two ends of that epoch; when our floor
            # epoch differs, the next fetch checks again from the new end.
            own_epoch, own_end = log.end_offset_for_epoch(diverging.epoch)
            target = log.start_offset if own_epoch == UNDEFINED_EPOCH else \
                min(diverging.end_offset, own_end)
        return self.truncate_above(target)

    def truncate_above(self, offset: int) -> int:
        """Follower: drop what lies at or past `offset` (cut at the batch boundary at or
        below it: the next fetch brings the rest back). Returns the new log end."""
        assert self.role is Role.FOLLOWER
        log = self._log
        if log is None:
            return 0
        target = max(min(offset, log.end_offset), log.start_offset)
        if target < log.end_offset:
            self._truncate_to(target)
        return log.end_offset

    def _truncate_to(self, offset: int) -> None:
        log = self._log
        assert log is not None
        # Our log ends at a batch boundary of the leader's; the cut is one of ours.
        boundary = self._batch_boundary_at_or_below(offset)
        log.truncate_to(boundary)
        self.high_watermark = min(self.high_watermark, boundary)
        self._rebuild_producers()

    def _batch_boundary_at_or_below(self, offset: int) -> int:
        log = self._log
        assert log is not None
        if offset >= log.end_offset:
            return log.end_offset
        if offset <= log.start_offset:
            return log.start_offset
        # The batch holding `offset` starts at or below it.
        return log.read_batches(offset, max_bytes=1)[0].base_offset

    def reset_to(self, offset: int) -> None:
        """The leader's log starts above our end (retention): start over there."""
        log = self._open_log()
        log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset
        self.producers.clear()

    # ---------------------------------------------------------------- retention

    def apply_retention(self, now_wall_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Delete whole segments older than `retention_ms` or beyond `retention_bytes`
        (-1: no limit), never at or above the HW. Returns the new log start."""
        log = self._log
        if log is None:
            return 0
        cut = log.start_offset
        infos = log.segment_infos()
        size = sum(i.size_bytes for i in infos)
        for info in infos:
            if info.is_active or info.next_offset > self.high_watermark:
                break
            expired = retention_ms >= 0 and now_wall_ms - info.modified_ms > retention_ms
            too_big = retention_bytes >= 0 and size > retention_bytes
            if not (expired or too_big):
                break
            cut = info.next_offset
            size -= info.size_bytes
        if cut > log.start_offset:
            log.delete_below(cut)
        return log.start_offset

    # ------------------------------------------------------------------- misc

    def check(self) -> None:
        """The invariants (tests call it after every step)."""
        assert self.log_start_offset <= self.high_watermark <= self.log_end_offset, \
            (self.log_start_offset, self.high_watermark, self.log_end_offset)
        if self.role is Role.LEADER:
            assert self.leader_id == self.broker_id

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def delete(self) -> None:
        self.close()
        self.remove_dir(self.directory)

    @staticmethod
    def remove_dir(directory: Path) -> None:
        shutil.rmtree(directory, ignore_errors=True)



__all__ = ["NO_PRODUCER", "AppendResult", "Diverged", "FollowerProgress", "PartitionReplica",
           "ReadResult", "Role"]
