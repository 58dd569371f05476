"""`metakraft storage ...`: create cluster ids, format and inspect data directories."""

from __future__ import annotations

import datetime
import json
import shutil
import sys
import time
from pathlib import Path

import click

from controller.quorum.bootstrap import format_controller, parse_initial_controllers
from controller.storage.errors import StorageError
from controller.storage.leader_epoch import LeaderEpochCheckpoint
from controller.storage.log_repair import LogRepairMarker
from controller.storage.meta_properties import (
    DataDir,
    format_data_dir,
    random_cluster_id,
    read_meta_properties,
)
from controller.storage.quorum_state import QuorumStateFile
from controller.storage.recovery_point import read_recovery_point
from controller.storage.segment import parse_segment_file_name
from controller.storage.snapshot_file import list_snapshots


@click.group()
def storage() -> None:
    """Format and inspect data directories."""


@storage.command("random-uuid")
def random_uuid() -> None:
    """Print a new cluster id (URL-safe base64 of a random UUID, 22 characters)."""
    click.echo(random_cluster_id())


@storage.command("format")
@click.option("--cluster-id", required=True, help="From `metakraft storage random-uuid`.")
@click.option("--node-id", required=True, type=click.IntRange(min=0))
@click.option("--data-dir", required=True, type=click.Path(file_okay=False))
@click.option("--initial-controllers", metavar="ID@HOST:PORT:DIRID,...",
              help="A dynamic quorum's first voters (give every initial controller the same "
              "list; directory ids from `metakraft storage random-uuid`). This node takes "
              "its directory id from its entry.")
@click.option("--no-initial-controllers", is_flag=True,
              help="A controller (or broker) that joins a dynamic quorum: it learns the "
              "voters from the log; `metakraft quorum add-controller` makes it a voter.")
@click.option("--ignore-formatted", is_flag=True,
              help="Leave an already formatted directory as it is (exit 0) instead of failing.")
@click.option("--bootstrap-from-tier", "tier_url", metavar="URL", default=None,
              help="Start from the cluster's newest tiered snapshot (checked) instead of "
                   "fetching the whole image from the leader: for a controller joining, or "
                   "replacing a lost disk, of a cluster with a large image.")
