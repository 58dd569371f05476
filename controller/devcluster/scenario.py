"""`metakraft dev --scenario`: a short scripted tour of a running dev cluster.

Each step says what it does, does it with the real AdminClient or a signal, and
checks the outcome with a bounded wait: `[ok] ...` or `[FAILED] ...`. The tour
stops at the first failure (exit 1); the runner stops the cluster either way.

  1. create topics and show their placement (every replica on its broker);
  2. kill -9 a partition leader's broker while a producer writes to that partition
     with acks=all: fenced, leaderships moved, ISRs shrunk, the producer carries on
     with the new leader;
  3. restart it: unfenced, back in the ISRs once its logs caught up (its leaders
     report it), its replicas reconciled; every acknowledged record is read back
     once, in order;
  4. reassign a partition to a broker that had none of it: moved, leader elected;
  5. replace a controller whose data dir was deleted: kill -9, delete, format a new
     replica (new directory id), start it, remove the lost voter, add the new one;
  6. (the runner) stop everything: brokers first, then controllers;
  7. restore the cluster from its remote tier, as after losing every disk: the
     state at the tier's end rebuilt (every object checked, the hash chain too)
     into new controllers' data dirs under DATA_DIR/restored, each read back.
"""

from __future__ import annotations

import random
import shutil
import signal
import threading
from collections.abc import Callable
from typing import Any

import attrs
from rich.table import Table

from broker_agent.replica.client import Consumer, DataClientError, Producer
from broker_agent.replica.records import DataRecord
from controller.api.client import AdminClient, AdminClientError
from controller.devcluster.configs import SEGMENT_MS, SESSION_TIMEOUT_MS, prepare_node, tier_url
from controller.devcluster.layout import DevClusterError, NodeSpec
from controller.devcluster.probe import broker_status, serving
from controller.devcluster.security import client_credentials
from controller.devcluster.session import (
    EXIT_FAILED,
    EXIT_OK,
    DevSession,
    Interrupted,
    ProcessDied,
)
from controller.metadata import (
    CreatableTopic,
    ErrorCode,
    MetadataState,
    ReassignmentRequest,
    TopicDescription,
)
from controller.quorum_controller.restore import (
    RestoreError,
    plan_restore,
    rebuild,
    write_data_dir,
)
from controller.raft.voters import Voter, VoterSet
from controller.storage.meta_properties import (
    DataDir,
    random_cluster_id,
    random_directory_id,
    read_meta_properties,
)
from controller.storage.snapshot_file import SnapshotReader
from controller.tier.history import list_tier
from controller.tier.remote import open_store

TOPICS = ("tour-a", "tour-b")
# Fencing waits a session timeout; the rest is reaction and replication.
FENCE_TIMEOUT_S = SESSION_TIMEOUT_MS / 1000 + 15.0
CONVERGE_TIMEOUT_S = 30.0
MIN_BROKERS = 3
STEPS = 7
# Where step 7 restores the cluster to (under the dev cluster's data dir).
RESTORED_DIR_NAME = "restored"


class StepFailed(Exception):
    pass


