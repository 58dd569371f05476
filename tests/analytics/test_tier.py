"""The Spark audit over a remote tier + a trimmed local log (real controller processes
wrote both): the whole history from offset 0, the topic lifecycle equal to what the
writer was told, time travel from the tier's snapshots, and a damaged tier object
named by the reader (failfast) or reported and skipped (permissive)."""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

import analytics
from analytics import audit, row_cache, state, states_cache
from analytics.reader import MetakraftCorruptLogError, plan_history_files, read_file
from analytics.report import report_row_parts, report_rows
from analytics.tier_chain import tier_chain_report
from controller.api.client import AdminClient
from controller.cli.audit_cmd import window_start
from controller.cli.main import cli
from controller.metadata import CreatableTopic, ErrorCode
from controller.metadata.config_schema import ResourceType
from controller.metadata.configs import ConfigResource
from controller.storage.meta_properties import DataDir
from controller.tier.history import HistoryGapError, list_tier
from controller.tier.remote import open_store
from tests.support.controller_processes import ControllerCluster
from tests.support.polling import wait_until
from tests.support.tier_tamper import TAMPERINGS, replace_object
from tests.support.tiered_cluster import Writer, count_lines, start_cluster, tier_config

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@attrs.frozen
class TieredRun:
    tier_url: str
    tier_dir: Path
    data_dirs: tuple[Path, ...]
    created: tuple[str, ...]
    deleted: tuple[str, ...]


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> TieredRun:
    """Three controllers with a directory tier, a writer creating and deleting topics,
    the leader killed once, run until every controller trimmed its local log twice."""
    root = tmp_path_factory.mktemp("tiered")
    tier_dir = root / "tier"
    cluster = start_cluster(root, tier_dir.as_uri())
    writer = Writer(cluster.bootstrap)
    try:
        wait_until(cluster.active_node, 20.0, "an active controller")
        cluster.register_brokers([1, 2, 3])
        writer.start()
        active = wait_until(cluster.active_node, 20.0, "an active controller")
        wait_until(lambda: count_lines(active, "tier_object_copied") >= 2, 60.0, "copies")
        active.kill()
        wait_until(lambda: (n := cluster.active_node()) is not None and n is not active, 20.0,
                   "a new active controller")
        active.start()
        # The tests below need two snapshots in the tier (a window between them, one
        # to tamper with): only the active controller copies its newest, so a quick
        # run can trim every log twice with one tiered.
        wait_until(lambda: all(count_lines(n, "local_segments_deleted") >= 2
                               for n in cluster.nodes.values())
                   and len(list_tier(open_store(tier_dir.as_uri())).snapshots) >= 2,
                   90.0, "local trimming and two tiered snapshots")
        writer.stop()
    finally:
        writer.stop()
        for node in cluster.nodes.values():
            if node.running:
                node.terminate()
    return TieredRun(tier_dir.as_uri(), tier_dir,
                     tuple(n.data_dir for n in cluster.nodes.values()),
                     tuple(writer.created), tuple(writer.deleted))


def lifecycle(spark: Any, log_dir: Path | None, tier: str | None) -> dict[str, set[str]]:
    options = {"tier": tier} if tier else {}
    df = analytics.load(spark, str(log_dir) if log_dir else None, **options)
    events: dict[str, set[str]] = {"created": set(), "deleted": set()}
    for row in audit.topic_lifecycle(df).collect():
        if row["event"] in events:
            events[row["event"]].add(row["topic_name"])
    return events