def format_cmd(cluster_id: str, node_id: int, data_dir: str, initial_controllers: str | None,
               no_initial_controllers: bool, ignore_formatted: bool,
               tier_url: str | None) -> None:
    """Write meta.properties and the directory layout into an empty DATA_DIR.

    Without --initial-controllers or --no-initial-controllers the quorum's voters are
    the configured ones (static: they cannot change online)."""
    if initial_controllers is not None and no_initial_controllers:
        click.echo("error: give --initial-controllers or --no-initial-controllers, not both",
                   err=True)
        sys.exit(2)
    if tier_url is not None and initial_controllers is not None:
        click.echo("error: --bootstrap-from-tier is for a controller joining an existing "
                   "cluster; the initial controllers start from their voter set", err=True)
        sys.exit(2)
    try:
        if initial_controllers is not None or no_initial_controllers:
            voters = None if initial_controllers is None else \
                parse_initial_controllers(initial_controllers)
            formatted = format_controller(data_dir, cluster_id, node_id,
                                          initial_controllers=voters,
                                          ignore_formatted=ignore_formatted)
        else:
            formatted = format_data_dir(data_dir, cluster_id, node_id, ignore_formatted)
    except (StorageError, ValueError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if formatted:
        meta = read_meta_properties(data_dir)
        kind = "a dynamic quorum" if meta.kraft_version else "a static quorum"
        click.echo(f"Formatted {data_dir} for cluster {cluster_id}, node {node_id}, "
                   f"directory id {meta.directory_id} ({kind}).")
        if tier_url is not None:
            _seed_from_tier(tier_url, data_dir, cluster_id)
    else:
        click.echo(f"{data_dir} is already formatted; left unchanged (--ignore-formatted).")


@storage.command("reformat-replica")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--cluster-id", help="Needed only when meta.properties is unreadable.")
@click.option("--node-id", type=click.IntRange(min=0),
              help="Needed only when meta.properties is unreadable.")
def reformat_replica(data_dir: str, cluster_id: str | None, node_id: int | None) -> None:
    """Replace a controller's damaged or lost disk: move DATA_DIR aside and format it
    again as a NEW replica (same node id, new directory id, joining the dynamic quorum).

    The old replica's identity stays a voter until removed: then start the controller
    (it catches up as an observer), run `metakraft quorum remove-controller --id N
    --directory-id OLD` and `metakraft quorum add-controller --controller HOST:PORT`.
    Nothing is deleted: the old directory is kept beside, renamed."""
    root = Path(data_dir)
    old_directory_id = "?"
    try:
        meta = read_meta_properties(root)
        cluster_id, node_id, old_directory_id = meta.cluster_id, meta.node_id, meta.directory_id
    except StorageError as exc:
        if cluster_id is None or node_id is None:
            click.echo(f"error: {exc}; give --cluster-id and --node-id", err=True)
            sys.exit(1)
    assert cluster_id is not None and node_id is not None
    aside = root.with_name(f"{root.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}")
    try:
        root.rename(aside)
        format_controller(root, cluster_id, node_id, initial_controllers=None)
    except (StorageError, ValueError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    new = read_meta_properties(root)
    click.echo(f"Moved {root} to {aside} and formatted {root} as a new replica of node "
               f"{node_id}: directory id {new.directory_id} (was {old_directory_id}).\n"
               "Next: start the controller; then\n"
               f"  metakraft quorum remove-controller --bootstrap ... --id {node_id} "
               f"--directory-id {old_directory_id}\n"
               "  metakraft quorum add-controller --bootstrap ... --controller HOST:PORT")


@storage.command("info")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, exists=True))
def info(data_dir: str) -> None:
    """Print what a data directory holds (read-only), as JSON."""
    layout = DataDir(Path(data_dir))
    try:
        meta = read_meta_properties(layout.root)
        state = QuorumStateFile(layout.quorum_state).read()
        epochs = LeaderEpochCheckpoint(layout.leader_epoch_checkpoint).entries()
        recovery_point = read_recovery_point(layout.recovery_point)
        repair = LogRepairMarker(layout.log_repair).read()
    except StorageError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    segments = sorted(p.name for p in layout.log_dir.glob("*.log")
                      if parse_segment_file_name(p.name) is not None) \
        if layout.log_dir.is_dir() else []
    click.echo(json.dumps({
        "data_dir": str(layout.root),
        "cluster_id": meta.cluster_id, "node_id": meta.node_id, "version": meta.version,
        "directory_id": meta.directory_id, "kraft_version": meta.kraft_version,
        "quorum_state": None if state is None else {
            "epoch": state.epoch, "voted_for": state.voted_for, "leader_id": state.leader_id},
        "leader_epochs": epochs,
        # How far the log was fsynced; a repair pending after damage to flushed records.
        "recovery_point": recovery_point,
        "pending_repair": None if repair is None else {
            "repair_to_offset": repair.repair_to_offset, "reason": repair.reason},
        "segments": segments,
        "snapshots": [s.file_name for s in list_snapshots(layout.snapshot_dir)],
    }, indent=2))


def _seed_from_tier(tier_url: str, data_dir: str, cluster_id: str) -> None:
    from controller.quorum_controller.restore import RestoreError, seed_from_tier
    from controller.tier.remote import open_store

    try:
        snapshot_id = seed_from_tier(open_store(tier_url), data_dir, cluster_id)
    except (RestoreError, ValueError) as exc:
        shutil.rmtree(data_dir, ignore_errors=True)  # not half a bootstrap
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"Starts from the tier's snapshot at offset {snapshot_id.end_offset} (epoch "
               f"{snapshot_id.epoch}); the leader sends only the log after it.")


def parse_time_ms(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says)."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither milliseconds since the epoch nor an "
                                 "ISO 8601 time (2026-11-29T08:00:00Z)",
                                 param_hint="--to-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


