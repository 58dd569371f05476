"""A seeded simulation of the data plane: the real partition cores and the real
controller logic, under faults, checked after every step.

What is real: `PartitionReplica` (append, replication, the high watermark, the
divergence check and truncation, ISR proposals, on real log files), the leaders'
`IsrReporter` (what to propose, what an answer proves), and the
controller's metadata managers (`tests/unit/metadata/support.Harness`: fencing by
session timeout, AlterPartition's validation, elections from the ISR then the ELR).
What is modelled: the network (a fetch round is one call; links between brokers go
down and up), metadata propagation (each broker applies the committed partition
state when it syncs, at random moments, so its view lags), processes (a crash
closes the replica, a restart reopens its files and registers a new incarnation),
a broker cut off from the controllers (no heartbeats, no metadata, still serving:
a zombie leader), and producers that send acks=all batches to the leader they
believe in, sometimes a stale one.

Checked after every step:
- no acknowledged record is lost: every member of the committed ISR holds every
  acknowledged record at the offset it was acknowledged at (an ELR member, which
  the controller may elect, too);
- replica logs never diverge below the high watermark: any two replicas hold the
  same batches below the smaller of their high watermarks;
- each replica's own invariants (`PartitionReplica.check`).

`run(seed, bugs)` plants bugs to show the checks catch them: "apply-isr-early" (a
leader applies the ISR it proposes before the controller commits it),
"skip-truncation" (a follower never sends the epoch of its last batch, so the
divergence check cannot run and it keeps a zombie's tail).
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import attrs

from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica.config import DataPlaneConfig
from broker_agent.replica.errors import DataPlaneError
from broker_agent.replica.isr_reports import IsrReporter
from broker_agent.replica.partition import PartitionReplica, Role
from broker_agent.replica.records import (
    DataRecord,
    decode_record,
    encode_produce_batch,
)
from controller.api.broker_convert import alter_partition_from_pb, alter_partition_results_to_pb
from controller.logformat.errors import StorageError
from controller.records.domain import PartitionRegistration
from controller.storage.log import LogConfig
from tests.simulation.invariants import InvariantViolation
from tests.unit.metadata.support import SESSION_MS, Harness

BROKERS = (1, 2, 3)
TOPIC = "t"
TICK_MS = 200
LAG_MAX_MS = 1_500
STEPS = 400
BUGS = frozenset({"apply-isr-early", "skip-truncation"})
DATA_CONFIG = DataPlaneConfig(replica_lag_time_max_ms=LAG_MAX_MS)


@attrs.define
class SimBroker:
    """One broker; the `IsrHost` of its `IsrReporter`."""

    broker_id: int
    directory: Path
    harness: Harness
    replica: PartitionReplica | None = None
    alive: bool = True
    # Cut off from the controllers: no heartbeats, no metadata (a zombie if it leads).
    isolated: bool = False
    # The partition epoch this broker last applied (-1: none).
    seen_partition_epoch: int = -1
    reporter: IsrReporter = attrs.field(init=False)
    config: DataPlaneConfig = DATA_CONFIG
    metrics: None = None

    def __attrs_post_init__(self) -> None:
        self.reporter = IsrReporter(self)

    @property
    def partitions(self) -> dict[tuple[str, int], PartitionReplica]:
        replica = self.replica
        return {} if replica is None else {(replica.topic_id, 0): replica}

    def broker_epoch(self) -> int:
        broker = self.harness.state.cluster.broker(self.broker_id)
        return -1 if broker is None else broker.broker_epoch

    def clock_ms(self) -> int:
        return self.harness.now_ms

    def may_join_isr(self, broker_id: int) -> bool:
        return True  # the controller's validation is what this simulation checks


@attrs.define
class Pending:
    broker: int
    leader_epoch: int
    base_offset: int
    values: list[str]


@attrs.define
class Stats:
    acked: int = 0
    leader_changes: int = 0
    truncations: int = 0
    isr_reports: int = 0


class DataPlaneSim:
    def __init__(self, seed: int, root: Path, bugs: frozenset[str] = frozenset()) -> None:
        assert bugs <= BUGS, bugs
        self.rng = random.Random(seed)
        self.bugs = bugs
        self.stats = Stats()
        self.h = Harness(seed)
        self.h.add_brokers(list(BROKERS))
        self.min_isr = self.rng.choice((1, 2))
        self.h.create(TOPIC, assignments=(BROKERS,),
                      configs=(("min.insync.replicas", str(self.min_isr)),))
        self.topic_id = self.h.state.replication.topic_id(TOPIC)
        self.brokers = {b: SimBroker(b, root / f"b{b}", self.h) for b in BROKERS}
        self.links_down: set[frozenset[int]] = set()
        self.pending: list[Pending] = []
        # offset -> value of every acknowledged record.
        self.acked: dict[int, str] = {}
        self.next_value = 0
        self.last_leader = self.h.part(TOPIC).leader
        for broker in self.brokers.values():
            self._open(broker)
            self._sync(broker)

    # ------------------------------------------------------------------ helpers

    def _open(self, broker: SimBroker) -> None:
        broker.replica = PartitionReplica(broker.broker_id, TOPIC, str(self.topic_id), 0,
                                          broker.directory, LogConfig(segment_bytes=8 << 20))
        broker.seen_partition_epoch = -1

    def _replica(self, broker_id: int) -> PartitionReplica | None:
        broker = self.brokers[broker_id]
        return broker.replica if broker.alive else None

    def _reachable(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.links_down and self.brokers[a].alive and \
            self.brokers[b].alive

    def _sync(self, broker: SimBroker) -> None:
        """The broker applies the committed partition state (as the manager does)."""
        replica = broker.replica
        if replica is None or not broker.alive or broker.isolated:
            return
        part = self.h.part(TOPIC)
        if part.partition_epoch == broker.seen_partition_epoch:
            return
        broker.seen_partition_epoch = part.partition_epoch
        apply_registration(replica, part, self.min_isr, self.h.now_ms)

    # ------------------------------------------------------------------ actions

    def step(self) -> None:
        action = self.rng.choices(
            ("produce", "fetch", "flush", "isr", "tick", "propagate", "crash", "restart",
             "isolate", "link"),
            weights=(20, 30, 15, 8, 10, 12, 2, 3, 2, 3))[0]
        getattr(self, f"_{action}")()
        self._acknowledge()
        self._watch_leader()

    def _produce(self) -> None:
        part = self.h.part(TOPIC)
        target = part.leader if self.rng.random() < 0.7 else self.rng.choice(BROKERS)
        replica = self._replica(target) if target in self.brokers else None
        if replica is None or replica.role is not Role.LEADER:
            return
        if len(replica.isr) < replica.min_isr:
            return  # NOT_ENOUGH_REPLICAS: nothing appended
        values = [f"v{self.next_value + i}" for i in range(self.rng.randint(1, 3))]
        self.next_value += len(values)
        batch = encode_produce_batch([DataRecord(None, v.encode()) for v in values])
        result = replica.append_as_leader(batch, None, "", "", self.h.now_ms)
        self.pending.append(Pending(target, replica.leader_epoch, result.base_offset, values))

    def _fetch(self) -> None:
        follower_id = self.rng.choice(BROKERS)
        follower = self._replica(follower_id)
        if follower is None or follower.role is not Role.FOLLOWER:
            return
        leader = self._replica(follower.leader_id) if follower.leader_id in self.brokers \
            else None
        if leader is None or not self._reachable(follower_id, follower.leader_id):
            return
        outcome = fetch_round(leader, follower, self._broker_epoch(follower_id), self.h.now_ms,
                              skip_truncation="skip-truncation" in self.bugs)
        self.stats.truncations += outcome == "truncated"

    def _flush(self) -> None:
        for broker in self.brokers.values():
            replica = broker.replica
            if broker.alive and replica is not None and replica.log is not None:
                replica.log.flush()
                replica.maybe_advance_high_watermark()

    def _isr(self) -> None:
        """A leader's ISR report, by its real `IsrReporter`, answered by the
        controller's validation (the ISR changes once the broker syncs the commit)."""
        broker = self.brokers[self.rng.choice(BROKERS)]
        if not broker.alive:
            return
        request, proposed = broker.reporter.proposals()
        if not proposed:
            return
        if "apply-isr-early" in self.bugs:
            for replica in broker.partitions.values():
                replica.isr = proposed[(replica.topic_id, 0)][1]  # the planted bug
        if broker.isolated:
            broker.reporter.answered(proposed, None, "the controllers are out of reach")
            return
        results = self.h.apply(self.h.state.replication.alter_partition(
            alter_partition_from_pb(request)))
        broker.reporter.answered(proposed, alter_partition_results_to_pb(results))
        self.stats.isr_reports += sum(r.error.ok for r in results)

    def _broker_epoch(self, broker_id: int) -> int:
        broker = self.h.state.cluster.broker(broker_id)
        return -1 if broker is None else broker.broker_epoch

    def _tick(self) -> None:
        """Time passes; the brokers that can reach the controllers heartbeat, and the
        controller fences the others once their session is over."""
        self.h.now_ms += TICK_MS * self.rng.randint(1, 20)
        for broker in self.brokers.values():
            if broker.alive and not broker.isolated:
                self.h.heartbeat(broker.broker_id)
        self.h.apply(self.h.state.cluster.fence_stale_brokers(self.h.now_ms))

    def _propagate(self) -> None:
        self._sync(self.brokers[self.rng.choice(BROKERS)])

    def _crash(self) -> None:
        broker = self.brokers[self.rng.choice(BROKERS)]
        if broker.alive and sum(b.alive for b in self.brokers.values()) > 1:
            broker.alive = False
            if broker.replica is not None:
                broker.replica.close()
            broker.replica = None
            broker.reporter = IsrReporter(broker)  # the next process starts afresh

    def _restart(self) -> None:
        dead = [b for b in self.brokers.values() if not b.alive]
        if not dead:
            return
        broker = self.rng.choice(dead)
        broker.alive = True
        self._open(broker)
        # A new incarnation: registered once the old one's session is over.
        self.h.now_ms += SESSION_MS + TICK_MS
        for other in self.brokers.values():
            if other.alive and not other.isolated and other is not broker:
                self.h.heartbeat(other.broker_id)
        self.h.apply(self.h.state.cluster.fence_stale_brokers(self.h.now_ms))
        self.h.register(broker.broker_id, incarnation=f"sim-{broker.broker_id}-{self.h.now_ms}")
        self.h.heartbeat(broker.broker_id)
        self._sync(broker)

    def _isolate(self) -> None:
        broker = self.brokers[self.rng.choice(BROKERS)]
        broker.isolated = not broker.isolated

    def _link(self) -> None:
        a, b = self.rng.sample(BROKERS, 2)
        self.links_down ^= {frozenset((a, b))}

    # ---------------------------------------------------------------- checks

    def _acknowledge(self) -> None:
        keep = []
        for p in self.pending:
            replica = self._replica(p.broker)
            if replica is None or replica.role is not Role.LEADER or \
                    replica.leader_epoch != p.leader_epoch:
                continue  # the leadership ended first: never acknowledged
            if replica.high_watermark > p.base_offset + len(p.values) - 1:
                for i, value in enumerate(p.values):
                    self.acked[p.base_offset + i] = value
                self.stats.acked += len(p.values)
            else:
                keep.append(p)
        self.pending = keep

    def _watch_leader(self) -> None:
        part = self.h.part(TOPIC)
        if part.leader != self.last_leader and part.leader != -1:
            self.stats.leader_changes += 1
            if self.last_leader != -1 and part.leader not in part.isr:
                raise InvariantViolation(f"leader {part.leader} outside the ISR {part.isr}")
        self.last_leader = part.leader if part.leader != -1 else self.last_leader

    def check(self) -> None:
        part = self.h.part(TOPIC)
        logs = {b: self._stored(b) for b in BROKERS}
        hws = {b: self._hw(b) for b in BROKERS}
        check_partition(TOPIC, self.acked, (*part.isr, *part.elr), logs, hws)
        for broker in self.brokers.values():
            if broker.alive and broker.replica is not None:
                broker.replica.check()

    def _hw(self, broker_id: int) -> int:
        replica = self._replica(broker_id)
        return 0 if replica is None else replica.high_watermark

    def _stored(self, broker_id: int) -> dict[int, str]:
        broker = self.brokers[broker_id]
        return stored_values(broker.replica, broker_id, TOPIC, str(self.topic_id), 0,
                             broker.directory)