@attrs.frozen
class Placement:
    """One partition as the controller describes it."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    moving: bool


class ProduceLoad:
    """A producer writing numbered records to one partition with acks=all, on its own
    thread and client, until stopped; what was acknowledged is kept to check."""

    def __init__(self, session: DevSession, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.acked: list[str] = []
        self.error: str | None = None
        self._tls = client_credentials(session.spec)
        self._admin = AdminClient([session.spec.bootstrap], tls=self._tls)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tour-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        with Producer(self._admin, tls=self._tls, timeout_ms=60_000) as producer:
            while not self._stop.is_set():
                batch = [DataRecord(None, f"r{n + i}".encode()) for i in range(10)]
                try:
                    producer.send(self.topic, batch, partition=self.partition)
                except DataClientError as exc:
                    self.error = str(exc)
                    return
                self.acked.extend(r.value.decode() for r in batch)
                n += len(batch)

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(90)
        self._admin.close()


class Tour:
    def __init__(self, session: DevSession) -> None:
        self.session = session
        self.console = session.console
        assert session.probe is not None
        self.admin = session.probe.admin
        self.tls = session.probe.tls
        # Step 2's producer, checked in step 3.
        self.load: ProduceLoad | None = None

    # -- reading -----------------------------------------------------------------------

    def placements(self) -> list[Placement] | None:
        try:
            found = self.admin.describe_topics(list(TOPICS))
        except AdminClientError:
            return None
        return [p for desc in found for p in _placements(desc)]

    def show(self, title: str) -> None:
        table = Table(title=title, title_justify="left")
        for column in ("partition", "leader", "replicas", "isr"):
            table.add_column(column, no_wrap=True)
        for p in self.placements() or []:
            table.add_row(f"{p.topic}-{p.partition}", str(p.leader) if p.leader >= 0 else "none",
                          _ids(p.replicas), _ids(p.isr) + (" (moving)" if p.moving else ""))
        self.console.print(table)

    def broker(self, broker_id: int) -> NodeSpec:
        return next(n for n in self.session.spec.brokers if n.node_id == broker_id)

    def local_replicas(self, broker_id: int) -> set[tuple[str, int]] | None:
        """The tour's partitions the broker holds locally (its status RPC); None if
        it does not answer or is not RUNNING."""
        probe = self.session.probe
        assert probe is not None  # the cluster is started
        status = broker_status(self.broker(broker_id).address, probe.tls)
        if status is None or status["state"] != "RUNNING":
            return None
        return {(r["topic"], r["partition"]) for r in status["replicas"] if r["topic"] in TOPICS}

    def brokers_match_placement(self) -> bool:
        """Every broker holds exactly the tour partitions the controller assigns it."""
        placements = self.placements()
        if placements is None:
            return False
        for node in self.session.spec.brokers:
            want = {(p.topic, p.partition) for p in placements if node.node_id in p.replicas}
            if self.local_replicas(node.node_id) != want:
                return False
        return True

    # -- steps -------------------------------------------------------------------------

    def step(self, number: int, text: str) -> None:
        self.console.print(f"\n[bold]step {number}/{STEPS}:[/] {text}", highlight=False)

    def ok(self, text: str) -> None:
        self.console.print(f"  [green]\\[ok][/] {text}", highlight=False)

    def wait(self, what: str, cond: Callable[[], Any], timeout_s: float) -> Any:
        try:
            return self.session.wait_for(what, cond, timeout_s)
        except DevClusterError as exc:
            raise StepFailed(str(exc)) from None

    def create_topics(self) -> None:
        brokers = len(self.session.spec.brokers)
        # tour-a leaves a broker without a replica of each partition, for step 4.
        wanted = [CreatableTopic("tour-a", 3, brokers - 1), CreatableTopic("tour-b", 2,
                                                                           min(3, brokers))]
        self.step(1, "create topics " + ", ".join(
            f"{t.name} ({t.num_partitions} partitions, RF {t.replication_factor})"
            for t in wanted))
        existing = {t.name for t in self.admin.list_topics()} & set(TOPICS)
        if existing:  # a resumed cluster ran the tour before: start from scratch
            self.admin.delete_topics(sorted(existing))
            self.wait("the old tour topics to be deleted",
                      lambda: not ({t.name for t in self.admin.list_topics()} & set(TOPICS)),
                      CONVERGE_TIMEOUT_S)
            self.ok(f"deleted the previous run's {', '.join(sorted(existing))}")
        for result in self.admin.create_topics(wanted):
            if not result.error.ok:
                raise StepFailed(f"create {result.name}: {result.error}")
        self.ok("topics created")
        self.wait("every broker to hold exactly its replicas", self.brokers_match_placement,
                  CONVERGE_TIMEOUT_S)
        self.show("placement")
        self.ok("every broker holds exactly the replicas the controller assigned it")

    def kill_broker(self) -> int:
        placements = self.placements() or []
        first = next(p for p in placements if p.topic == "tour-a" and p.partition == 0)
        victim = first.leader
        node = self.broker(victim)
        self.step(2, f"kill -9 broker {victim} (leader of tour-a-0, pid "
                     f"{self.session.supervisor.pid(node.name)}) while a producer writes "
                     "to tour-a-0 with acks=all")
        load = self.load = ProduceLoad(self.session, "tour-a", 0)
        self.wait("the producer's first acknowledgements", lambda: len(load.acked) >= 100,
                  CONVERGE_TIMEOUT_S)
        self.session.supervisor.kill(node.name, signal.SIGKILL)
        self.ok(f"broker {victim} killed after {len(load.acked)} records were acknowledged")
        self.wait(f"broker {victim} to be fenced (session timeout {SESSION_TIMEOUT_MS} ms)",
                  lambda: self.session.broker_state(victim) == "fenced", FENCE_TIMEOUT_S)
        self.ok(f"broker {victim} fenced after its session timed out")

        def moved() -> bool:
            now = self.placements()
            return now is not None and all(
                p.leader != victim and victim not in p.isr for p in now)

        self.wait(f"leaderships and ISRs to drop broker {victim}", moved, CONVERGE_TIMEOUT_S)
        self.show(f"placement with broker {victim} down")
        new_leader = next(p.leader for p in self.placements() or []
                          if p.topic == "tour-a" and p.partition == 0)
        self.ok(f"tour-a-0 leader moved {victim} -> {new_leader}; no ISR holds {victim}")
        before = len(load.acked)
        self.wait("the producer to go on with the new leader",
                  lambda: len(load.acked) > before + 100 or load.error, CONVERGE_TIMEOUT_S)
        if load.error:
            raise StepFailed(f"the producer gave up: {load.error}")
        self.ok(f"the producer carried on: {len(load.acked)} records acknowledged")
        return victim

    def restart_broker(self, victim: int) -> None:
        node = self.broker(victim)
        self.step(3, f"restart broker {victim}")
        pid = self.session.supervisor.start(node.name)
        self.ok(f"broker {victim} started (pid {pid})")
        self.wait(f"broker {victim} to be unfenced",
                  lambda: self.session.broker_state(victim) == "active", CONVERGE_TIMEOUT_S)
        self.ok(f"broker {victim} registered again and unfenced")

        def rejoined() -> bool:
            now = self.placements()
            return now is not None and all(
                victim in p.isr for p in now if victim in p.replicas)

        self.wait(f"broker {victim} back in its ISRs (its leaders report it once its logs "
                  "caught up)", rejoined, CONVERGE_TIMEOUT_S)
        self.wait("every broker to hold exactly its replicas", self.brokers_match_placement,
                  CONVERGE_TIMEOUT_S)
        self.show(f"placement after broker {victim} rejoined")
        self.ok(f"broker {victim} rejoined: back in every ISR, local replicas reconciled")
        load = self.load
        assert load is not None, "step 2 starts it"
        load.stop()
        if load.error:
            raise StepFailed(f"the producer gave up: {load.error}")
        acked = load.acked
        with Consumer(self.admin, tls=self.tls) as consumer:
            read = [r.record.value.decode() for r in consumer.read("tour-a", 0, 0)]
        if read[:len(acked)] != acked:
            lost = len(set(acked) - set(read))
            raise StepFailed(f"acknowledged records lost or out of order ({lost} missing)")
        self.ok(f"all {len(acked)} acknowledged records read back from tour-a-0, in order, "
                "none twice")

    def reassign(self) -> None:
        placements = self.placements() or []
        part = next(p for p in placements if p.topic == "tour-a" and p.partition == 0)
        spare = next(n.node_id for n in self.session.spec.brokers
                     if n.node_id not in part.replicas)
        leaving = part.replicas[0]
        target = (spare, *part.replicas[1:])
        self.step(4, f"reassign tour-a-0 from replicas {_ids(part.replicas)} to "
                     f"{_ids(target)} (broker {leaving} -> broker {spare})")
        (result,) = self.admin.alter_partition_reassignments(
            [ReassignmentRequest("tour-a", 0, target)])
        if not result.error.ok:
            raise StepFailed(f"reassign tour-a-0: {result.error}")
        self.ok("reassignment accepted")

        def done() -> Placement | None:
            now = next((p for p in self.placements() or []
                        if p.topic == "tour-a" and p.partition == 0), None)
            if now is None or now.moving or set(now.replicas) != set(target):
                return None
            return now if now.leader in target and set(now.isr) == set(target) else None

        final = self.wait("the reassignment to complete", done, CONVERGE_TIMEOUT_S)
        self.wait("every broker to hold exactly its replicas", self.brokers_match_placement,
                  CONVERGE_TIMEOUT_S)
        self.show("placement after the reassignment")
        self.ok(f"tour-a-0 now on {_ids(final.replicas)} (leader {final.leader}); broker "
                f"{leaving} removed its replica, broker {spare} created one")


    def replace_controller(self) -> None:
        session, spec = self.session, self.session.spec
        before = self.admin.describe_quorum()
        victim = next(n for n in spec.controllers if n.node_id != before.leader_id)
        data_dir = spec.paths(victim).data_dir
        old = read_meta_properties(data_dir).directory_id
        self.step(5, f"replace {victim.name}, whose data dir is lost: kill -9 it, delete "
                     f"{data_dir}, format a new replica, remove the lost voter, add the new one")
        session.supervisor.kill(victim.name, signal.SIGKILL)
        shutil.rmtree(data_dir)
        prepare_node(spec, victim)  # a new replica: empty, with a new directory id
        new = read_meta_properties(data_dir).directory_id
        self.ok(f"{victim.name} killed, its data deleted, formatted again: directory id "
                f"{old} -> {new}")
        pid = session.supervisor.start(victim.name)
        self.wait(f"{victim.name} to serve", lambda: serving(victim.address, self.tls),
                  CONVERGE_TIMEOUT_S)
        self.ok(f"{victim.name} started (pid {pid}); it observes until it is a voter")
        session.reconcile_voters(lambda message: self.ok(message))

        def replaced() -> bool:
            voters = {(v.replica_id, v.directory_id) for v in self.admin.describe_quorum().voters}
            return (victim.node_id, new) in voters and (victim.node_id, old) not in voters

        self.wait("the voter set to name the new replica", replaced, CONVERGE_TIMEOUT_S)
        self.show_quorum()
        self.ok(f"{victim.name} is a voter again under directory id {new}; the lost disk's "
                f"identity {old} can no longer vote")

    def show_quorum(self) -> None:
        desc = self.admin.describe_quorum()
        table = Table(title="the controller quorum", title_justify="left")
        for column in ("voter", "directory id", "endpoint", "log end offset"):
            table.add_column(column, no_wrap=True)
        for v in desc.voters:
            role = " (leader)" if v.replica_id == desc.leader_id else ""
            table.add_row(f"{v.replica_id}{role}", v.directory_id, v.endpoint,
                          str(v.log_end_offset))
        self.console.print(table)


def _ids(values: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in values)


def _placements(desc: TopicDescription) -> list[Placement]:
    if desc.error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return []
    out = []
    for p in desc.partitions:
        reg = p.registration
        out.append(Placement(desc.name, p.partition_id, reg.leader if reg.has_leader else -1,
                             tuple(reg.replicas), tuple(reg.isr),
                             bool(reg.adding_replicas or reg.removing_replicas)))
    return out


def run_scenario(session: DevSession) -> int:
    """Run the tour on the started cluster; the caller stops the cluster after."""
    console = session.console
    assert len(session.spec.brokers) >= MIN_BROKERS, "checked by the runner before starting"
    tour = Tour(session)
    try:
        tour.create_topics()
        victim = tour.kill_broker()
        tour.restart_broker(victim)
        tour.reassign()
        tour.replace_controller()
    except (StepFailed, AdminClientError) as exc:
        console.print(f"  [red]\\[FAILED][/] {exc}", highlight=False)
        return EXIT_FAILED
    except ProcessDied as died:
        console.print(f"  [red]\\[FAILED][/] {died}", highlight=False)
        for death in died.exits:
            for line in death.last_lines:
                console.print(f"    {line}", markup=False, highlight=False)
        return EXIT_FAILED
    except Interrupted as stop:
        console.print(f"  [red]\\[FAILED][/] interrupted by {stop.signal_name}")
        return EXIT_FAILED
    finally:
        if tour.load is not None:
            tour.load.stop()
    return EXIT_OK


def finish_scenario(session: DevSession, code: int) -> int:
    """Steps 6 and 7: let the tier catch up, stop everything and check every process
    exited cleanly, then restore the cluster from its tier."""
    console = session.console
    console.print(f"\n[bold]step {STEPS - 1}/{STEPS}:[/] let the tier catch up with the tour, "
                  "then stop everything (brokers first, then controllers)")
    if code == EXIT_OK:
        code = _wait_for_tier(session)
    codes = session.stop()
    unclean = {name: c for name, c in codes.items() if c != 0}
    if unclean:
        console.print(f"  [red]\\[FAILED][/] unclean exits: {unclean}", highlight=False)
        return EXIT_FAILED
    console.print(f"  [green]\\[ok][/] stopped {len(codes)} processes, every exit code 0")
    if code == EXIT_OK:
        code = restore_from_tier(session)
    if code == EXIT_OK:
        console.print("\n[bold green]scenario passed[/]")
    else:
        console.print("\n[bold red]scenario FAILED[/]")
    return code


def _wait_for_tier(session: DevSession) -> int:
    """Until the tier holds the log up to where the tour ended (a segment is copied
    once closed: after SEGMENT_MS of activity)."""
    assert session.probe is not None
    end = session.probe.admin.describe_quorum().high_watermark
    store = open_store(tier_url(session.spec))

    def copied() -> int | None:
        found = max((m.end_offset for m in list_tier(store).segments), default=0)
        return found if found >= end else None

    try:
        held = session.wait_for(f"the tier to hold offsets below {end}", copied,
                                SEGMENT_MS / 1000 + CONVERGE_TIMEOUT_S)
    except DevClusterError as exc:
        session.console.print(f"  [red]\\[FAILED][/] {exc}", highlight=False)
        return EXIT_FAILED
    session.console.print(f"  [green]\\[ok][/] the tier holds the log below offset {held} "
                          f"(the tour ended at {end})", highlight=False)
    return EXIT_OK


def restore_from_tier(session: DevSession) -> int:
    """Step 7: rebuild the cluster from its tier into new data dirs (a new cluster id,
    the same controller ids and addresses, new directory ids), then read each back."""
    console, spec = session.console, session.spec
    target = spec.root / RESTORED_DIR_NAME
    console.print(f"\n[bold]step {STEPS}/{STEPS}:[/] restore the cluster from its tier into "
                  f"{target}, as after losing every disk", highlight=False)

    def ok(text: str) -> None:
        console.print(f"  [green]\\[ok][/] {text}", highlight=False)

    store = open_store(tier_url(spec))
    try:
        plan = plan_restore(store)
        for line in plan.describe():
            ok(line)
        restored = rebuild(store, plan)
        cluster_id = random_cluster_id()
        voters = VoterSet.of(Voter(n.node_id, random_directory_id(), n.address)
                             for n in spec.controllers)
        shutil.rmtree(target, ignore_errors=True)  # an earlier run's
        written = [write_data_dir(restored, data_dir=str(target / n.name), node_id=n.node_id,
                                  cluster_id=cluster_id, old_cluster_id=plan.old_cluster_id,
                                  voters=voters) for n in spec.controllers]
        image = restored.state.to_image()
        for node, snapshot_id in zip(spec.controllers, written, strict=True):
            loaded = MetadataState(cluster_id=cluster_id, rng=random.Random(0))
            path = DataDir(target / node.name).snapshot_dir
            loaded.replay_encoded(SnapshotReader.open(path / snapshot_id.file_name).records(),
                                  snapshot_id.end_offset - 1, step=0)
            if loaded.to_image().topics != image.topics:
                raise RestoreError(f"{target / node.name} does not read back as restored")
    except (RestoreError, OSError) as exc:
        console.print(f"  [red]\\[FAILED][/] {exc}", highlight=False)
        return EXIT_FAILED
    names = {t.name for t in image.topics}
    missing = [t for t in TOPICS if t not in names]
    if missing:
        console.print(f"  [red]\\[FAILED][/] the tier's history ends before the tour created "
                      f"{', '.join(missing)}", highlight=False)
        return EXIT_FAILED
    ok(f"{len(written)} controllers restored: cluster {cluster_id} (restored.from.cluster.id "
       f"{plan.old_cluster_id}), the state after offset {restored.end_offset - 1}: "
       f"{len(image.topics)} topics, {sum(len(t.partitions) for t in image.topics)} "
       f"partitions, {len(image.brokers)} brokers, the tour's topics among them; each data "
       "dir read back. To run them, see docs/operations.md, \"Disaster recovery\"")
    return EXIT_OK
