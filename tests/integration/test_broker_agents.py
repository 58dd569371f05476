"""Broker agents as real processes: 3 controllers (ids 3000+) and 4 brokers on loopback.

One cluster serves the whole module (starting it costs seconds); every test leaves
it healthy: all controllers and brokers running, brokers RUNNING. Waits are bounded
polls (`wait_until`); the fixture's teardown stops every child process.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from controller.api.client import AdminClient, AdminClientError
from controller.cli.main import cli
from controller.metadata import CreatableTopic, ReassignmentRequest
from controller.records.domain import BrokerRegistration
from controller.storage.log import SegmentedLog
from controller.storage.meta_properties import DataDir
from tests.support.broker_processes import BrokerCluster, running_cluster
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BROKERS = (1, 2, 3, 4)
SESSION_TIMEOUT_MS = 2_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("brokers"), brokers=BROKERS,
                         session_timeout_ms=SESSION_TIMEOUT_MS,
                         snapshot_interval_bytes=16384) as c:
        yield c


@pytest.fixture()
def admin(cluster: BrokerCluster) -> Iterator[AdminClient]:
    with cluster.admin() as client:
        yield client


def expected_state(admin: AdminClient, broker_id: int) -> dict[str, dict[str, Any]]:
    """What `broker_id`'s data dir should hold, from the controller's committed image."""
    out: dict[str, dict[str, Any]] = {}
    for topic in admin.describe_topics():
        for p in topic.partitions:
            reg = p.registration
            if broker_id in reg.replicas:
                out[f"{topic.name}-{p.partition_id}"] = {
                    "topic": topic.name, "topic_id": topic.topic_id, "partition": p.partition_id,
                    "role": "leader" if reg.leader == broker_id else "follower",
                    "leader": reg.leader, "leader_epoch": reg.leader_epoch,
                    "partition_epoch": reg.partition_epoch}
    return out


def wait_all_match(cluster: BrokerCluster, admin: AdminClient, timeout_s: float = 20.0) -> None:
    """Every running broker's data dir (and status RPC) equals the image."""

    def matches() -> bool:
        for b in BROKERS:
            broker = cluster.brokers[b]
            want = expected_state(admin, b)
            if broker.local_state() != want:
                return False
            status = broker.status()
            reported = {f"{r['topic']}-{r['partition']}": r for r in status["replicas"]}
            if {k: (r["leader_epoch"], r["partition_epoch"]) for k, r in reported.items()} != \
                    {k: (r["leader_epoch"], r["partition_epoch"]) for k, r in want.items()}:
                return False
        return True

    wait_until(matches, timeout_s, "every broker's local state to match the image", 0.2)


def broker_reg(admin: AdminClient, broker_id: int) -> BrokerRegistration | None:
    for b in admin.describe_cluster().brokers:
        if b.broker_id == broker_id:
            return b
    return None