def test_the_audit_sees_every_record_from_offset_0_through_the_tier(
        spark: Any, tiered: TieredRun, tmp_path: Path) -> None:
    local = tiered.data_dirs[1]
    first_local = min(int(p.stem) for p in DataDir(local).log_dir.glob("*.log"))
    assert first_local > 0  # the local log alone has lost its head
    df = analytics.read_log(spark, str(local), tier=tiered.tier_url)
    stats = df.agg({"offset": "min"}).first()
    assert stats is not None and stats[0] == 0
    offsets = df.select("offset").distinct().count()
    assert offsets == df.agg({"offset": "max"}).first()[0] + 1  # type: ignore[index]
    assert df.count() == offsets  # each offset once, though copies overlap

    through_tier = lifecycle(spark, local, tiered.tier_url)
    assert set(tiered.created) <= through_tier["created"]
    assert set(tiered.deleted) <= through_tier["deleted"]
    local_only = lifecycle(spark, local, None)
    assert local_only["created"] < through_tier["created"]  # what the tier adds
    # The tier alone holds everything up to its copied end.
    tier_only = lifecycle(spark, None, tiered.tier_url)
    assert tier_only["created"] <= through_tier["created"] and tier_only["created"]

    out = tmp_path / "report"

    def audit() -> tuple[str, str, str]:
        result = CliRunner().invoke(cli, ["audit", "--tier", tiered.tier_url, "--log-dir",
                                          str(local), "--out", str(out)])
        assert result.exit_code == 0 and "ok  tier_chain" in result.output, result.output
        report = re.sub(r"audit time: [0-9.]+ s", "", (out / "report.md").read_text())
        return report, (out / "summary.json").read_text(), result.output

    report, summary, said = audit()
    assert f"- offsets 0 to {offsets - 1} ({offsets} records);" in report
    # Again: every tier object's rows from the row cache the first run filled
    # (out/row-cache), only the local log decoded; the same report.
    pieces = plan_history_files(str(local), tiered.tier_url)
    total, tier_pieces = len(pieces), sum(1 for p in pieces if p.tier)
    assert 0 < tier_pieces < total
    assert f"0 of {total} pieces cached, {total} to decode" in said, said
    again = audit()
    assert again[:2] == (report, summary)
    assert (f"row cache {out.resolve() / 'row-cache'}/rows-v1-failfast: {tier_pieces} of "
            f"{total} pieces cached, {total - tier_pieces} to decode") in again[2], again[2]
    # And the partition states of the tier objects' records as the first run kept them.
    kept_to = pieces[tier_pieces - 1].end
    assert f"partition states kept up to offset {kept_to} for the next audit" in said, said
    assert f"partition states derived from offset {kept_to} (kept" in again[2], again[2]


