"""Three real `metakraft controller` processes on loopback, driven by the real
AdminClient: topics and configs end to end, bad inputs leave no record, kill -9 of
the active controller in the middle of a stream of writes loses or doubles
nothing, and SIGTERM hands leadership over cleanly.

Every wait polls with a deadline; the fixture stops every child whatever happens.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from controller.api.client import (
    AdminClient,
)
from controller.logformat.batch import RecordBatch
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsTopic,
    ErrorCode,
    OpType,
    ResourceType,
)
from controller.records import decode_record
from controller.security.principal import ANONYMOUS
from tests.support.controller_processes import ControllerCluster, ControllerProcess
from tests.support.polling import wait_until
from tests.support.write_outcomes import check_outcomes, create_outcome

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

START_S = 20.0


def client(c: ControllerCluster, **kwargs: object) -> AdminClient:
    return AdminClient(c.bootstrap, **kwargs)  # type: ignore[arg-type]


def records_of(batches: list[RecordBatch], kind: str) -> list[object]:
    out = []
    for batch in batches:
        for data in batch.records:
            record = decode_record(data)
            if record.WhichOneof("record") == kind:
                out.append(getattr(record, kind))
    return out


def stop_all(c: ControllerCluster) -> None:
    for node in c.nodes.values():
        if node.running:
            assert node.terminate() == 0, node.log_text()[-2000:]


def test_topics_and_configs_end_to_end_and_bad_inputs_leave_no_record(
        cluster: ControllerCluster) -> None:
    with client(cluster) as admin:
        created = admin.create_topics([CreatableTopic("orders", 3, 3)])
        assert created[0].error.ok, created
        described = admin.describe_topics(["orders"])[0]
        assert described.error.ok and len(described.partitions) == 3
        assert all(len(p.registration.replicas) == 3 for p in described.partitions)
        topic = ConfigResource(ResourceType.TOPIC, "orders")
        altered = admin.incremental_alter_configs(
            [AlterConfigsResource(topic, (AlterConfigOp("retention.ms", OpType.SET, "3600000"),))])
        assert altered[0].error.ok, altered
        entries = {e.key: e.value for e in admin.describe_configs([topic])[0].entries}
        assert entries["retention.ms"] == "3600000"

        hw_before = admin.describe_quorum().high_watermark
        bad = admin.create_topics([
            CreatableTopic("bad name!", 1, 1),
            CreatableTopic("x" * 250, 1, 1),
            CreatableTopic("..", 1, 1),
            CreatableTopic("dup", 1, 1), CreatableTopic("dup", 1, 1),
            CreatableTopic("orders", 1, 1),
            CreatableTopic("zero", 0, 1),
            CreatableTopic("too-many-replicas", 1, 5),
            CreatableTopic("bad-assignment", assignments=((0, 0),)),
            CreatableTopic("bad-config", 1, 1, configs=(("no.such.key", "1"),)),
            CreatableTopic("bad-value", 1, 1, configs=(("retention.ms", "soon"),)),
        ])
        codes = [r.error.code for r in bad]
        assert ErrorCode.NONE not in codes, bad
        assert codes[:3] == [ErrorCode.INVALID_TOPIC_EXCEPTION] * 3
        assert codes[5] is ErrorCode.TOPIC_ALREADY_EXISTS
        assert codes[6] is ErrorCode.INVALID_PARTITIONS
        assert codes[7] is ErrorCode.INVALID_REPLICATION_FACTOR
        assert all(r.error.message for r in bad), "every error says what to do"
        shrink = admin.create_partitions([CreatePartitionsTopic("orders", 2)])
        assert shrink[0].error.code is ErrorCode.INVALID_PARTITIONS
        unknown = admin.incremental_alter_configs(
            [AlterConfigsResource(topic, (AlterConfigOp("no.such.key", OpType.SET, "1"),))])
        assert unknown[0].error.code is ErrorCode.INVALID_CONFIG
        missing = admin.delete_topics(["no-such-topic"])
        assert missing[0].error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        hw_after = admin.describe_quorum().high_watermark

        deleted = admin.delete_topics(["orders"])
        assert deleted[0].error.ok
        assert admin.list_topics() == ()
    stop_all(cluster)
    # Meanwhile the log moved only by the idle controller's no-op records.
    written = [decode_record(r).WhichOneof("record") for b in cluster.nodes[3000].read_log()
               if hw_before <= b.base_offset < hw_after and not b.is_control for r in b.records]
    assert set(written) <= {"no_op"}, f"a bad input was logged: {written}"
    logs = [node.read_log() for node in cluster.nodes.values()]
    # Stopping one by one may leave a later LeaderChange, or an idle no-op, on the
    # last ones only.
    common = min(len(log) for log in logs)
    assert logs[0][:common] == logs[1][:common] == logs[2][:common]
    assert all(b.is_control or {decode_record(r).WhichOneof("record") for r in b.records}
               == {"no_op"} for log in logs for b in log[common:])
    names = [t.name for t in records_of(logs[0], "topic")]  # type: ignore[attr-defined]
    assert names == ["orders"]
    keys = {c.name for c in records_of(logs[0], "config")}  # type: ignore[attr-defined]
    assert keys == {"retention.ms"}
    origins = {b.origin.principal for b in logs[0] if not b.is_control}
    assert ANONYMOUS in origins  # plaintext: no identity


def test_kill_leader_mid_stream_every_write_failed_or_applied_once(
        cluster: ControllerCluster) -> None:
    outcomes: dict[str, str] = {}
    lock = threading.Lock()
    done_count = [0]

    def writer(worker: int) -> None:
        with client(cluster, timeout_ms=15_000) as admin:
            for i in range(40):
                name = f"w{worker}-{i}"
                outcome = create_outcome(admin, name)
                with lock:
                    outcomes[name] = outcome
                    done_count[0] += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: done_count[0] >= 40, 30, "writes before the kill")
    victim = cluster.active_node()
    assert victim is not None
    killed_at = time.monotonic()
    victim.kill()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    def successor() -> ControllerProcess | None:
        node = cluster.active_node()
        return node if node is not victim else None

    wait_until(successor, 10, "a new active controller")
    print(f"failover: {time.monotonic() - killed_at:.2f}s until the stream ended; "
          f"outcomes {Counter(outcomes.values())}")
    with client(cluster) as admin:
        existing = {t.name for t in admin.list_topics()}
    assert len(outcomes) == 160
    counts = check_outcomes(outcomes, existing)
    assert counts["ok"] >= 100, counts
    stop_all(cluster)
    survivors = [n for n in cluster.nodes.values() if n is not victim]
    logs = [n.read_log() for n in survivors]
    for log in logs:
        names = Counter(t.name for t in records_of(log, "topic"))  # type: ignore[attr-defined]
        assert set(names) == existing
        assert max(names.values()) == 1, "a topic was created twice"


def test_sigterm_hands_leadership_over_and_exits_cleanly(cluster: ControllerCluster) -> None:
    leader = cluster.active_node()
    assert leader is not None
    with client(cluster) as admin:
        assert admin.create_topics([CreatableTopic("before", 1, 3)])[0].error.ok
        started = time.monotonic()
        assert leader.terminate() == 0
        successor = wait_until(cluster.active_node, 5, "a successor")
        handover_s = time.monotonic() - started
        assert successor is not leader
        assert admin.create_topics([CreatableTopic("after", 1, 3)])[0].error.ok
        assert {t.name for t in admin.list_topics()} == {"before", "after"}
    text = leader.log_text()
    assert "event=stopping" in text and "status=clean" in text
    # A clean stop is quiet: the followers' fetch streams end without an ERROR (gRPC
    # logged their cancellation at server stop with a CancelledError traceback).
    noisy = [line for line in text.splitlines()
             if "level=error" in line or "level=critical" in line or "Traceback" in line]
    assert not noisy, noisy
    print(f"clean handover (SIGTERM to successor active): {handover_s:.3f}s")


def create_in_tens(admin: AdminClient, prefix: str, count: int) -> None:
    """Topics `prefix0` .. of 2 partitions (RF 3), ten a request."""
    for i in range(0, count, 10):
        batch = [CreatableTopic(f"{prefix}{j}", 2, 3) for j in range(i, min(count, i + 10))]
        assert all(r.error.ok for r in admin.create_topics(batch))


def test_restart_from_snapshots_keeps_every_topic(tmp_path: Path) -> None:
    c = ControllerCluster(tmp_path, 3, snapshot_interval_bytes=4096)
    try:
        c.start()
        wait_until(c.active_node, START_S, "an active controller")
        c.register_brokers([0, 1, 2])
        with client(c) as admin:
            create_in_tens(admin, "r", 150)
            wait_until(lambda: all("event=snapshot_written" in n.log_text()
                                   for n in c.nodes.values()), 10, "snapshots on every node")
            assert admin.delete_topics(["r0"])[0].error.ok  # a tail after the snapshots
            want = {t.name for t in admin.list_topics()}
        for node in c.nodes.values():
            assert node.terminate() == 0
            node.start()
        wait_until(c.active_node, START_S, "an active controller after the restart")
        with client(c) as admin:
            assert {t.name for t in admin.list_topics()} == want
        for node in c.nodes.values():
            assert "event=snapshot_loaded" in node.log_text(), node.node_id
    finally:
        c.close()


def test_after_a_burst_a_snapshot_comes_by_time_not_by_the_image_multiple(
        tmp_path: Path) -> None:
    """With an image multiple no later write reaches, the log past a burst would
    stay unsnapshotted (what a restart replays); `snapshot_max_interval_ms` makes each
    controller snapshot it anyway, once the byte interval came since its newest."""
    c = ControllerCluster(tmp_path, 3, snapshot_interval_bytes=4096, controller_config=(
        "snapshot_interval_image_multiple = 100000\nsnapshot_max_interval_ms = 1000"))
    written = re.compile(r"event=snapshot_written end_offset=(\d+) .* next_after_bytes=(\d+)")
    try:
        c.start()
        wait_until(c.active_node, START_S, "an active controller")
        c.register_brokers([0, 1, 2])
        with client(c) as admin:
            create_in_tens(admin, "burst", 60)
            wait_until(lambda: all(written.search(n.log_text()) for n in c.nodes.values()),
                       10, "a first snapshot on every node, by bytes")
            create_in_tens(admin, "later", 40)  # more than the byte interval past the burst
            end = admin.describe_quorum().high_watermark

        def covered() -> bool:
            for node in c.nodes.values():
                found = written.findall(node.log_text())
                # The multiple alone would wait for 100,000 images' bytes.
                assert all(int(after) >= 100_000 * 64 for _, after in found), found
                if int(found[-1][0]) < end:
                    return False
            return True

        wait_until(covered, 20, "every node's newest snapshot past the later writes")
    finally:
        c.close()


def test_quorum_describe_reports_every_voter_from_the_leaders_view(
    cluster: ControllerCluster,
) -> None:
    """`quorum describe --replication`: each voter's log end offset and last fetch as
    the Raft leader saw them (not -1 for the followers, as before)."""
    from click.testing import CliRunner

    from controller.cli.main import cli

    with client(cluster) as admin:
        (created,) = admin.create_topics([CreatableTopic("q", 1, 3)])
        assert created.error.ok

        def followers_caught_up() -> object:
            desc = admin.describe_quorum()
            ends = [v.log_end_offset for v in desc.voters]
            fetched = all(v.last_fetch_timestamp_ms > 0 for v in desc.voters)
            return desc if fetched and min(ends) >= desc.high_watermark > 0 else None

        desc = wait_until(followers_caught_up, START_S, "every voter fetched to the HW")
    assert [v.replica_id for v in desc.voters] == sorted(cluster.nodes) and desc.observers == ()
    args = ["quorum", "describe", "--replication", "--bootstrap", ",".join(cluster.bootstrap)]
    shown = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert shown.exit_code == 0 and "last fetch (ms ago)" in shown.stdout
    assert "leader" in shown.stdout and "?" not in shown.stdout
