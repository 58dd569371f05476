"""`metakraft storage ...`: create cluster ids, format and inspect data directories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from controller.storage.errors import MetaPropertiesError, StorageError
from controller.storage.leader_epoch import LeaderEpochCheckpoint
from controller.storage.meta_properties import (
    DataDir,
    format_data_dir,
    random_cluster_id,
    read_meta_properties,
)
from controller.storage.quorum_state import QuorumStateFile
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
@click.option("--ignore-formatted", is_flag=True,
              help="Leave an already formatted directory as it is (exit 0) instead of failing.")
def format_cmd(cluster_id: str, node_id: int, data_dir: str, ignore_formatted: bool) -> None:
    """Write meta.properties and the directory layout into an empty DATA_DIR."""
    try:
        formatted = format_data_dir(data_dir, cluster_id, node_id, ignore_formatted)
    except (MetaPropertiesError, ValueError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if formatted:
        click.echo(f"Formatted {data_dir} for cluster {cluster_id}, node {node_id}.")
    else:
        click.echo(f"{data_dir} is already formatted; left unchanged (--ignore-formatted).")


@storage.command("info")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, exists=True))
def info(data_dir: str) -> None:
    """Print what a data directory holds (read-only), as JSON."""
    layout = DataDir(Path(data_dir))
    try:
        meta = read_meta_properties(layout.root)
        state = QuorumStateFile(layout.quorum_state).read()
        epochs = LeaderEpochCheckpoint(layout.leader_epoch_checkpoint).entries()
    except StorageError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    segments = sorted(p.name for p in layout.log_dir.glob("*.log")
                      if parse_segment_file_name(p.name) is not None) \
        if layout.log_dir.is_dir() else []
    click.echo(json.dumps({
        "data_dir": str(layout.root),
        "cluster_id": meta.cluster_id, "node_id": meta.node_id, "version": meta.version,
        "quorum_state": None if state is None else {
            "epoch": state.epoch, "voted_for": state.voted_for, "leader_id": state.leader_id},
        "leader_epochs": epochs,
        "segments": segments,
        "snapshots": [s.file_name for s in list_snapshots(layout.snapshot_dir)],
    }, indent=2))