@storage.command("restore")
@click.option("--tier", "tier_url", required=True, metavar="URL",
              help="The tier to restore from (file:///path or s3://bucket/prefix?...).")
@click.option("--to-offset", type=click.IntRange(min=0), default=None,
              help="Restore the state after this offset (rounded down to a whole batch).")
@click.option("--to-time", default=None, metavar="TIME",
              help="Restore the state after the last batch appended at or before TIME "
                   "(ISO 8601, UTC unless it says, or milliseconds since the epoch).")
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="The new controller's data directory (must not exist or be empty).")
@click.option("--node-id", type=click.IntRange(min=0))
@click.option("--cluster-id", default=None,
              help="The restored cluster's id: give every controller restored the same "
                   "one (default: a new one, printed).")
@click.option("--initial-controllers", metavar="ID@HOST:PORT:DIRID,...",
              help="The restored cluster's voters (a dynamic quorum), as for `storage "
                   "format`; without it the voters are the configured ones (static).")
@click.option("--dry-run", is_flag=True, help="Say what would be restored; write nothing.")
def restore_cmd(tier_url: str, to_offset: int | None, to_time: str | None,
                data_dir: str | None, node_id: int | None, cluster_id: str | None,
                initial_controllers: str | None, dry_run: bool) -> None:
    """Form a new controller from the remote tier: the metadata state at a point in
    time (default: the tier's end), rebuilt from the newest tiered snapshot at or
    below it and the tiered batches after it, each object checked against its
    manifest and the hash chain. The restored cluster gets a new cluster id (its
    tier must be a new one) and keeps a link to the old one in its cluster configs
    (restored.from.cluster.id, restored.from.offset). Restore every controller of
    the new cluster with the same point and --cluster-id, then start them."""
    from controller.quorum_controller.restore import (
        RestoreError,
        plan_restore,
        rebuild,
        write_data_dir,
    )
    from controller.tier.remote import open_store

    if to_offset is not None and to_time is not None:
        raise click.UsageError("give --to-offset or --to-time, not both")
    if not dry_run and (data_dir is None or node_id is None):
        raise click.UsageError("--data-dir and --node-id are needed (or --dry-run)")
    if data_dir is not None and Path(data_dir).exists() and any(Path(data_dir).iterdir()):
        raise click.UsageError(f"{data_dir} is not empty: restore into a new directory")
    try:
        voters = (parse_initial_controllers(initial_controllers)
                  if initial_controllers is not None else None)
        store = open_store(tier_url)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    started = time.monotonic()
    try:
        plan = plan_restore(store, to_offset=to_offset,
                            to_time_ms=None if to_time is None else parse_time_ms(to_time))
        for line in plan.describe():
            click.echo(line)
        if dry_run:
            click.echo("dry run: nothing written")
            return
        assert data_dir is not None and node_id is not None
        restored = rebuild(store, plan)
        new_id = cluster_id or random_cluster_id()
        try:
            snapshot = write_data_dir(restored, data_dir=data_dir, node_id=node_id,
                                      cluster_id=new_id, old_cluster_id=plan.old_cluster_id,
                                      voters=voters)
        except BaseException:
            shutil.rmtree(data_dir, ignore_errors=True)  # no half-restored directory
            raise
    except (RestoreError, StorageError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    seconds = time.monotonic() - started
    click.echo(f"Restored {data_dir}: cluster {new_id} (from {plan.old_cluster_id}), node "
               f"{node_id}; the state after offset {snapshot.end_offset - 1} "
               f"({restored.batches} batches, {restored.records} records replayed after the "
               f"snapshot), {plan.read_bytes} bytes read in {seconds:.1f} s "
               f"({plan.read_bytes / max(seconds, 1e-6) / 1e6:.1f} MB/s). Its log continues "
               f"at offset {snapshot.end_offset}.")
    if cluster_id is None:
        click.echo(f"Restore the other controllers with --cluster-id {new_id} and the same "
                   "point; give the new cluster a new tier (this one belongs to "
                   f"{plan.old_cluster_id}).")
