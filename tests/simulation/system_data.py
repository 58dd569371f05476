"""The data plane inside the whole-system simulation (system.py).

Each broker id hosts real `PartitionReplica`s (real log files, one directory per
seed) for the partitions the committed metadata assigns it: leaders take acks=all
batches from producers, followers fetch from the leader they believe in, leaders
report the ISR they observe with AlterPartition through the real controllers (the
request is committed by Raft, or refused, or lost with a controller), and a
leader applies an ISR only once the committed change reaches it. Brokers fail as
processes: a crash closes every replica and the next start registers a new
incarnation (its broker epoch changes); a pause stops everything, heartbeats
included, so the controllers fence it, and it resumes as a zombie that still
believes it leads.

What is modelled: metadata propagation (a broker applies the committed metadata at
an offset it chose at random, never newer than the committed end, so its view
lags) and the network between brokers (a fetch is one call; a paused or crashed
broker answers nothing).

Checked after each step for the partitions it touched, and for all at the end
(`data_plane.check_partition`): every acknowledged record is in the log of every
member of the committed ISR and ELR at its offset; replica logs agree below their
high watermarks; each replica's own invariants.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Protocol

import attrs

from broker_agent.replica.config import DataPlaneConfig
from broker_agent.replica.isr_reports import IsrReporter, Proposed
from broker_agent.replica.partition import PartitionReplica, Role
from broker_agent.replica.records import DataRecord, encode_produce_batch
from controller.api.broker_convert import alter_partition_from_pb, alter_partition_results_to_pb
from controller.metadata import MetadataImage, ResourceType
from controller.metadata.alter_partition import AlterPartitionRequest, AlterPartitionResult
from controller.records.domain import PartitionRegistration
from controller.storage.log import LogConfig
from tests.simulation.data_plane import (
    apply_registration,
    check_partition,
    fetch_round,
    stored_values,
)

LAG_MAX_MS = 300
DATA_CONFIG = DataPlaneConfig(replica_lag_time_max_ms=LAG_MAX_MS)
BUGS = frozenset({"apply-isr-early", "skip-truncation"})
PartKey = tuple[str, int]  # (topic id, partition)


class Controllers(Protocol):
    """What the data plane needs of the simulated cluster around it."""

    now_ms: int

    def committed_ends(self) -> list[int]:
        """Every committed end offset so far, ascending (a broker's view is one)."""

    def image_at(self, end_offset: int) -> MetadataImage:
        """The committed metadata at `end_offset`."""

    def broker_epoch(self, broker_id: int) -> int:
        """The epoch the broker's current incarnation registered with (-1: none yet)."""

    def new_incarnation(self, broker_id: int) -> None:
        """The broker process restarted: it registers afresh."""

    def send_alter_partition(self, broker_id: int, request: AlterPartitionRequest,
                             token: int) -> bool:
        """Send to an active controller, its answer to come back with `token`
        (`SystemDataPlane.alter_partition_answered`); False: none was reachable."""


@attrs.define
class DataHost:
    """One broker process's data plane; the `IsrHost` of its `IsrReporter`."""

    broker_id: int
    directory: Path
    controllers: Controllers
    replicas: dict[PartKey, PartitionReplica] = attrs.field(factory=dict)
    topics: dict[PartKey, str] = attrs.field(factory=dict)
    # The partition epoch each replica last applied.
    seen: dict[PartKey, int] = attrs.field(factory=dict)
    # The committed end offset its metadata reflects.
    view_offset: int = 0
    up: bool = True
    paused: bool = False
    # The process's ISR reporter (a new one per process), and its requests in flight.
    reporter: IsrReporter = attrs.field(init=False)
    in_flight: dict[int, Proposed] = attrs.field(factory=dict)
    # IsrHost
    config: DataPlaneConfig = DATA_CONFIG
    metrics: None = None

    def __attrs_post_init__(self) -> None:
        self.reporter = IsrReporter(self)

    @property
    def partitions(self) -> dict[PartKey, PartitionReplica]:
        return self.replicas

    def broker_epoch(self) -> int:
        return self.controllers.broker_epoch(self.broker_id)

    def clock_ms(self) -> int:
        return self.controllers.now_ms

    def may_join_isr(self, broker_id: int) -> bool:
        """As the manager: registered, unfenced and not shutting down in its view."""
        image = self.controllers.image_at(self.view_offset)
        return any(b.broker_id == broker_id and not b.fenced and not b.in_controlled_shutdown
                   for b in image.brokers)

    @property
    def running(self) -> bool:
        return self.up and not self.paused

    def dir_of(self, key: PartKey) -> Path:
        return self.directory / f"{key[0]}-{key[1]}"


@attrs.define
class Pending:
    broker: int
    key: PartKey
    leader_epoch: int
    base_offset: int
    values: list[str]


class SystemDataPlane:
    def __init__(self, seed: int, root: Path, brokers: tuple[int, ...],
                 controllers: Controllers, bugs: frozenset[str] = frozenset()) -> None:
        assert bugs <= BUGS, bugs
        # Its own generator: the cluster's draws (and so its faults) stay as they were.
        self.rng = random.Random(seed * 7907 + 5)
        self.root = root
        self.bugs = bugs
        self.controllers = controllers
        self.hosts = {b: DataHost(b, root / f"broker-{b}", controllers) for b in brokers}
        self.next_token = 0
        self.pending: list[Pending] = []
        # Per partition: offset -> value of every acknowledged record.
        self.acked: dict[PartKey, dict[int, str]] = {}
        self.next_value = 0
        self.counts = {"acked": 0, "truncations": 0, "isr_reports": 0, "isr_refused": 0,
                       "zombie_refusals": 0, "crashes": 0, "pauses": 0}

    def close(self) -> None:
        for host in self.hosts.values():
            for replica in host.replicas.values():
                replica.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # --------------------------------------------------------------- the world

    def process_running(self, broker_id: int) -> bool:
        return self.hosts[broker_id].running

    def step(self, faults: bool) -> None:
        """One random action; `faults`: crashes and pauses may start."""
        action = self.rng.choices(
            ("produce", "fetch", "flush", "isr", "propagate", "crash", "restart", "pause",
             "resume"),
            weights=(25, 30, 12, 8, 12, 1 if faults else 0, 3, 1 if faults else 0, 3))[0]
        touched = getattr(self, f"_{action}")()
        self._acknowledge()
        for key in touched:
            self._check_key(key)

    def heal(self) -> None:
        """The fault window is over: every broker runs again."""
        for host in self.hosts.values():
            host.paused = False
            if not host.up:
                self._start(host)

    # ------------------------------------------------------------ actions

    def _running(self) -> list[DataHost]:
        return [h for h in self.hosts.values() if h.running]

    def _produce(self) -> set[PartKey]:
        hosts = self._running()
        if not hosts:
            return set()
        host = self.rng.choice(hosts)
        led = [k for k, r in host.replicas.items() if r.role is Role.LEADER]
        if not led:
            return set()
        key = self.rng.choice(sorted(led))
        replica = host.replicas[key]
        if len(replica.isr) < replica.min_isr:
            return set()  # NOT_ENOUGH_REPLICAS: nothing appended
        values = [f"v{self.next_value + i}" for i in range(self.rng.randint(1, 3))]
        self.next_value += len(values)
        batch = encode_produce_batch([DataRecord(None, v.encode()) for v in values])
        result = replica.append_as_leader(batch, None, "", "", self.controllers.now_ms)
        self.pending.append(Pending(host.broker_id, key, replica.leader_epoch,
                                    result.base_offset, values))
        return {key}

    def _fetch(self) -> set[PartKey]:
        hosts = self._running()
        if not hosts:
            return set()
        host = self.rng.choice(hosts)
        touched = set()
        for key, follower in sorted(host.replicas.items()):
            if follower.role is not Role.FOLLOWER or follower.leader_id not in self.hosts:
                continue
            leader_host = self.hosts[follower.leader_id]
            leader = leader_host.replicas.get(key) if leader_host.running else None
            if leader is None:
                continue  # no answer: the real fetcher backs off and tries again
            outcome = fetch_round(leader, follower,
                                  self.controllers.broker_epoch(host.broker_id),
                                  self.controllers.now_ms,
                                  skip_truncation="skip-truncation" in self.bugs)
            self.counts["truncations"] += outcome == "truncated"
            if outcome == "fenced" and leader.role is Role.LEADER and \
                    leader.leader_epoch < follower.leader_epoch:
                self.counts["zombie_refusals"] += 1
            touched.add(key)
        return touched

    def _flush(self) -> set[PartKey]:
        touched = set()
        for host in self._running():
            for key, replica in host.replicas.items():
                if replica.log is not None:
                    replica.log.flush()
                if replica.role is Role.LEADER and replica.maybe_advance_high_watermark():
                    touched.add(key)
        return touched

    def _isr(self) -> set[PartKey]:
        """A leader's ISR report: the real `IsrReporter` decides what to propose (and
        what to send again), the real controllers decide, its `answered` takes the
        answer; the ISR itself changes only once the committed change reaches the
        broker (`_apply_view`)."""
        hosts = self._running()
        if not hosts:
            return set()
        host = self.rng.choice(hosts)
        request, proposed = host.reporter.proposals()
        if not proposed:
            return set()
        if "apply-isr-early" in self.bugs:
            for key, (_, wanted) in proposed.items():
                host.replicas[key].isr = wanted  # the planted bug: before (and whether) it commits
        self.counts["isr_reports"] += 1
        self.next_token += 1
        host.in_flight[self.next_token] = proposed
        if not self.controllers.send_alter_partition(host.broker_id,
                                                     alter_partition_from_pb(request),
                                                     self.next_token):
            self.alter_partition_answered(host.broker_id, self.next_token, None)
        return set()

    def alter_partition_answered(self, broker_id: int, token: int,
                                 results: tuple[AlterPartitionResult, ...] | None) -> None:
        """The controllers' answer to request `token` (None: it failed as a whole, the
        outcome unknown), to the reporter of the process that sent it."""
        host = self.hosts[broker_id]
        proposed = host.in_flight.pop(token, None)
        if proposed is None:
            return  # the process that sent it is gone
        host.reporter.answered(proposed, None if results is None else
                               alter_partition_results_to_pb(results), "no answer")
        self.counts["isr_refused"] += 0 if results is None else \
            sum(not r.error.ok for r in results)

    def _propagate(self) -> set[PartKey]:
        hosts = self._running()
        if not hosts:
            return set()
        host = self.rng.choice(hosts)
        ends = [e for e in self.controllers.committed_ends() if e >= host.view_offset]
        # Mostly the newest; sometimes an older one (a slow loader).
        end = ends[-1] if self.rng.random() < 0.6 else self.rng.choice(ends)
        return self._apply_view(host, end)

    def _apply_view(self, host: DataHost, end: int) -> set[PartKey]:
        """What `ReplicaManager._apply` does with the broker's image at `end`."""
        host.view_offset = end
        image = self.controllers.image_at(end)
        wanted: dict[PartKey, tuple[str, PartitionRegistration]] = {}
        for topic in image.topics:
            for index, part in enumerate(topic.partitions):
                if host.broker_id in part.replicas:
                    wanted[(topic.topic_id, index)] = (topic.name, part)
        for key in [k for k in host.replicas if k not in wanted]:
            host.replicas.pop(key).delete()
            host.seen.pop(key, None)
        touched = set()
        for key, (name, part) in sorted(wanted.items()):
            replica = host.replicas.get(key)
            if replica is None:
                replica = host.replicas[key] = PartitionReplica(
                    host.broker_id, name, key[0], key[1], host.dir_of(key),
                    LogConfig(segment_bytes=8 << 20))
                host.topics[key] = name
            if host.seen.get(key) == part.partition_epoch:
                continue
            host.seen[key] = part.partition_epoch
            apply_registration(replica, part, _min_isr(image, name), self.controllers.now_ms)
            touched.add(key)
        return touched

    def _crash(self) -> set[PartKey]:
        hosts = self._running()
        if len(hosts) < 2:
            return set()
        host = self.rng.choice(hosts)
        host.up = False
        for replica in host.replicas.values():
            replica.close()
        host.replicas.clear()
        host.seen.clear()
        host.in_flight.clear()  # its answers go nowhere
        host.reporter = IsrReporter(host)
        self.counts["crashes"] += 1
        return set()

    def _restart(self) -> set[PartKey]:
        down = [h for h in self.hosts.values() if not h.up]
        return self._start(self.rng.choice(down)) if down else set()

    def _start(self, host: DataHost) -> set[PartKey]:
        """A new process: it registers a new incarnation and, its metadata caught up,
        opens the replicas assigned to it (and removes the directories of others)."""
        host.up = True
        self.controllers.new_incarnation(host.broker_id)
        touched = self._apply_view(host, self.controllers.committed_ends()[-1])
        if host.directory.exists():
            wanted = {host.dir_of(k).name for k in host.replicas}
            for path in host.directory.iterdir():
                if path.name not in wanted:
                    PartitionReplica.remove_dir(path)
        return touched

    def _pause(self) -> set[PartKey]:
        hosts = self._running()
        if len(hosts) >= 2:
            self.rng.choice(hosts).paused = True
            self.counts["pauses"] += 1
        return set()

    def _resume(self) -> set[PartKey]:
        paused = [h for h in self.hosts.values() if h.paused]
        if paused:
            # It carries on where it stopped: its view of the metadata is stale.
            self.rng.choice(paused).paused = False
        return set()

    # ---------------------------------------------------------------- checks

    def _acknowledge(self) -> None:
        keep = []
        for p in self.pending:
            host = self.hosts[p.broker]
            replica = host.replicas.get(p.key) if host.running else None
            if not host.up or (replica is None and host.running):
                continue  # the process or its replica went away: never acknowledged
            if replica is None:
                keep.append(p)  # paused: it may still answer once it resumes
                continue
            if replica.role is not Role.LEADER or replica.leader_epoch != p.leader_epoch:
                continue  # the leadership ended first: the producer got an error
            if replica.high_watermark > p.base_offset + len(p.values) - 1:
                acked = self.acked.setdefault(p.key, {})
                for i, value in enumerate(p.values):
                    acked[p.base_offset + i] = value
                self.counts["acked"] += len(p.values)
            else:
                keep.append(p)
        self.pending = keep

    def _check_key(self, key: PartKey) -> None:
        image = self.controllers.image_at(self.controllers.committed_ends()[-1])
        found = _partition(image, key)
        if found is None:
            self.acked.pop(key, None)  # the topic was deleted: its records went with it
            return
        name, part = found
        logs, hws = {}, {}
        for host in self.hosts.values():
            replica = host.replicas.get(key)
            if replica is None and not host.dir_of(key).exists():
                continue
            logs[host.broker_id] = stored_values(replica, host.broker_id, name, key[0],
                                                 key[1], host.dir_of(key))
            hws[host.broker_id] = 0 if replica is None else replica.high_watermark
            if replica is not None:
                replica.check()
        check_partition(f"{name}-{key[1]}", self.acked.get(key, {}), (*part.isr, *part.elr),
                        logs, hws)

    def check_all(self) -> None:
        keys = {k for h in self.hosts.values() for k in h.replicas} | set(self.acked)
        for key in sorted(keys):
            self._check_key(key)


def _partition(image: MetadataImage, key: PartKey) -> tuple[str, PartitionRegistration] | None:
    for topic in image.topics:
        if topic.topic_id == key[0] and key[1] < len(topic.partitions):
            return topic.name, topic.partitions[key[1]]
    return None


def _min_isr(image: MetadataImage, topic: str) -> int:
    for kind, name, key, value in image.configs:
        if kind == ResourceType.TOPIC and name == topic and key == "min.insync.replicas":
            return int(value)
    return 1
