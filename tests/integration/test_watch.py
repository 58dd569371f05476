"""Watch with real controller processes: from offset 0 through the tier after the
local logs were trimmed, then live; across a leader kill -9 and a standby restart
with no gap and no duplicate (checked against the log itself); a slow watcher cut
off and resumed; `metakraft watch` as a user runs it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from controller.api import admin_pb2 as apb
from controller.api import admin_pb2_grpc as apb_grpc
from controller.api.client import AdminClient
from controller.api.watch_client import Watcher, WatchFailedError
from controller.cli.main import cli
from controller.metadata import CreatableTopic
from controller.tier.history import history_batches, list_tier, local_segments, plan_history
from controller.tier.remote import open_store
from controller.watch.events import DEFAULT_KINDS, Kind, WatchSpec
from controller.watch.service import RESUME_OFFSET_KEY
from tests.support.controller_processes import ControllerCluster, ControllerProcess
from tests.support.polling import wait_until
from tests.support.tiered_cluster import Writer, start_cluster
from tests.support.watch_expect import watched_offsets

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


class Follower(threading.Thread):
    """Follows a watch in the background, keeping every event and update."""

    def __init__(self, watcher: Watcher) -> None:
        super().__init__(daemon=True)
        self.watcher = watcher
        self.offsets: list[int] = []
        self.events: list[apb.WatchEvent] = []
        self.error: BaseException | None = None
        self.next_offset = -1
        self.committed = -1

    def run(self) -> None:
        try:
            for update in self.watcher:
                self.events += update.events
                self.offsets += [e.offset for e in update.events]
                self.next_offset, self.committed = update.next_offset, update.committed_offset
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.watcher.close()
        self.join(20)
        assert not self.is_alive()


def expected_offsets(node: ControllerProcess, below: int) -> list[int]:
    """The offsets a watch of the default kinds from 0 must deliver below `below`, from
    the node's own log (read from disk)."""
    return watched_offsets(node.read_log(), below, WatchSpec(DEFAULT_KINDS))


def expected_history_offsets(tier_url: str, node: ControllerProcess, spec: WatchSpec,
                             below: int) -> list[int]:
    """What a watch from 0 must deliver below `below`: the tier, then the node's local
    log (from disk: the node must be stopped)."""
    store = open_store(tier_url)
    pieces = plan_history(list_tier(store).segments, local_segments(node.data_dir))
    return watched_offsets((batch for _, batch in history_batches(store, pieces)), below,
                           spec)


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[ControllerCluster]:
    cluster = start_cluster(tmp_path, (tmp_path / "tier").as_uri())
    try:
        wait_until(cluster.active_node, 30, "an active controller")
        cluster.register_brokers([1, 2, 3])
        yield cluster
    finally:
        cluster.close()


def local_start(node: ControllerProcess) -> int:
    segments = sorted((node.data_dir / "metadata").glob("*.log"))
    return int(segments[0].stem) if segments else 0


def test_a_watch_from_zero_reads_the_tier_then_the_local_log_then_live(
        tiered: ControllerCluster) -> None:
    cluster = tiered
    leader = wait_until(cluster.active_node, 30, "an active controller")
    writer = Writer(cluster.bootstrap)
    writer.start()
    try:
        # Every controller's local log trimmed: offset 0 is only in the tier.
        wait_until(lambda: all(local_start(n) > 0 for n in cluster.nodes.values()), 90,
                   "every local log trimmed past offset 0 (tiered, then deleted)")
    finally:
        writer.stop()
    with AdminClient([leader.address], timeout_ms=20_000) as client:
        trimmed_at = local_start(leader)
        watcher = Watcher(client, from_offset=0, resource_types=[apb.WATCH_RESOURCE_TYPE_TOPIC])
        follower = Follower(watcher)
        follower.start()
        wait_until(lambda: follower.error is not None or (
            follower.next_offset > 0 and follower.next_offset >= follower.committed), 90,
            "the watch caught up")
        assert follower.error is None, follower.error
        created = [e.resource_name for e in follower.events if e.record_type == "topic"]
        removed = [e.resource_name for e in follower.events if e.record_type == "remove_topic"]
        assert follower.events[0].offset < trimmed_at, "the first events came from the tier"
        assert follower.offsets == sorted(set(follower.offsets)), "in order, each once"
        assert set(writer.created) <= set(created)
        assert set(writer.deleted) <= set(removed)
        assert all(json.loads(e.record_json)["type"] == e.record_type for e in follower.events)
        # ... then live.
        assert client.create_topics([CreatableTopic("live-one", 1, 3)])[0].error.ok
        wait_until(lambda: "live-one" in {e.resource_name for e in follower.events}, 30,
                   "the live change delivered")
        follower.stop()
    assert follower.offsets == sorted(set(follower.offsets))
    for node in cluster.nodes.values():
        node.terminate()
    tier_url = (cluster.root / "tier").as_uri()
    assert follower.offsets == expected_history_offsets(
        tier_url, leader, WatchSpec(frozenset({Kind.TOPIC})), follower.offsets[-1] + 1)


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[ControllerCluster]:
    cluster = ControllerCluster(tmp_path, 3, extra_config="[watch]\nsend_timeout_ms = 1000\n")
    try:
        cluster.start()
        wait_until(cluster.active_node, 30, "an active controller")
        cluster.register_brokers([1, 2, 3])
        yield cluster
    finally:
        cluster.close()