def test_rf3_topics_reach_every_broker(cluster: BrokerCluster, admin: AdminClient) -> None:
    results = admin.create_topics([CreatableTopic("rf3-a", 8, 3), CreatableTopic("rf3-b", 3, 3)])
    assert all(r.error.ok for r in results), results
    wait_all_match(cluster, admin)
    held = {b: cluster.brokers[b].local_state() for b in BROKERS}
    assert sum(len(s) for s in held.values()) == 11 * 3
    for b in BROKERS:
        status = cluster.brokers[b].status()
        assert status["state"] == "RUNNING" and status["broker_epoch"] >= 0
        assert status["metadata_offset"] >= status["broker_epoch"]
    # The CLI prints the same status.
    address = cluster.brokers[1].address
    assert address is not None
    out = CliRunner().invoke(cli, ["broker-status", "--address", address, "--output", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["broker_id"] == 1 and doc["state"] == "RUNNING"
    assert {f"{r['topic']}-{r['partition']}" for r in doc["replicas"]} == \
        set(cluster.brokers[1].local_state())
    text = CliRunner().invoke(cli, ["broker-status", "--address", address])
    assert text.exit_code == 0 and "RUNNING" in text.output and "rf3-a" in text.output


def test_reassign_moves_partition_from_broker_1_to_4(cluster: BrokerCluster,
                                                     admin: AdminClient) -> None:
    created = admin.create_topics([CreatableTopic("move", assignments=((1, 2, 3),))])
    assert created[0].error.ok, created
    wait_all_match(cluster, admin)
    assert cluster.brokers[1].local_state()["move-0"]["role"] == "leader"
    assert "move-0" not in cluster.brokers[4].local_state()
    result = admin.alter_partition_reassignments([ReassignmentRequest("move", 0, (4, 2, 3))])
    assert result[0].error.ok, result

    def done() -> bool:
        reg = admin.describe_topics(["move"])[0].partitions[0].registration
        return reg.replicas == (4, 2, 3) and not reg.adding_replicas \
            and not reg.removing_replicas and reg.leader in (4, 2, 3)

    wait_until(done, 20, "the reassignment to complete")
    wait_all_match(cluster, admin)
    assert "move-0" not in cluster.brokers[1].local_state()
    assert "move-0" in cluster.brokers[4].local_state()
    assert admin.describe_topics(["move"])[0].partitions[0].registration.leader != 1


def test_kill_9_broker_fenced_then_restart_catches_up(cluster: BrokerCluster,
                                                      admin: AdminClient) -> None:
    created = admin.create_topics([CreatableTopic("k9", assignments=((2, 1, 3), (2, 3, 4)))])
    assert created[0].error.ok, created
    wait_all_match(cluster, admin)
    cluster.brokers[2].kill()
    killed_at = time.monotonic()

    def moved() -> bool:
        reg = broker_reg(admin, 2)
        parts = admin.describe_topics(["k9"])[0].partitions
        return reg is not None and reg.fenced and all(
            p.registration.leader != 2 and 2 not in p.registration.isr for p in parts)

    wait_until(moved, 15, "broker 2 fenced, its leaderships moved, ISRs shrunk", 0.1)
    # Not before the session timeout (minus slack for when its last heartbeat went).
    assert time.monotonic() - killed_at > SESSION_TIMEOUT_MS / 1e3 * 0.5
    # While it is down, the others reconcile the new leaders.
    for p in admin.describe_topics(["k9"])[0].partitions:
        assert p.registration.leader in (1, 3)
    cluster.brokers[2].start()
    cluster.wait_running([2], timeout_s=30)
    wait_until(lambda: all(2 in p.registration.isr
                         for p in admin.describe_topics(["k9"])[0].partitions), 15,
             "broker 2 back in the ISRs")
    wait_all_match(cluster, admin)


def test_sigterm_broker_moves_leaderships_before_exit(cluster: BrokerCluster,
                                                      admin: AdminClient) -> None:
    created = admin.create_topics([CreatableTopic("term", assignments=((3, 1, 2), (3, 4, 1)))])
    assert created[0].error.ok, created
    wait_all_match(cluster, admin)
    broker = cluster.brokers[3]
    broker.signal(signal.SIGTERM)
    assert broker.proc is not None
    assert broker.proc.wait(15) == 0
    # By the time it exited, the controller had moved its leaderships away.
    for p in admin.describe_topics(["term"])[0].partitions:
        assert p.registration.leader != 3, p
    assert "event=controlled_shutdown_complete" in broker.log_text()
    broker.start()
    cluster.wait_running([3], timeout_s=30)
    wait_all_match(cluster, admin)


def _create_stream(cluster: BrokerCluster, prefix: str, stop: threading.Event,
                   acked: list[str], unknown: list[str]) -> None:
    n = 0
    admin = cluster.admin(timeout_ms=3_000)
    try:
        while not stop.is_set():
            name = f"{prefix}-{n}"
            n += 1
            try:
                results = admin.create_topics([CreatableTopic(name, 2, 3)])
            except AdminClientError:
                unknown.append(name)
                # A fresh client: the old one sticks to the controller that last
                # answered, which may be the one that is stopped.
                admin.close()
                admin = cluster.admin(timeout_ms=3_000)
                continue
            (acked if results[0].error.ok else unknown).append(name)
            time.sleep(0.02)
    finally:
        admin.close()


def test_kill_9_active_controller_during_topic_stream(cluster: BrokerCluster,
                                                      admin: AdminClient) -> None:
    active = cluster.active_controller()
    assert active is not None
    acked: list[str] = []
    unknown: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(target=_create_stream, args=(cluster, "s", stop, acked, unknown))
    thread.start()
    try:
        wait_until(lambda: len(acked) >= 5, 20, "some topics acknowledged")
        active.kill()
        before = len(acked)
        wait_until(lambda: len(acked) >= before + 5, 30, "creations acknowledged again")
    finally:
        stop.set()
        thread.join(30)
    new_active = cluster.active_controller()
    assert new_active is not None and new_active is not active
    wait_all_match(cluster, admin)
    topics = {t.name for t in admin.describe_topics()}
    assert set(acked) <= topics
    # Brokers follow the new leader for their heartbeats too.
    for b in BROKERS:
        wait_until(lambda b=b: cluster.brokers[b].status()["controller_id"]  # type: ignore[misc]
                 == new_active.node_id, 10, f"broker {b} on the new controller")
    active.start()
    wait_until(lambda: active.running, 5, "old controller restarted")


def test_sigstop_active_controller_then_sigcont(cluster: BrokerCluster,
                                                admin: AdminClient) -> None:
    active = cluster.active_controller()
    assert active is not None and active.proc is not None
    acked: list[str] = []
    unknown: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(target=_create_stream, args=(cluster, "z", stop, acked, unknown))
    thread.start()
    try:
        wait_until(lambda: len(acked) >= 3, 20, "some topics acknowledged")
        lost_before = active.log_text().count("event=leadership_lost")
        active.proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: (c := cluster.active_controller()) is not None and c is not active,
                 15, "a new active controller")
        before = len(acked)
        wait_until(lambda: len(acked) >= before + 3, 30, "creations acknowledged again")
        active.proc.send_signal(signal.SIGCONT)
        # It hears of the new epoch, steps down and reverts its uncommitted state.
        wait_until(lambda: active.log_text().count("event=leadership_lost") > lost_before, 15,
                 "the old controller to step down")
    finally:
        active.proc.send_signal(signal.SIGCONT)
        stop.set()
        thread.join(30)
    wait_all_match(cluster, admin)
    assert set(acked) <= {t.name for t in admin.describe_topics()}


def test_wiped_broker_resyncs_from_snapshot(cluster: BrokerCluster,
                                            admin: AdminClient) -> None:
    broker = cluster.brokers[4]
    broker.terminate()
    broker.wipe()
    log_mark = len(broker.log_text())
    written = {c: n.log_text().count("event=snapshot_written")
               for c, n in cluster.controllers.items()}
    # Grow the log until every controller has written (and compacted to) a new
    # snapshot, so the wiped broker is behind the leader's log start.
    for i in range(50):
        assert all(r.error.ok for r in admin.create_topics(
            [CreatableTopic(f"w-{i}-{j}", 1, 3) for j in range(10)]))
        if all(n.log_text().count("event=snapshot_written") > written[c]
               for c, n in cluster.controllers.items()):
            break
    broker.start()
    cluster.wait_running([4], timeout_s=30)
    wait_all_match(cluster, admin)
    assert "event=snapshot_loaded source=leader" in broker.log_text()[log_mark:]


def test_brokers_applied_only_committed_records(cluster: BrokerCluster,
                                                admin: AdminClient) -> None:
    """Last: stop everything, then compare each broker's log up to the offset it
    applied with the controllers' log (which holds only what they committed or
    will truncate): the broker's applied prefix is the committed prefix."""
    applied = {b: cluster.brokers[b].status()["metadata_offset"] for b in BROKERS}
    cluster.close()
    # Offsets a broker applied were committed, so every controller still holding
    # them (the others compacted them into snapshots) has the same batch there.
    reference: dict[int, tuple[int, tuple[bytes, ...]]] = {}
    for node in cluster.controllers.values():
        for offset, digest in _batches(node.data_dir).items():
            if offset <= max(applied.values()):
                assert reference.setdefault(offset, digest) == digest, (node.node_id, offset)
    compared = 0
    for b in BROKERS:
        for offset, digest in _batches(cluster.brokers[b].data_dir).items():
            if offset <= applied[b] and offset in reference:
                assert reference[offset] == digest, (b, offset)
                compared += 1
    assert compared >= len(BROKERS), compared


def _batches(data_dir: Path) -> dict[int, tuple[int, tuple[bytes, ...]]]:
    out: dict[int, tuple[int, tuple[bytes, ...]]] = {}
    with SegmentedLog.open(DataDir(data_dir).log_dir) as log:
        offset = log.start_offset
        while offset < log.end_offset:
            batches = log.read_batches(offset)
            for batch in batches:
                out[batch.base_offset] = (batch.epoch, tuple(batch.records))
            offset = batches[-1].next_offset
    return out