# ------------------------------------------------- shared with the system simulation


def apply_registration(replica: PartitionReplica, part: PartitionRegistration, min_isr: int,
                       now_ms: int) -> None:
    """The committed registration reaches the replica's broker (what the manager does
    with a BecomeLeader / BecomeFollower instruction, without the I/O)."""
    replica.min_isr = min_isr
    if part.leader == replica.broker_id:
        replica.become_leader(part.leader_epoch, part.partition_epoch, part.replicas, part.isr,
                              now_ms)
    else:
        replica.become_follower(part.leader, part.leader_epoch, part.partition_epoch,
                                part.replicas, part.isr)


def fetch_round(leader: PartitionReplica, follower: PartitionReplica, broker_epoch: int,
                now_ms: int, skip_truncation: bool = False) -> str:
    """One fetch of `follower` from `leader`, answered and taken as the real fetcher
    takes it (fetcher.py); returns what happened: "fenced" (the leader epochs differ:
    FENCED / UNKNOWN_LEADER_EPOCH, nothing moves), "refused", "truncated" or
    "appended". `skip_truncation` is the planted bug: the follower never sends the
    epoch of its last batch, so the divergence check cannot run."""
    if leader.role is not Role.LEADER or leader.leader_epoch != follower.leader_epoch:
        return "fenced"
    last_epoch = -1 if skip_truncation else follower.last_epoch
    try:
        answer = leader.read_for_follower(follower.broker_id, follower.log_end_offset,
                                          last_epoch, 1 << 20, now_ms, broker_epoch)
    except DataPlaneError as exc:
        if exc.code == dpb.OFFSET_OUT_OF_RANGE:
            if follower.log_end_offset < leader.log_start_offset:
                follower.reset_to(leader.log_start_offset)
            elif leader.log_end_offset < follower.log_end_offset:
                follower.truncate_above(leader.log_end_offset)
        return "refused"
    if answer.diverging is not None:
        follower.truncate_for_divergence(answer.diverging)
        return "truncated"
    try:
        follower.append_as_follower(answer.records, answer.high_watermark)
    except StorageError:
        return "refused"  # not at our end: the real fetcher logs it and fetches again
    if follower.log is not None:
        follower.log.flush()  # a follower fsyncs before it fetches again
    return "appended"


