"""The remote tier with real controller processes: a directory tier on real files and
an S3 tier on a real S3-compatible server on loopback.

- Under a stream of writes, with the active controller killed (kill -9) as it copies,
  local segments are deleted several times on every controller, each local log stays
  bounded, and tier + local log hold every acknowledged change from offset 0.
- With the S3 endpoint hanging, writes and commits go on; the active controller is
  killed in the middle of a copy; once the endpoint is back, the next leader cleans
  up what was left half done and the tier catches up, with nothing incomplete
  referenced and no gap.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.api.client import AdminClient
from controller.cli.main import cli
from controller.cli.tier_cmd import replayed_tier_state
from controller.metadata import ErrorCode
from controller.metadata.tier import SegmentState
from controller.storage.meta_properties import DataDir, format_data_dir
from controller.tier.history import history_batches, list_tier, plan_history
from controller.tier.objects import Manifest
from controller.tier.remote import RemoteStorage, open_store
from tests.support.controller_processes import ControllerCluster
from tests.support.polling import wait_until
from tests.support.s3_server import CREDENTIALS, S3Server, running_s3
from tests.support.tiered_cluster import (
    Writer,
    copy_in_flight,
    count_lines,
    scrape,
    start_cluster,
    topic_history,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

START_S = 20.0


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Server]:
    with running_s3(tmp_path / "moto.log") as server:
        yield server


def stop_all(cluster: ControllerCluster) -> None:
    for node in cluster.nodes.values():
        if node.running:
            assert node.terminate() == 0, node.log_text()[-3000:]


def check_history(cluster: ControllerCluster, tier_url: str, writer: Writer) -> None:
    """Every controller's tier + local log holds each acknowledged create exactly once
    from offset 0; what the tier state calls finished is complete in the tier."""
    store = open_store(tier_url)
    listing = list_tier(store, cluster.cluster_id)
    tier_epochs = epochs_of_batches(store, listing.segments)
    complete = {m.segment_id for m in (*listing.segments, *listing.snapshots)}
    vouched: list[int] = []
    for node in cluster.nodes.values():
        created, _removed, records = topic_history(store, node.data_dir)
        counts = Counter(created)
        missing = [n for n in writer.created if counts[n] != 1]
        assert not missing, f"controller {node.node_id}: {missing[:5]} not exactly once"
        objects, _end = replayed_tier_state(str(node.data_dir))
        finished = {o.segment_id for o in objects if o.state is SegmentState.COPY_FINISHED}
        assert finished <= complete, finished - complete
        result = CliRunner().invoke(cli, ["tier", "verify", "--tier", tier_url, "--log-dir",
                                          str(node.data_dir)])
        assert result.exit_code == 0 and "no gap" in result.output, result.output
        # Every object is on the hash chain and is the one its record names (the local
        # log holds the newest records), across the leader kills and abandoned copies;
        # a controller that stopped behind the others has not seen the newest copies
        # announced (not vouched for, not a fault).
        chain = re.search(r"hash chain: (\d+) object\(s\), (\d+) matching", result.output)
        assert chain and int(chain[2]) >= 2, result.output
        later = re.search(r"(\d+) copied after the end of the log read", result.output)
        assert int(chain[1]) == int(chain[2]) + (int(later[1]) if later else 0), result.output
        assert "not yet in the history read" not in result.output
        vouched.append(int(chain[2]))
        described = CliRunner().invoke(cli, ["tier", "describe", "--tier", tier_url,
                                             "--log-dir", str(node.data_dir), "--output",
                                             "json"])
        assert described.exit_code == 0, described.output
        doc = json.loads(described.output)
        # The leader epochs the tier's history went through, as its batches say (the
        # tier may not yet hold a batch of the epochs after the kills: what it copied
        # last can still be older).
        epochs = [(e["epoch"], e["start_offset"]) for e in doc["epochs"]]
        assert epochs == tier_epochs, (epochs, tier_epochs)
        assert {o["id"] for o in doc["objects"] if o["kind"] == "segment"} == {
            m.segment_id for m in listing.segments}
        assert records > 0
    # The controller that is furthest along vouches for every object.
    assert max(vouched) == sum(1 for m in (*listing.segments, *listing.snapshots) if m.hashed)


def epochs_of_batches(store: RemoteStorage, segments: Sequence[Manifest]
                      ) -> list[tuple[int, int]]:
    """(epoch, first offset) of every leader epoch among the tier's batches, read
    batch by batch in offset order (the manifests' epoch slices must say the same)."""
    starts: dict[int, int] = {}
    for _piece, batch in history_batches(store, plan_history(segments, [])):
        starts.setdefault(batch.epoch, batch.base_offset)
    return sorted(starts.items())


def tier_covers_every_local_log(cluster: ControllerCluster, tier_url: str) -> bool:
    """Whether the tier reaches every controller's first local offset. A controller
    that fell behind while the tier stalled was sent a snapshot (Raft's log starts at
    the snapshot) and holds nothing below it: until the copier catches up, only the
    others hold that range, and that controller's tier + local log has a gap."""
    try:
        end = max((m.end_offset for m in list_tier(open_store(tier_url)).segments),
                  default=0)
        starts = [min(int(p.stem) for p in DataDir(n.data_dir).log_dir.glob("*.log"))
                  for n in cluster.nodes.values()]
    except (OSError, ValueError):
        return False  # a segment deleted while listed: look again
    return end >= max(starts)


def local_log_bytes(node_dir: Path) -> int:
    return sum(p.stat().st_size for p in DataDir(node_dir).log_dir.glob("*.log"))


def test_directory_tier_trims_local_logs_and_keeps_history_across_leader_kills(
        tmp_path: Path) -> None:
    tier_url = (tmp_path / "tier").as_uri()
    cluster = start_cluster(tmp_path, tier_url)
    writer = Writer(cluster.bootstrap)
    try:
        wait_until(cluster.active_node, START_S, "an active controller")
        cluster.register_brokers([1, 2, 3])
        writer.start()
        for _kill in range(2):
            active = wait_until(cluster.active_node, START_S, "an active controller")
            copies = count_lines(active, "tier_copy_started")
            # Kill the leader the moment it starts its next copy.
            wait_until(lambda a=active, c=copies: count_lines(a, "tier_copy_started") > c,
                       60.0, "the active controller to start a copy", interval_s=0.005)
            active.kill()
            wait_until(lambda a=active: (n := cluster.active_node()) is not None and n is not a,
                       START_S, "a new active controller")
            active.start()
        # Every controller deletes local segments several times.
        wait_until(lambda: all(count_lines(n, "local_segments_deleted") >= 3
                               for n in cluster.nodes.values()),
                   90.0, "every controller to delete local segments three times")
        active = wait_until(cluster.active_node, START_S, "an active controller")
        # (A counter counts since the process started: this one may be new.)
        metrics = wait_until(
            lambda: (m := scrape(active)).get('metakraft_tier_copies_total{kind="segment"}', 0)
            >= 1 and m, 30.0, "a copy counted by the active controller")
        assert metrics["metakraft_tier_up"] == 1
        assert metrics['metakraft_tier_copied_bytes_total{kind="segment"}'] > 0
        assert metrics["metakraft_tier_copied_end_offset"] > 0
        assert metrics["metakraft_tier_local_log_start_offset"] > 0
        assert metrics["metakraft_tier_remote_objects"] >= 2
        for name in ("metakraft_tier_copy_lag_offsets", "metakraft_tier_copy_lag_bytes",
                     "metakraft_tier_errors_total", "metakraft_tier_local_log_bytes",
                     "metakraft_tier_remote_bytes",
                     "metakraft_tier_last_success_timestamp_seconds"):
            assert name in metrics, name
        writer.stop()
        assert len(writer.created) > 20, writer.created
        wait_until(lambda: tier_covers_every_local_log(cluster, tier_url), 60.0,
                   "the tier to reach every controller's local log")
    finally:
        writer.stop()
        stop_all(cluster)
    for node in cluster.nodes.values():
        first = min(int(p.stem) for p in DataDir(node.data_dir).log_dir.glob("*.log"))
        assert first > 0, f"controller {node.node_id} never trimmed its local log"
    check_history(cluster, tier_url, writer)
    tiered = sum(m.size_bytes for m in list_tier(open_store(tier_url)).segments)
    for node in cluster.nodes.values():
        # Bounded: the local log is a fraction of the history the tier holds.
        assert local_log_bytes(node.data_dir) < tiered, (node.node_id, tiered)


def test_s3_tier_survives_an_endpoint_outage_and_a_leader_killed_mid_copy(
        tmp_path: Path, s3: S3Server) -> None:
    s3.create_bucket("meta")
    tier_url = s3.url("meta", "cluster-a")
    cluster = start_cluster(tmp_path, tier_url, env=CREDENTIALS)
    writer = Writer(cluster.bootstrap)
    store = open_store(tier_url)
    try:
        wait_until(cluster.active_node, START_S, "an active controller")
        cluster.register_brokers([1, 2, 3])
        writer.start()
        wait_until(lambda: len(list_tier(store).segments) >= 2, 60.0, "two objects in S3")
        active = wait_until(cluster.active_node, START_S, "an active controller")
        s3.pause()  # the endpoint hangs: puts, gets and deletes wait for their timeouts
        paused_at = time.monotonic()
        acked = len(writer.created)
        # The leader announces a copy (COPY_STARTED commits) and hangs in its put, or
        # already hangs in one it started before the pause. A copy that finished just
        # before it may not have logged so yet: one still unfinished 2 s into the
        # outage (or started after the pause) cannot finish until S3 is back.
        wait_until(lambda: time.monotonic() > paused_at + 2 and copy_in_flight(active),
                   60.0, "a copy to start while S3 hangs", interval_s=0.005)
        active.kill()
        # The copies it had started: the one hanging must be cleaned up by a successor.
        # (Once restarted it may lead again and start others, which a stop can catch
        # half done: those are not the dead leader's.)
        started_before_kill = set(re.findall(r"event=tier_copy_started id=(\w+)",
                                             active.log_text()))
        wait_until(
            lambda: (n := cluster.active_node()) is not None and n is not active and n,
            START_S, "a new active controller")
        # Writes and commits go on without the tier.
        wait_until(lambda: len(writer.created) >= acked + 10, 60.0,
                   "ten more acknowledged creates while S3 hangs")
        active.start()
        others = [n for n in cluster.nodes.values() if n is not active]

        def logged(event: str) -> int:
            # Leadership may move again under load: whoever leads does the work.
            return sum(count_lines(n, event) for n in others)

        # The successor's own tier work fails too: one line says so, however often it
        # retries meanwhile.
        wait_until(lambda: logged("tier_unavailable") >= 1, 60.0,
                   "the successor to report the tier unavailable")
        s3.resume()
        # It cleans up the dead leader's half-done copy (or its half-done delete), says
        # once that the tier is back, and the tier catches up.
        wait_until(lambda: any("reason=abandoned_copy" in n.log_text()
                               or "reason=unfinished_delete" in n.log_text() for n in others),
                   60.0, "the successor to clean up the half-done copy")
        # "Back" is said by a controller that saw the tier fail; if leadership moved
        # meanwhile to one that never did, its copies are the sign instead. Any
        # controller may lead by now, the restarted one included.
        nodes = list(cluster.nodes.values())

        def copies_anywhere() -> int:
            return sum(count_lines(n, "tier_object_copied") for n in nodes)

        copied_before = copies_anywhere()

        def recovered() -> bool:
            return logged("tier_available") >= 1 or copies_anywhere() > copied_before

        # The copiers retry with a backoff that grew through the outage (up to
        # max_backoff_ms) and every S3 call waits out its timeout first. Whoever leads
        # holds the dead leader's uncopied range: the leader served its followers from
        # the segments it kept below its snapshots (this test snapshots every few
        # hundred records) instead of resetting them to a snapshot.
        wait_until(recovered, 90.0, "the tier to work again")
        copied = copies_anywhere()
        wait_until(lambda: copies_anywhere() > copied, 60.0, "the tier to copy again")
        # One line per change of the tier's health, not one per retry (a dozen or more).
        assert all(count_lines(n, "tier_unavailable") <= 2 for n in cluster.nodes.values())
        writer.stop()
        wait_until(lambda: tier_covers_every_local_log(cluster, tier_url), 60.0,
                   "the tier to reach every controller's local log")
    finally:
        writer.stop()
        s3.resume()
        stop_all(cluster)
    check_history(cluster, tier_url, writer)
    # Nothing half done is left in the state of any controller.
    for node in cluster.nodes.values():
        objects, _ = replayed_tier_state(str(node.data_dir))
        stale = [o for o in objects if o.state is SegmentState.DELETE_STARTED
                 or (o.state is SegmentState.COPY_STARTED
                     and o.segment_id in started_before_kill)]
        assert not stale, (node.node_id, stale)


def test_a_controller_replacing_a_lost_disk_starts_from_the_tiers_snapshot(
        tmp_path: Path) -> None:
    """`storage format --bootstrap-from-tier`: a controller whose disk was lost starts
    from the tier's newest snapshot (checked) and fetches only the log after it."""
    tier_url = (tmp_path / "tier").as_uri()
    cluster = start_cluster(tmp_path, tier_url)
    writer = Writer(cluster.bootstrap)
    try:
        active = wait_until(cluster.active_node, START_S, "an active controller")
        cluster.register_brokers([1, 2, 3])
        writer.start()
        wait_until(lambda: list_tier(open_store(tier_url)).snapshots, 60.0, "a tiered snapshot")
        victim = next(n for n in cluster.nodes.values() if n is not active)
        assert victim.terminate() == 0
        shutil.rmtree(victim.data_dir)
        result = CliRunner().invoke(cli, [
            "storage", "format", "--cluster-id", cluster.cluster_id, "--node-id",
            str(victim.node_id), "--data-dir", str(victim.data_dir),
            "--bootstrap-from-tier", tier_url])
        assert result.exit_code == 0, result.output
        found = re.search(r"snapshot at offset (\d+)", result.output)
        assert found, result.output
        seeded = int(found[1])
        assert seeded > 0
        victim.start()
        loaded = wait_until(lambda: re.findall(r"event=snapshot_loaded end_offset=(\d+)",
                                               victim.log_text()),
                            START_S, "the seeded controller to load a snapshot")
        assert int(loaded[0]) == seeded  # its first image: the tier's snapshot
        writer.stop()
        with AdminClient(cluster.bootstrap, timeout_ms=10_000) as admin:
            def caught_up() -> bool:
                quorum = admin.describe_quorum()
                ends = {r.replica_id: r.log_end_offset for r in quorum.voters}
                return ends.get(victim.node_id, -1) >= quorum.high_watermark > seeded
            wait_until(caught_up, 60.0, "the seeded controller to catch up")
        # The tier's snapshot may reach past its log objects: tier + the seeded local
        # log are one history once the copier has passed the snapshot's end.
        wait_until(lambda: max(m.end_offset for m in list_tier(open_store(tier_url)).segments)
                   >= seeded, 60.0, "the tier's log objects to reach the seeded snapshot")
    finally:
        writer.stop()
        stop_all(cluster)
    result = CliRunner().invoke(cli, ["tier", "verify", "--tier", tier_url, "--log-dir",
                                      str(victim.data_dir)])
    assert result.exit_code == 0 and "no gap" in result.output, result.output


def test_a_leader_without_the_range_to_copy_hands_leadership_to_a_voter_with_it(
        tmp_path: Path, s3: S3Server) -> None:
    """The S3 outage again, with the case that used to need a restart: a controller
    reset to a leader's snapshot (its disk was replaced while the tier hung) becomes
    the active one and lacks the range the tier needs next. It hands leadership to a
    voter that holds it, and the tier catches up by itself."""
    s3.create_bucket("meta")
    tier_url = s3.url("meta", "cluster-b")
    cluster = start_cluster(tmp_path, tier_url, env=CREDENTIALS)
    writer = Writer(cluster.bootstrap)
    store = open_store(tier_url)
    try:
        active = wait_until(cluster.active_node, START_S, "an active controller")
        cluster.register_brokers([1, 2, 3])
        writer.start()
        wait_until(lambda: len(list_tier(store).segments) >= 2, 60.0, "two objects in S3")
        s3.pause()
        victim = next(n for n in cluster.nodes.values() if n is not active)
        assert victim.terminate() == 0
        shutil.rmtree(victim.data_dir)
        format_data_dir(victim.data_dir, cluster.cluster_id, victim.node_id)
        # The leader snapshots on (its local log is trimmed below its snapshots and the
        # copied end): the victim will be reset to a snapshot above the tier's end.
        written = count_lines(active, "snapshot_written")
        wait_until(lambda: count_lines(active, "snapshot_written") >= written + 2, 60.0,
                   "the leader to write two more snapshots while S3 hangs")
        victim.start()
        loaded = wait_until(lambda: re.findall(r"event=snapshot_loaded end_offset=(\d+)",
                                               victim.log_text()),
                            START_S, "the new replica to be reset to the leader's snapshot")
        with AdminClient(cluster.bootstrap, timeout_ms=30_000) as admin:
            outcome = admin.transfer_leadership(victim.node_id)
            assert outcome.error.code is ErrorCode.NONE, outcome
        s3.resume()
        # It finds it lacks [copied end, its snapshot) and hands over, by itself.
        wait_until(lambda: count_lines(victim, "tier_range_not_held") >= 1, 90.0,
                   "the new active controller to find it lacks the range")
        line = re.search(r'event=tier_range_not_held .*missing="\[(\d+), (\d+)\)" to=(\d+)',
                         victim.log_text())
        assert line and int(line[2]) == int(loaded[0]), victim.log_text()[-3000:]
        assert int(line[3]) != victim.node_id
        # The voter it named or the other one (the hand-over's election can go to either;
        # one run's went to the other), never the victim again: the tier's progress past
        # the victim's snapshot below is what shows the range was held.
        wait_until(lambda: cluster.active_node() not in (None, victim), 30.0,
                   "a voter holding the range to lead")
        wait_until(lambda: max(m.end_offset for m in list_tier(store).segments) > int(line[2]),
                   90.0, "the tier to copy the range past the victim's snapshot")
        writer.stop()
        wait_until(lambda: tier_covers_every_local_log(cluster, tier_url), 60.0,
                   "the tier to reach every controller's local log")
    finally:
        writer.stop()
        s3.resume()
        stop_all(cluster)
    check_history(cluster, tier_url, writer)