def test_a_watcher_resumes_across_a_leader_kill_and_a_standby_restart(
        plain: ControllerCluster) -> None:
    cluster = plain
    leader = wait_until(cluster.active_node, 30, "an active controller")
    standby = next(n for n in cluster.nodes.values() if n is not leader)
    third = next(n for n in cluster.nodes.values() if n not in (leader, standby))
    writer = Writer(cluster.bootstrap)
    writer.start()
    with AdminClient([leader.address, standby.address, third.address],
                     timeout_ms=30_000) as client:
        follower = Follower(Watcher(client, from_offset=0))
        follower.start()
        try:
            wait_until(lambda: len(follower.offsets) > 50, 30, "events flowing")
            leader.kill()  # the watched controller dies: resume at the standby
            wait_until(lambda: follower.watcher.resumptions >= 1, 30, "a resumption")
            seen = len(follower.offsets)
            wait_until(lambda: len(follower.offsets) > seen + 50, 60, "events after the kill")
            standby.terminate()  # the one now watched stops: resume at the third
            wait_until(lambda: follower.watcher.resumptions >= 2, 30, "a second resumption")
            standby.start()
            leader.start()
            seen = len(follower.offsets)
            wait_until(lambda: len(follower.offsets) > seen + 50, 60, "events after it")
        finally:
            writer.stop()
        wait_until(lambda: follower.next_offset >= follower.committed > 0, 30, "caught up")
        follower.stop()
        end = follower.next_offset  # read after the follower stopped: its last token
    assert follower.error is None, follower.error
    assert follower.offsets == sorted(set(follower.offsets)), "no duplicate, in order"
    # No gap: exactly what the log holds (from disk, the longest of the controllers'
    # logs: a follower stopped now may not have fetched the last batches yet).
    for node in cluster.nodes.values():
        node.terminate()
    longest = max(cluster.nodes.values(), key=lambda n: n.read_log()[-1].next_offset)
    assert longest.read_log()[-1].next_offset >= end
    assert follower.offsets == expected_offsets(longest, end)
    assert writer.created


def test_a_slow_watcher_is_cut_off_and_resumes_from_its_token(
        plain: ControllerCluster) -> None:
    cluster = plain
    leader = wait_until(cluster.active_node, 30, "an active controller")
    with AdminClient([leader.address], timeout_ms=20_000) as client:
        for i in range(40):  # ~40 x 64 partition records: far more than one window
            assert client.create_topics([CreatableTopic(f"big{i}", 64, 3)])[0].error.ok
        # A watcher that reads one response and then nothing: a small receive window
        # (no BDP growth), so the controller's sends block.
        channel = grpc.insecure_channel(leader.address, options=[("grpc.http2.bdp_probe", 0)])
        call = apb_grpc.AdminStub(channel).Watch(apb.WatchRequest(from_offset=0))
        first = next(call)
        wait_until(lambda: "WATCH_TOO_SLOW" in leader.log_text(), 30,
                   "the controller cut the slow watcher off")
        got = [first]
        with pytest.raises(grpc.RpcError) as info:
            got += list(call)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "WATCH_TOO_SLOW" in info.value.details()
        trailing = dict(info.value.trailing_metadata() or ())
        resume = int(trailing[RESUME_OFFSET_KEY])
        last_token = got[-1].next_offset
        assert resume <= last_token or resume == last_token
        channel.close()
        # Resume from the last token received: the rest, nothing twice.
        watcher = Watcher(client, from_offset=last_token)
        offsets = [e.offset for r in got for e in r.events]
        for update in watcher:
            offsets += [e.offset for e in update.events]
            if update.next_offset >= update.committed_offset:
                break
        watcher.close()
    for node in cluster.nodes.values():
        node.terminate()
    assert offsets == expected_offsets(leader, max(offsets) + 1)


def test_metakraft_watch_prints_the_history_and_refuses_a_bad_start(
        plain: ControllerCluster) -> None:
    cluster = plain
    wait_until(cluster.active_node, 30, "an active controller")
    bootstrap = ",".join(cluster.bootstrap)
    with AdminClient(cluster.bootstrap, timeout_ms=20_000) as client:
        assert client.create_topics([CreatableTopic("orders", 2, 3)])[0].error.ok
    runner = CliRunner()
    result = runner.invoke(cli, ["watch", "--bootstrap", bootstrap, "--from-offset", "0",
                                 "--until-caught-up", "--output", "json", "--topic", "orders"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["record_type"] for line in lines] == ["topic", "partition", "partition"]
    assert {line["resource_name"] for line in lines} == {"orders"}
    assert lines[0]["record"]["fields"]["name"] == "orders"
    text = runner.invoke(cli, ["watch", "--bootstrap", bootstrap, "--from-offset", "0",
                               "--until-caught-up", "--type", "broker", "--type", "topic"])
    assert text.exit_code == 0, text.output
    assert " topic     topic orders by User:ANONYMOUS " in text.stdout
    # Beyond the end: refused, not waited for forever.
    far = runner.invoke(cli, ["watch", "--bootstrap", bootstrap, "--from-offset", "10000000",
                              "--timeout-ms", "20000"])
    assert far.exit_code == 1, far.output
    assert "OUT_OF_RANGE" in far.stderr and "beyond the committed end" in far.stderr
    with AdminClient(cluster.bootstrap) as client, pytest.raises(WatchFailedError) as info:
        list(Watcher(client, topic="a", topic_prefix="b"))
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