def stored_values(replica: PartitionReplica | None, broker_id: int, topic: str, topic_id: str,
                  partition: int, directory: Path) -> dict[int, str]:
    """offset -> value of what a replica's log holds; read from its files when it is
    not open (a crash keeps what was written)."""
    opened = None
    if replica is None:
        if not directory.exists():
            return {}
        opened = replica = PartitionReplica(broker_id, topic, topic_id, partition, directory,
                                            LogConfig(segment_bytes=8 << 20))
    try:
        log = replica.log
        if log is None or log.end_offset == log.start_offset:
            return {}
        out: dict[int, str] = {}
        for batch in log.read_batches(log.start_offset, max_bytes=64 << 20):
            for i, body in enumerate(batch.records):
                out[batch.base_offset + i] = decode_record(body).value.decode()
        return out
    finally:
        if opened is not None:
            opened.close()


def check_partition(name: str, acked: dict[int, str], members: Iterable[int],
                    logs: dict[int, dict[int, str]], hws: dict[int, int]) -> None:
    """The data plane's two safety properties for one partition: every acknowledged
    record is in the log of every member of the committed ISR and ELR (replicas the
    controller may elect) at the offset it was acknowledged at; any two replicas'
    logs hold the same records below the smaller of their high watermarks."""
    for member in members:
        stored = logs.get(member, {})
        for offset, value in acked.items():
            if stored.get(offset) != value:
                raise InvariantViolation(
                    f"{name}: acknowledged record {value!r} at offset {offset} missing from "
                    f"broker {member} (ISR+ELR {tuple(members)}): it holds "
                    f"{stored.get(offset)!r}")
    brokers = sorted(logs)
    for i, a in enumerate(brokers):
        for b in brokers[i + 1:]:
            for offset in range(min(hws.get(a, 0), hws.get(b, 0))):
                if logs[a].get(offset) != logs[b].get(offset):
                    raise InvariantViolation(
                        f"{name}: brokers {a} and {b} disagree at offset {offset} below "
                        f"their high watermarks ({hws.get(a)}, {hws.get(b)}): "
                        f"{logs[a].get(offset)!r} vs {logs[b].get(offset)!r}")


def run(seed: int, bugs: Iterable[str] = (), steps: int = STEPS) -> Stats:
    """One seed; raises `InvariantViolation` naming what broke."""
    root = Path(tempfile.mkdtemp(prefix=f"data-sim-{seed}-"))
    try:
        sim = DataPlaneSim(seed, root, frozenset(bugs))
        for step in range(steps):
            try:
                sim.step()
                sim.check()
            except InvariantViolation as exc:
                raise InvariantViolation(f"seed {seed}, step {step}: {exc}") from None
        return sim.stats
    finally:
        shutil.rmtree(root, ignore_errors=True)
