"""A history test on real processes: several clients create, delete, reconfigure and
read topics while a nemesis partitions, pauses (SIGSTOP) and kills (-9) controllers
and broker agents; then the history is checked against the committed log.

    .venv/bin/python -m pytest tests/integration/test_history.py -q            # ~25 s
    HISTORY_SECONDS=300 .venv/bin/python -m pytest tests/integration/test_history.py -q

The log is the linearization order (Raft commits writes in one sequence), so the
check is exact, not a search:
- every write acknowledged with an effect is in the log exactly once, and no request
  id is in it twice (retries after lost answers were applied once);
- a write acknowledged before another was sent commits before it;
- every linearizable read's answer is the replay of the log at the offset it names,
  and that offset covers every write acknowledged and every read answered before
  the read was sent;
- a conditional config change ("cas": read the resource's mod offset, then alter
  only if it is unchanged) that was applied found that mod offset just before its
  batch (no lost update);
- a watcher that followed the log from offset 0 through the faults (resuming at
  another controller when its own died, paused or was cut off) saw every change
  the committed log holds, in order, each once;
- once healed, every broker's local replicas are its assignment in the final state.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from broker_agent.reconciler import replica_dir_name
from controller.api.client import AdminClient, AdminClientError
from controller.api.watch_client import Watcher
from controller.logformat.batch import RecordBatch
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    ConfigSource,
    CreatableTopic,
    MetadataState,
    OpType,
    ResourceType,
)
from tests.support.broker_processes import BrokerProcess
from tests.support.controller_processes import ControllerCluster, ControllerProcess
from tests.support.nemesis import Nemesis
from tests.support.polling import wait_until
from tests.support.watch_expect import watched_offsets

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SECONDS = float(os.environ.get("HISTORY_SECONDS", "20"))
CLIENTS = 4  # the last one only reads: it stays with the controller it reads from
BROKERS = (1, 2, 3)
TOPICS = tuple(f"h{i}" for i in range(6))
SEED = int(os.environ.get("HISTORY_SEED", "11"))


@attrs.define
class Op:
    client: int
    kind: str  # create | delete | config | cas | list | configs
    topic: str
    start_s: float
    end_s: float = 0.0
    # "ok", "unknown" (no answer in time), "failed" (refused, not applied)
    outcome: str = ""
    value: Any = None
    request_id: str = ""
    read_offset: int | None = None
    # cas: the mod offset it read and made its write conditional on.
    expected: int | None = None


def _run_client(index: int, cluster: ControllerCluster, stop: threading.Event,
                history: list[Op], lock: threading.Lock) -> None:
    rng = random.Random(SEED * 100 + index)
    bootstrap = [cluster.via(f"client{index}", i) for i in cluster.nodes]
    with AdminClient(bootstrap, timeout_ms=8_000) as admin:
        kinds = ("list", "configs") if index == CLIENTS - 1 else \
            ("create", "create", "delete", "config", "cas", "list", "configs")
        while not stop.is_set():
            kind = rng.choice(kinds)
            op = Op(index, kind, rng.choice(TOPICS), time.monotonic())
            try:
                op.value = _call(admin, op, rng, serial=len(history) * CLIENTS + index)
                op.outcome = "ok"
            except AdminClientError as exc:
                op.outcome = "unknown" if type(exc).__name__ == "OutcomeUnknownError" \
                    else "failed"
            op.end_s = time.monotonic()
            op.request_id = admin.last_request_id
            op.read_offset = admin.last_read_offset if kind in ("list", "configs") else None
            with lock:
                history.append(op)


def _call(admin: AdminClient, op: Op, rng: random.Random, serial: int) -> Any:
    if op.kind == "create":
        return admin.create_topics([CreatableTopic(op.topic, 1, rng.randint(1, 3))])
    if op.kind == "delete":
        return admin.delete_topics([op.topic])
    if op.kind in ("config", "cas"):
        resource = ConfigResource(ResourceType.TOPIC, op.topic)
        if op.kind == "cas":  # compare-and-set: read the version, write if unchanged
            (seen,) = admin.describe_configs([resource])
            op.expected = seen.mod_offset
        return admin.incremental_alter_configs([AlterConfigsResource(
            resource,
            # A value no other write sets: every acknowledged change is a record.
            (AlterConfigOp("retention.ms", OpType.SET, str(1000 + serial)),),
            op.expected)])
    if op.kind == "list":
        return tuple(sorted(t.name for t in admin.list_topics()))
    return _configs_view(admin.describe_configs([ConfigResource(ResourceType.TOPIC, op.topic)]))


def _configs_view(results: Any) -> Any:
    """What a configs read is compared on: per resource, its error and dynamic values."""
    return tuple((r.error.code, tuple(sorted((e.key, e.value) for e in r.entries
                                             if e.source is ConfigSource.DYNAMIC_TOPIC)))
                 for r in results)


def _nemesis(cluster: ControllerCluster, brokers: dict[int, BrokerProcess], nemesis: Nemesis,
             stop: threading.Event, faults: list[str]) -> None:
    rng = random.Random(SEED)
    names = [cluster.name(i) for i in cluster.nodes]
    clients = [f"client{i}" for i in range(CLIENTS)]
    while not stop.wait(rng.uniform(0.5, 1.5)):
        leader = cluster.active_node()
        everyone: list[ControllerProcess | BrokerProcess] = [*cluster.nodes.values(),
                                                             *brokers.values()]
        victim = leader if leader is not None and rng.random() < 0.5 else rng.choice(everyone)
        if isinstance(victim, BrokerProcess):
            fault = rng.choice(("isolate", "pause", "kill"))
            name = f"b{victim.broker_id}"
        else:
            fault = rng.choice(("isolate", "isolate", "split_clients", "pause", "kill", "slow"))
            name = cluster.name(victim.node_id)
        faults.append(f"{fault}:{name}")
        if fault == "isolate":
            nemesis.isolate(name, names)  # a broker: from every controller
        elif fault == "split_clients":
            for client in rng.sample(clients, 2):
                nemesis.cut(client, name)
        elif fault == "slow":
            for other in names:
                nemesis.delay(name, other, rng.randint(50, 300))
        elif fault == "pause":
            victim.signal(signal.SIGSTOP)
        elif fault == "kill":
            victim.kill()
        stop.wait(rng.uniform(1.0, 3.0))
        nemesis.heal()
        if fault == "pause":
            victim.signal(signal.SIGCONT)
        elif fault == "kill":
            victim.start()


def _committed_log(cluster: ControllerCluster, barrier_request_id: str) -> list[RecordBatch]:
    """The committed log: every node's log agrees up to the barrier write's batch,
    which committed after everything in the history; keep up to it."""
    logs = [node.read_log() for node in cluster.nodes.values()]
    cut = None
    for log in logs:
        for i, batch in enumerate(log):
            if batch.origin.request_id == barrier_request_id:
                cut = log[:i + 1]
                break
        if cut is not None:
            break
    assert cut is not None, "the barrier write is in no log"
    end = cut[-1].next_offset
    want = [(b.base_offset, b.epoch, b.records) for b in cut]
    for log in logs:  # a majority holds it; any node that does has the same prefix
        if log and log[-1].next_offset >= end:
            mine = [(b.base_offset, b.epoch, b.records) for b in log if b.next_offset <= end]
            assert mine == want, "the logs differ below the commit point"
    return cut


class _Replay:
    """The committed log replayed, readable at the end of any batch."""

    def __init__(self, log: list[RecordBatch]) -> None:
        self.state = MetadataState(cluster_id="check", rng=random.Random(0))
        self.state.registry.create_snapshot(-1)
        self.ends = {0}
        for batch in log:
            if not batch.is_control:
                self.state.replay_encoded(batch.records, batch.base_offset)
            self.state.registry.create_snapshot(batch.last_offset)
            self.ends.add(batch.next_offset)

    def read(self, op: Op, offset: int) -> Any:
        epoch = offset - 1
        if op.kind == "list":
            return tuple(sorted(t.name for t in self.state.replication.list_topics(epoch)))
        return _configs_view(self.state.configs.describe_configs(
            [ConfigResource(ResourceType.TOPIC, op.topic)], epoch))


def _check(history: list[Op], log: list[RecordBatch]) -> dict[str, int]:
    by_id: dict[str, list[RecordBatch]] = {}
    for batch in log:
        if batch.origin.request_id and not batch.is_control:
            by_id.setdefault(batch.origin.request_id, []).append(batch)
    twice = {rid: [b.base_offset for b in bs] for rid, bs in by_id.items() if len(bs) > 1}
    assert not twice, f"request ids applied more than once: {twice}"
    replay = _Replay(log)
    ops = sorted(history, key=lambda o: o.start_s)
    acked: list[tuple[float, int]] = []  # (answered at, end offset of its batch)
    for op in ops:
        if op.outcome != "ok" or op.kind in ("list", "configs"):
            continue
        applied = any(r.error.ok for r in op.value)
        batches = by_id.get(op.request_id, [])
        if applied:
            assert batches, f"acknowledged {op} is not in the committed log: lost"
            acked.append((op.end_s, batches[0].next_offset))
        else:
            assert not batches, f"{op} answered with no effect but is in the log"
    # Real-time order of writes, and the reads.
    counts = {"writes": len(acked), "reads": 0, "unknown": 0}
    answered_reads: list[tuple[float, int]] = []
    for op in ops:
        if op.outcome == "unknown":
            counts["unknown"] += 1
        floor = max((end for at, end in acked if at < op.start_s), default=0)
        if op.outcome != "ok":
            continue
        if op.kind in ("list", "configs"):
            offset = op.read_offset
            assert offset is not None and offset in replay.ends, op
            read_floor = max((o for at, o in answered_reads if at < op.start_s), default=0)
            assert offset >= max(floor, read_floor), \
                f"stale read {op}: offset {offset} below {max(floor, read_floor)}"
            assert op.value == replay.read(op, offset), \
                f"read {op} differs from the log at {offset}: {replay.read(op, offset)}"
            answered_reads.append((op.end_s, offset))
            counts["reads"] += 1
        elif any(r.error.ok for r in op.value):
            own = by_id[op.request_id][0].base_offset
            assert own >= floor, f"{op} committed at {own}, before a write acknowledged " \
                f"ahead of it (at {floor})"
            if op.kind == "cas":
                found = replay.state.configs.mod_offset(
                    ConfigResource(ResourceType.TOPIC, op.topic), own - 1)
                assert found == op.expected, f"{op} applied at {own} although the mod " \
                    f"offset was {found}, not {op.expected}: a lost update"
                counts["cas_applied"] = counts.get("cas_applied", 0) + 1
        elif op.kind == "cas":
            counts["cas_refused"] = counts.get("cas_refused", 0) + 1
    return counts


class _Watch(threading.Thread):
    """Follows the log from offset 0 through the faults, as an integration would."""

    def __init__(self, cluster: ControllerCluster) -> None:
        super().__init__(daemon=True)
        # Starting at the second controller, which the default seed's nemesis kills
        # (any fault there makes the watcher resume elsewhere; the check is the same).
        ids = sorted(cluster.nodes)
        self.client = AdminClient([cluster.via("watcher", i) for i in ids[1:] + ids[:1]],
                                  timeout_ms=60_000)
        self.watcher = Watcher(self.client, from_offset=0, stall_timeout_ms=6_000)
        self.offsets: list[int] = []
        self.next_offset = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for update in self.watcher:
                self.offsets += [e.offset for e in update.events]
                self.next_offset = update.next_offset
        except BaseException as exc:  # reported by the test
            self.error = exc

    def stop(self) -> None:
        self.watcher.close()
        self.join(30)
        self.client.close()


def _assignment(topics: Any) -> dict[int, dict[str, bool]]:
    """Broker -> its replicas (directory name -> leads it) in described topics."""
    want: dict[int, dict[str, bool]] = {b: {} for b in BROKERS}
    for topic in topics:
        for part in topic.partitions:
            reg = part.registration
            for b in reg.replicas:
                want.setdefault(b, {})[replica_dir_name(topic.name, part.partition_id)] = \
                    reg.leader == b
    return want


def _brokers_converged(brokers: dict[int, BrokerProcess], want: dict[int, dict[str, bool]]
                       ) -> bool:
    """Every broker runs and holds exactly its replicas, as leader where it leads."""
    for b, broker in brokers.items():
        if broker.status()["state"] != "RUNNING":
            return False
        have = {name: doc["role"] == "leader" for name, doc in broker.local_state().items()}
        if have != want[b]:
            return False
    return True


def test_history_under_partitions_pauses_and_kills_is_linearizable(tmp_path: Path) -> None:
    nemesis = Nemesis(seed=SEED)
    # A cut-off leader believes it leads for 3 s (check quorum): a wide window for
    # stale reads, should reads ever be answered without confirming leadership.
    # Brokers silent for 3 s are fenced (their partitions' leadership moves).
    cluster = ControllerCluster(tmp_path, 3, nemesis=nemesis, session_timeout_ms=3_000,
                                extra_config="[raft]\ncheck_quorum_timeout_ms = 3000\n")
    brokers = {b: BrokerProcess(b, cluster.cluster_id, tmp_path,
                                {i: cluster.via(f"b{b}", i) for i in cluster.nodes})
               for b in BROKERS}
    history: list[Op] = []
    lock = threading.Lock()
    stop = threading.Event()
    faults: list[str] = []
    try:
        cluster.start()
        wait_until(cluster.active_node, 30, "an active controller")
        for broker in brokers.values():
            broker.start()
        for broker in brokers.values():
            wait_until(lambda broker=broker: broker.status()["state"] == "RUNNING",  # type: ignore[misc]
                       30, f"broker {broker.broker_id} running")
        watch = _Watch(cluster)
        watch.start()
        clients = [threading.Thread(target=_run_client, args=(i, cluster, stop, history, lock))
                   for i in range(CLIENTS)]
        chaos = threading.Thread(target=_nemesis, args=(cluster, brokers, nemesis, stop, faults))
        for thread in (*clients, chaos):
            thread.start()
        time.sleep(SECONDS)  # the run's length, not a wait for a condition
        stop.set()
        for thread in (*clients, chaos):
            thread.join(60)
            assert not thread.is_alive()
        nemesis.heal()
        for child in (*cluster.nodes.values(), *brokers.values()):
            if not child.running:
                child.start()
        # A barrier write: once committed, everything before it in the log is too.
        with AdminClient(cluster.bootstrap, timeout_ms=30_000) as admin:
            assert admin.create_topics([CreatableTopic("barrier", 1, 1)])[0].error.ok
            barrier = admin.last_request_id
            barrier_end = admin.session_offset
            # Nothing changes any more: the brokers converge to this.
            want = _assignment(admin.describe_topics())
        wait_until(lambda: _brokers_converged(brokers, want), 60,
                   "every broker reconciled to the final assignment")
        wait_until(lambda: watch.error is not None or watch.next_offset >= barrier_end, 60,
                   "the watcher caught up with the barrier")
        watch.stop()
        assert watch.error is None, watch.error
        for broker in brokers.values():
            broker.terminate()
        cluster.close()
        log = _committed_log(cluster, barrier)
        counts = _check(history, log)
        assert watch.offsets == watched_offsets(log, watch.next_offset), \
            "the watcher missed or repeated a change"
        counts["watched"] = len(watch.offsets)
        counts["watch_resumptions"] = watch.watcher.resumptions
    finally:
        stop.set()
        nemesis.close()
        for broker in brokers.values():
            if broker.running:
                broker.terminate(timeout_s=5.0)
        cluster.close()
    print(f"history: {len(history)} ops, {counts}, faults: {faults}")
    assert counts["writes"] > 10 and counts["reads"] > 10, counts
    assert len(faults) >= 3, faults