def test_time_travel_starts_from_the_tiers_snapshots(spark: Any, tiered: TieredRun) -> None:
    local = str(tiered.data_dirs[0])
    full = analytics.read_log(spark, local, tier=tiered.tier_url)
    with_snapshots = analytics.read_log(spark, local, tier=tiered.tier_url, snapshots=True)
    snapshot_offsets = sorted(r[0] for r in with_snapshots.where("source = 'snapshot'")
                              .select("offset").distinct().collect())
    assert snapshot_offsets, "the tier holds snapshots"
    at = snapshot_offsets[len(snapshot_offsets) // 2] + 3
    names = [r["topic_name"] for r in state.topics_at(full, at).collect()]
    assert names and names == [r["topic_name"] for r in
                               state.topics_at(with_snapshots, at).collect()]


def test_a_damaged_tier_object_is_named_or_skipped(spark: Any, tiered: TieredRun,
                                                   tmp_path: Path) -> None:
    damaged = tmp_path / "tier"
    shutil.copytree(tiered.tier_dir, damaged)
    listing = list_tier(open_store(damaged.as_uri()))
    victim = listing.segments[1]
    path = damaged / victim.data_key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    pieces = plan_history_files(str(tiered.data_dirs[0]), damaged.as_uri())
    piece = next(p for p in pieces if p.path == victim.data_key)
    with pytest.raises(MetakraftCorruptLogError, match=victim.data_key) as failfast:
        list(read_file(piece))
    assert "at offset" in str(failfast.value)
    rows = [b for b in read_file(piece, permissive=True)]
    assert sum(b.num_rows for b in rows) == 1
    assert victim.data_key in rows[0].column("_corrupt")[0].as_py()
    # Through Spark and the CLI: exit 2 naming the object; --permissive reports it.
    result = CliRunner().invoke(cli, ["audit", "--tier", damaged.as_uri(), "--log-dir",
                                      str(tiered.data_dirs[0]), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and victim.data_key in result.output, result.output
    result = CliRunner().invoke(cli, ["audit", "--tier", damaged.as_uri(), "--log-dir",
                                      str(tiered.data_dirs[0]), "--out", str(tmp_path / "p"),
                                      "--permissive"])
    assert result.exit_code == 1 and "VIOLATED  log_readable" in result.output, result.output
    assert victim.data_key in (tmp_path / "p" / "report.md").read_text()


def tier_without_its_newest(tiered: TieredRun, tmp_path: Path
                            ) -> tuple[Path, Callable[[], None]]:
    """A copy of the run's tier without its two newest log objects (not copied yet),
    and what copies them in."""
    tier, held = tmp_path / "tier", tmp_path / "held"
    shutil.copytree(tiered.tier_dir, tier)
    keys = [k for m in list_tier(open_store(tier.as_uri())).segments[-2:]
            for k in (m.data_key, m.manifest_key)]
    for key in keys:
        (held / key).parent.mkdir(parents=True, exist_ok=True)
        (tier / key).rename(held / key)

    def copy_newest() -> None:
        for key in keys:
            (held / key).rename(tier / key)
    return tier, copy_newest


def test_a_re_audit_decodes_only_new_tier_objects_and_reports_as_a_full_audit(
        spark: Any, tiered: TieredRun, tmp_path: Path) -> None:
    """The row cache: an audit of the tier before its newest objects were copied
    fills it; once they are there, a re-audit decodes only them, and its rows equal
    a full audit's (`--full`) and the uncached reader's, overlapping copies from the
    leader kill included. A damaged object (permissive) is never cached."""
    tier, copy_newest = tier_without_its_newest(tiered, tmp_path)
    cache = tmp_path / "cache"
    said: list[str] = []

    def rows(*, use: bool = True, permissive: bool = False, cached: bool = True
             ) -> list[Any]:
        df = report_rows(spark, None, tier=tier.as_uri(), permissive=permissive,
                         cache_dir=cache if cached else None, use_cache=use,
                         progress=said.append)
        return sorted(df.collect(), key=lambda r: r["offset"])

    def files() -> dict[str, int]:
        return {p.name: p.stat().st_mtime_ns for p in cache.rglob("*.parquet")}

    def pieces() -> set[str]:
        return {k for p in plan_history_files(None, tier.as_uri())
                if (k := row_cache.piece_key(p)) is not None}

    before = rows()
    seen, stored = pieces(), files()
    assert said[-1].endswith(f"0 of {len(seen)} pieces cached, {len(seen)} to decode")
    assert {Path(f).stem for f in stored} == seen
    copy_newest()
    assert pieces() > seen
    again = rows()
    now = pieces()
    assert said[-1].endswith(f"{len(seen)} of {len(now)} pieces cached, "
                             f"{len(now - seen)} to decode")
    assert {k: v for k, v in files().items() if k in stored} == stored  # not rewritten
    assert again[:len(before)] == before and len(again) > len(before)
    assert again == rows(use=False) == rows(cached=False)
    assert said[-1].endswith("(--full: the cache is not read)")
    # Every piece cached: nothing decoded, and nothing for the audit to persist.
    whole = report_row_parts(spark, None, tier=tier.as_uri(), cache_dir=cache)
    assert whole.new is None and whole.held()[1] is None
    # A cache folder that cannot be written (under a file): said, and the rows decoded.
    (tmp_path / "a-file").write_text("")
    unwritable = report_rows(spark, None, tier=tier.as_uri(),
                             cache_dir=tmp_path / "a-file" / "cache", progress=said.append)
    assert sorted(unwritable.collect(), key=lambda r: r["offset"]) == again
    assert "cannot be written (" in said[-1] and said[-1].endswith("nothing is cached")
    # (The whole report from the cache against a full audit's: the first test here.)

    # Damage: read (and reported) on every audit, never cached.
    victim = list_tier(open_store(tier.as_uri())).segments[-2]
    data = bytearray((tier / victim.data_key).read_bytes())
    data[len(data) // 2] ^= 0x10
    (tier / victim.data_key).write_bytes(bytes(data))
    damaged = rows(permissive=True)
    assert said[-1].endswith(f"0 of {len(now)} pieces cached, {len(now)} to decode")
    assert damaged == rows(permissive=True) == rows(permissive=True, cached=False)
    assert said[-1].endswith(f"{len(now) - 1} of {len(now)} pieces cached, 1 to decode")
    corrupt = [r["_corrupt"] for r in damaged if r["_corrupt"]]
    assert len(corrupt) == 1 and victim.data_key in corrupt[0]
    # As the audit reads them (`scratch`): every piece not cached is decoded now into
    # a Parquet file (the damaged one into the scratch folder, never the cache), and
    # every row is read from such files: nothing for the audit to persist.
    scratch = tmp_path / "scratch"
    parts = report_row_parts(spark, None, tier=tier.as_uri(), permissive=True,
                             cache_dir=cache, scratch=scratch)
    assert parts.new is None and parts.kept is not None
    assert len(list(scratch.glob("*.parquet"))) == 1
    assert sorted(parts.kept.collect(), key=lambda r: r["offset"]) == damaged
    assert said[-1].endswith(f"{len(now) - 1} of {len(now)} pieces cached, 1 to decode")
    # Undamaged, failfast: the pieces decoded go to the cache and the scratch stays
    # empty.
    data[len(data) // 2] ^= 0x10  # mended
    (tier / victim.data_key).write_bytes(bytes(data))
    shutil.rmtree(cache)
    scratch = tmp_path / "scratch-2"
    parts = report_row_parts(spark, None, tier=tier.as_uri(), cache_dir=cache,
                             scratch=scratch)
    assert parts.kept is not None and not list(scratch.glob("*.parquet"))
    assert sorted(parts.kept.collect(), key=lambda r: r["offset"]) == again
    assert {Path(f).stem for f in files()} == now
    # A cache file that cannot be written (here: its folder is a file; a full disk):
    # the rows go to the scratch instead and the audit goes on.
    blocked = row_cache.decode(spark, plan_history_files(None, tier.as_uri())[:2],
                               permissive=False, folder=tmp_path / "a-file" / "cache",
                               scratch=tmp_path / "scratch-3")
    assert [Path(f).parent for f in blocked] == [tmp_path / "scratch-3"] * 2


def test_an_audit_of_nothing_decodes_nothing_and_reads_no_rows(
        spark: Any, tmp_path: Path) -> None:
    """An empty read plan (nothing in the range asked for): no decoding job and no
    Parquet path for Spark's reader (which refuses none), just no rows."""
    scratch = tmp_path / "scratch"
    parts = report_row_parts(spark, str(tmp_path), plan=[], scratch=scratch)
    assert parts.new is None and parts.kept is not None
    assert parts.kept.count() == 0 and {"offset", "record_type"} <= set(parts.kept.columns)
    assert not scratch.exists()


def test_a_re_audit_derives_partition_states_only_after_its_kept_boundary(
        spark: Any, tiered: TieredRun, tmp_path: Path) -> None:
    """Partition-state checkpoints: an audit keeps the states of the records of its
    leading tier objects and the last state of each partition after them; once newer
    objects are in the tier, a re-audit derives states only for the records after that
    boundary, and they equal a full derivation's (overlapping copies from the leader
    kill included). Each audit keeps one boundary; a plan that no longer starts with
    the same objects misses."""
    tier, copy_newest = tier_without_its_newest(tiered, tmp_path)
    cache = tmp_path / "cache"
    folder = states_cache.folder_of(row_cache.mode_dir(cache.resolve(), permissive=False,
                                                       change_json=False))

    def sorted_rows(df: Any) -> list[Any]:
        return sorted(df.collect(), key=lambda r: (r["offset"], r["partition_id"]))

    def derive(hit: states_cache.Hit | None) -> tuple[Any, Any, Any, Any]:
        """(the rows, indexed states, topic index, checkpoint) as the audit derives them."""
        rows = report_rows(spark, None, tier=tier.as_uri(), cache_dir=cache)
        states, index, checkpoint = states_cache.derive(spark, rows, audit.topic_names(rows),
                                                        hit)
        assert (states.kept is None) == (hit is None)  # what was kept is read, not derived
        return rows, states.joined(), index, checkpoint

    def named(indexed: Any, index: Any) -> list[Any]:
        return sorted_rows(audit.name_partition_states(indexed, index))

    first = states_cache.boundaries(plan_history_files(None, tier.as_uri()))
    assert first and states_cache.find(folder, first) is None
    _, indexed, _, checkpoint = derive(None)
    assert checkpoint is None
    assert states_cache.store(folder, first, None, indexed, None) == first[-1]
    assert states_cache.store(folder, first, states_cache.find(folder, first), indexed,
                              None) is None  # nothing new to keep

    copy_newest()
    plan = plan_history_files(None, tier.as_uri())
    later = states_cache.boundaries(plan)
    assert later[:len(first)] == first and len(later) > len(first)
    hit = states_cache.find(folder, later)
    assert hit is not None and hit.boundary == first[-1] and len(hit.chunks) == 1
    rows, indexed, index, checkpoint = derive(hit)
    full = sorted_rows(audit.partition_states(rows))
    assert checkpoint is not None and named(indexed, index) == full
    assert len(full) > sum(1 for r in full if r["offset"] < first[-1].end_offset) > 0
    assert states_cache.store(folder, later, hit, indexed, checkpoint) == later[-1]
    again = states_cache.find(folder, later)
    assert again is not None and again.boundary == later[-1] and len(again.chunks) == 2
    _, again_indexed, again_index, _ = derive(again)
    assert named(again_indexed, again_index) == full
    # Once done, the first boundary's manifest and checkpoint go; its chunk is the second's.
    assert states_cache.prune(folder, later[-1]) == 2
    assert len(list(folder.glob("*" + states_cache.MANIFEST_SUFFIX))) == 1
    assert len(list(folder.glob("*.last"))) == 1
    # Another first object (the tier's head trimmed): nothing kept applies.
    assert states_cache.find(folder, states_cache.boundaries(plan[1:])) is None
    # A folder that cannot be written: said as such (the report goes on without).
    (tmp_path / "a-file").write_text("")
    with pytest.raises(states_cache.NotKeptError, match="FileExistsError"):
        states_cache.store(tmp_path / "a-file", later, None, indexed, None)


def verify(tier_dir: Path, log_dir: Path | None) -> Any:
    args = ["tier", "verify", "--tier", tier_dir.as_uri()]
    return CliRunner().invoke(cli, args + (["--log-dir", str(log_dir)] if log_dir else []))


@pytest.mark.parametrize("how", sorted(TAMPERINGS))
def test_tampering_with_the_tier_is_caught_by_tier_verify(how: str, tiered: TieredRun,
                                                          tmp_path: Path) -> None:
    """Each change keeps every CRC-32C valid; `tier verify` names the object, with a
    controller's log and (the newest objects aside) without."""
    tampered = tmp_path / "tier"
    shutil.copytree(tiered.tier_dir, tampered)
    untouched = verify(tampered, tiered.data_dirs[0])
    assert untouched.exit_code == 0 and "matching the log's record" in untouched.output
    named = TAMPERINGS[how](tampered)
    for log_dir in (tiered.data_dirs[0], None):
        result = verify(tampered, log_dir)
        assert result.exit_code == 1 and named in result.output, (log_dir, result.output)


def test_the_audit_checks_the_tier_against_the_logs_record(
        spark: Any, tiered: TieredRun, tmp_path: Path) -> None:
    """Each tampering is caught by the audit too: the whole `metakraft audit` for an
    object replaced (a verdict and a report naming it); the audit's own check over
    the rows it reads for the others; an object deleted stops the audit's plan,
    naming the offsets that went with it."""
    local = str(tiered.data_dirs[0])
    for how, tamper in sorted(TAMPERINGS.items()):
        tampered = tmp_path / tamper.__name__
        shutil.copytree(tiered.tier_dir, tampered)
        named = tamper(tampered)
        if how == "object deleted":
            try:
                plan_history_files(local, tampered.as_uri())
            except HistoryGapError as gap:
                assert "are missing" in str(gap)
                continue
            # The local log still holds the offsets: read from it, the broken link
            # names the object after the deleted one.
            rows = report_rows(spark, local, tier=tampered.as_uri())
            found = tier_chain_report(rows, tampered.as_uri(), complete=True).findings
            assert any(f.key == named for f in found), (how, found)
        elif how == "object replaced":
            out = tmp_path / "report"
            result = CliRunner().invoke(cli, ["audit", "--tier", tampered.as_uri(),
                                              "--log-dir", local, "--out", str(out)])
            assert result.exit_code == 1 and "VIOLATED  tier_chain" in result.output, \
                result.output
            report = (out / "report.md").read_text()
            assert "## Tier history (hash chain)" in report and named in report
        else:
            rows = report_rows(spark, local, tier=tampered.as_uri())
            found = tier_chain_report(rows, tampered.as_uri(), complete=True).findings
            assert any(f.key == named for f in found), (how, found)


def restore(tier_url: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["storage", "restore", "--tier", tier_url, *args])


def partitions_digest(rows: list[tuple[Any, ...]]) -> str:
    return hashlib.sha256(repr(sorted(rows)).encode()).hexdigest()


def restored_partitions(admin: AdminClient) -> list[tuple[Any, ...]]:
    return [(t.name, t.topic_id, p.partition_id, tuple(p.registration.replicas),
             tuple(p.registration.isr), p.registration.leader, p.registration.leader_epoch,
             p.registration.partition_epoch)
            for t in admin.describe_topics() for p in t.partitions]


def audited_partitions(df: Any, offset: int) -> list[tuple[Any, ...]]:
    return [(r["topic_name"], r["topic_id"], r["partition_id"], tuple(r["replicas"]),
             tuple(r["isr"]), r["leader"], r["leader_epoch"], r["partition_epoch"])
            for r in state.partitions_at(df, offset).collect()]


def image_partitions(data_dir: Path) -> list[tuple[Any, ...]]:
    """The partitions of a restored data dir's snapshot, as `metakraft shell` loads it."""
    from controller.cli.shell_sources import from_snapshot
    from controller.storage.snapshot_file import latest_snapshot

    snapshot_dir = DataDir(data_dir).snapshot_dir
    sid = latest_snapshot(snapshot_dir)
    assert sid is not None
    state = from_snapshot(snapshot_dir / sid.file_name).state
    return [(t.name, t.topic_id, i, tuple(p.replicas), tuple(p.isr), p.leader,
             p.leader_epoch, p.partition_epoch)
            for t in state.to_image().topics for i, p in enumerate(t.partitions)]


def test_a_cluster_restored_from_the_tier_equals_the_audits_time_travel(
        spark: Any, tiered: TieredRun, tmp_path: Path) -> None:
    """Every controller's disk lost: three new controllers restored from the tier (to
    its end, and to a point in the middle) hold partitions equal to the Spark audit's
    time travel at that offset (same digest); the middle one started as a cluster
    takes brokers and writes and names the cluster it came from."""
    history = analytics.read_log(spark, None, tier=tiered.tier_url, snapshots=True).cache()
    listing = list_tier(open_store(tiered.tier_url))
    old_id = listing.cluster_id
    # The tier's end: its log objects', or a snapshot copied past them.
    tier_end = max([m.end_offset for m in listing.segments]
                   + [m.end_offset for m in listing.snapshots])
    dry = restore(tiered.tier_url, "--dry-run")
    assert dry.exit_code == 0 and "dry run: nothing written" in dry.output, dry.output
    assert f"the tier holds offsets below {tier_end}" in dry.output
    for label, point in (("end", []), ("middle", ["--to-offset", str(tier_end // 2)])):
        root = tmp_path / label
        cluster = ControllerCluster(root, 3, extra_config=tier_config(
            (root / "new-tier").as_uri()))
        ends = set()
        for node_id, node in cluster.nodes.items():
            shutil.rmtree(node.data_dir)
            result = restore(tiered.tier_url, *point, "--data-dir", str(node.data_dir),
                             "--node-id", str(node_id), "--cluster-id", cluster.cluster_id)
            assert result.exit_code == 0, result.output
            ends.add(int(re.search(r"the state after offset (\d+)", result.output)[1]))
        [last] = ends  # every controller restored the same state
        audited = partitions_digest(audited_partitions(history, last))
        if label == "end":
            assert last == tier_end - 1
            assert all(partitions_digest(image_partitions(n.data_dir)) == audited
                       for n in cluster.nodes.values())
            continue
        assert last <= tier_end // 2
        try:
            cluster.start()
            wait_until(cluster.active_node, 20.0, "an active restored controller")
            with AdminClient(cluster.bootstrap, timeout_ms=10_000) as admin:
                restored = restored_partitions(admin)
                assert restored, "the restored cluster holds partitions"
                assert partitions_digest(restored) == audited
                [link] = admin.describe_configs([ConfigResource(ResourceType.CLUSTER, "")])
                values = {e.key: e.value for e in link.entries}
                assert values["restored.from.cluster.id"] == old_id
                assert values["restored.from.offset"] == str(last + 1)
                cluster.register_brokers([1, 2, 3])
                [created] = admin.create_topics([CreatableTopic("after-restore", 3, 3)])
                assert created.error.code is ErrorCode.NONE, created
                assert any(t.name == "after-restore" for t in admin.describe_topics())
        finally:
            cluster.close()
    history.unpersist()


def test_a_restore_from_a_damaged_or_tampered_tier_fails_naming_the_object(
        tiered: TieredRun, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(tiered.tier_dir, damaged)
    # An object the restore reads: the newest log object past the newest snapshot, or,
    # when that snapshot reaches the tier's end (the copier's timing decides), the
    # snapshot itself (an object below it is not read, so its damage is not met).
    listing = list_tier(open_store(damaged.as_uri()))
    snapshot_end = max((m.end_offset for m in listing.snapshots), default=0)
    after = [m for m in listing.segments if m.end_offset > snapshot_end]
    # Every copy past it: a killed leader's overlapping copy may be the one not read.
    victims = after or [max(listing.snapshots, key=lambda m: m.end_offset)]
    for victim in victims:
        path = damaged / victim.data_key
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))
    result = restore(damaged.as_uri(), "--data-dir", str(tmp_path / "d1"), "--node-id", "1")
    assert result.exit_code == 1, result.output
    assert any(v.data_key in result.output for v in victims), result.output
    assert not (tmp_path / "d1").exists()  # nothing written
    tampered = tmp_path / "tampered"
    shutil.copytree(tiered.tier_dir, tampered)
    named = replace_object(tampered)
    result = restore(tampered.as_uri(), "--data-dir", str(tmp_path / "d2"), "--node-id", "1")
    assert result.exit_code == 1 and "was changed" in result.output, result.output
    # Named by its id (the break may show first at the object after it).
    assert named.rsplit("-", 1)[-1].split(".")[0] in result.output
    assert not (tmp_path / "d2").exists()


def test_a_window_audit_reads_from_a_snapshot_and_every_check_holds(
        spark: Any, tiered: TieredRun, tmp_path: Path) -> None:
    """`audit --from-offset` / `--since`: the log from the newest snapshot at or below
    the point, seeded with it: the invariants hold over the window as over the whole
    history, and only the objects the window needs are planned."""
    listing = list_tier(open_store(tiered.tier_url))
    local = str(tiered.data_dirs[0])
    ends = sorted(m.end_offset for m in listing.snapshots)
    assert len(ends) >= 2
    start = ends[len(ends) // 2]
    planned = plan_history_files(local, tiered.tier_url, start=start, seed=True)
    assert planned[0].kind == "snapshot" and planned[0].snapshot_offset == start - 1
    assert all(p.kind == "snapshot" or p.end > start for p in planned)
    whole = plan_history_files(local, tiered.tier_url)
    assert sum(p.kind == "segment" for p in planned) < len(whole)
    out = tmp_path / "window"
    result = CliRunner().invoke(cli, ["audit", "--tier", tiered.tier_url, "--log-dir", local,
                                      "--from-offset", str(start + 5), "--out", str(out)])
    assert result.exit_code == 0 and "VIOLATED" not in result.output, result.output
    report = (out / "report.md").read_text()
    assert f"from offset {start} (the state at offset {start - 1}" in report
    assert f"- offsets {start - 1} to " in report
    # A point in time: through the time indexes to the first batch at or after it,
    # then the newest snapshot at or below that batch.
    middle = listing.segments[len(listing.segments) // 2]
    since_ms, first = middle.time_index[0]
    found = window_start(None, tiered.tier_url, None, str(since_ms), False)
    assert found == max(e for e in [*ends, 0] if e <= first)
    # A window cannot be combined with the whole-history options.
    refused = CliRunner().invoke(cli, ["audit", "--tier", tiered.tier_url, "--from-offset",
                                       "3", "--snapshots", "--out", str(tmp_path / "x")])
    assert refused.exit_code == 2 and "goes with neither" in refused.output
