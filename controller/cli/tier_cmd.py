"""`metakraft tier describe|verify`: what the remote tier holds, and whether it is whole.

Both read the tier directly (never through a controller). With `--log-dir` (a
controller's data directory) they also read its local log: `describe` then shows
each object's state as the metadata log records it (from the newest local snapshot
and the log after it) and the copy lag; `verify` checks that tier + local log cover
every offset with no gap, and anchors the tier's hash chain to that log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from controller.metadata.tier import RemoteLogControlManager, RemoteObject
from controller.records import decode_record, record_type
from controller.storage import snapshot_file as sf
from controller.storage.errors import CorruptBatchError, StorageError
from controller.storage.meta_properties import DataDir, cluster_id_of
from controller.tier.chain import TierLedger, check_chain
from controller.tier.history import (
    MAX_OFFSET,
    Piece,
    TierListing,
    epoch_history,
    history_batches,
    iter_piece_batches,
    list_tier,
    local_segments,
    plan_history,
    read_piece,
)
from controller.tier.objects import CorruptObjectError, Manifest, describe_batches
from controller.tier.remote import RemoteStorage, TierError, open_store
from timeline import SnapshotRegistry

_TIER_OPTION = click.option("--tier", "tier_url", required=True, metavar="URL",
                            help="The tier: file:///path or s3://bucket/prefix?endpoint=URL"
                                 "&region=R (credentials from the AWS environment).")
_LOG_DIR_OPTION = click.option("--log-dir", type=click.Path(file_okay=False), default=None,
                               help="A controller's data directory: also read its local "
                                    "log (object states, copy lag, full coverage).")


def _open(tier_url: str) -> RemoteStorage:
    try:
        return open_store(tier_url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier") from None


def _cluster_id(log_dir: str | None) -> str | None:
    if log_dir is None:
        return None
    try:
        return cluster_id_of(log_dir)
    except StorageError as exc:
        raise click.BadParameter(str(exc), param_hint="--log-dir") from None


def _listing(store: RemoteStorage, log_dir: str | None) -> TierListing:
    try:
        return list_tier(store, _cluster_id(log_dir))
    except TierError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


def replayed_tier_state(log_dir: str) -> tuple[list[RemoteObject], int]:
    """The tier objects as a controller's local log records them (its newest snapshot,
    then the log after it), and the local log's end offset."""
    data_dir = DataDir(Path(log_dir))
    manager = RemoteLogControlManager(SnapshotRegistry())
    start = 0
    latest = sf.latest_snapshot(data_dir.snapshot_dir)
    if latest is not None:
        for data in sf.SnapshotReader.open(data_dir.snapshot_dir / latest.file_name).records():
            _replay_tier(manager, data)
        start = latest.end_offset
    end = start
    pieces = plan_history((), local_segments(data_dir.root), start=start)
    for _piece, batch in history_batches(None, pieces):
        end = batch.next_offset
        if batch.is_control:
            continue
        for data in batch.records:
            _replay_tier(manager, data)
    return manager.objects(), end


def _replay_tier(manager: RemoteLogControlManager, data: bytes) -> None:
    record = decode_record(data)
    kind = record_type(record)
    if kind == "remote_log_segment":
        manager.replay_segment(record.remote_log_segment)
    elif kind == "remote_log_segment_state_change":
        manager.replay_state_change(record.remote_log_segment_state_change)


@click.group()
def tier() -> None:
    """Inspect the remote tier of the metadata log."""


@tier.command()
@_TIER_OPTION
@_LOG_DIR_OPTION
@click.option("--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def describe(tier_url: str, log_dir: str | None, output: str) -> None:
    """Objects in the tier: offset ranges, sizes, times, states and the copy lag."""
    store = _open(tier_url)
    listing = _listing(store, log_dir)
    states: dict[str, str] = {}
    log_end = None
    if log_dir is not None:
        try:
            objects, log_end = replayed_tier_state(log_dir)
        except (StorageError, ValueError, FileNotFoundError) as exc:
            click.echo(f"error: cannot read the local log of {log_dir}: {exc}", err=True)
            sys.exit(1)
        states = {o.segment_id: o.state.name for o in objects}
    copied_end = max((m.end_offset for m in listing.segments), default=None)
    try:
        epochs = epoch_history(listing.segments)
    except TierError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    rows: list[dict[str, Any]] = []
    for m in (*listing.segments, *listing.snapshots):
        rows.append({"kind": m.kind, "id": m.segment_id, "start_offset": m.start_offset,
                     "end_offset": m.end_offset, "size_bytes": m.size_bytes,
                     "start_time_ms": m.start_time_ms, "end_time_ms": m.end_time_ms,
                     "last_epoch": m.last_epoch, "copier_id": m.copier_id,
                     "state": states.get(m.segment_id, "COPY_FINISHED" if log_dir is None
                                         else "UNREFERENCED"),
                     "key": m.data_key})
    for key in listing.incomplete:
        rows.append({"kind": "incomplete", "id": key, "key": key,
                     "state": "COPY_STARTED (no manifest)"})
    summary = {"url": listing.url, "cluster_id": listing.cluster_id,
               "log_objects": len(listing.segments), "snapshots": len(listing.snapshots),
               "incomplete_objects": len(listing.incomplete), "bytes": listing.total_bytes,
               "first_offset": listing.segments[0].start_offset if listing.segments else None,
               "copied_end_offset": copied_end, "local_log_end_offset": log_end,
               "copy_lag_offsets": None if log_end is None
               else log_end - (copied_end or 0)}
    if output == "json":
        click.echo(json.dumps({"summary": summary, "objects": rows,
                               "epochs": [{"epoch": e, "start_offset": s} for e, s in epochs]},
                              indent=2))
        return
    console = Console()
    for key, value in summary.items():
        if value is not None:
            console.print(f"[bold]{key}:[/] {value}", highlight=False)
    table = Table("kind", "offsets", "bytes", "state", "epoch", "copier", "id")
    for row in rows:
        offsets = (f"{row['start_offset']}-{row['end_offset']}" if "start_offset" in row
                   else "")
        table.add_row(row["kind"], offsets, str(row.get("size_bytes", "")), row["state"],
                      str(row.get("last_epoch", "")), str(row.get("copier_id", "")),
                      row["id"])
    console.print(table)
    if epochs:
        console.print("[bold]leader epochs[/] (epoch: first offset), from the manifests: "
                      + ", ".join(f"{e}: {s}" for e, s in epochs), highlight=False)


@tier.command()
@_TIER_OPTION
@_LOG_DIR_OPTION
@click.option("--output", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
def verify(tier_url: str, log_dir: str | None, output: str) -> None:
    """Read every object and check it against its manifest (size, CRC-32C, SHA-256,
    offsets, epochs), the hash chain between log objects, and each manifest against
    the SHA-256 the metadata log recorded for it; with --log-dir also that tier +
    local log leave no gap, and (the log's newest records being there) that every
    object is the one a controller put. Exit 1 naming the first bad object."""
    store = _open(tier_url)
    listing = _listing(store, log_dir)
    ledger = TierLedger()
    try:
        local = local_segments(log_dir) if log_dir is not None else []
        epoch_history(listing.segments)  # the slices agree with each other
        pieces = plan_history(listing.segments, local)
        planned = {p.location for p in pieces if p.source == "tier"}
        for m in listing.snapshots:
            read_piece(store, Piece("tier", m.data_key, 0, m.end_offset, m))
        for m in listing.segments:
            if m.data_key not in planned:  # an overlapping copy: checked, not replayed
                _check_segment_object(store, m)
        for piece in pieces:
            if piece.source == "tier":
                assert piece.manifest is not None
                data = _check_segment_object(store, piece.manifest)
                ledger.add_batches(iter_piece_batches(data, piece,
                                                      piece.manifest.start_offset))
            else:
                ledger.add_batches(batch for _, batch in history_batches(None, [piece]))
    except (TierError, StorageError, FileNotFoundError) as exc:
        # The links between manifests need no data: they name the object after a
        # deleted one, which a gap in the offsets alone does not.
        links = check_chain(listing.segments, listing.snapshots, TierLedger(), complete=False)
        _verify_failed(output, str(exc), [str(exc), *(str(f) for f in links.findings)])
    report = check_chain(listing.segments, listing.snapshots, ledger,
                         complete=log_dir is not None)
    if not report.ok:
        _verify_failed(output, str(report.findings[0]),
                       [str(f) for f in report.findings])
    end = "" if not pieces else (" to the end of the local log" if pieces[-1].end == MAX_OFFSET
                                 else f" to {pieces[-1].end}")
    start = f"offsets from {pieces[0].start}{end}" if pieces else "no offsets"
    message = (f"OK: {len(listing.segments)} log object(s), {len(listing.snapshots)} "
               f"snapshot(s), {listing.total_bytes} bytes; {start}, no gap; "
               f"{report.summary()}"
               + (f"; {len(listing.incomplete)} incomplete object(s) (copies in progress "
                  "or abandoned, never read)" if listing.incomplete else ""))
    if output == "json":
        click.echo(json.dumps({"ok": True, "message": message, "log_objects":
                               len(listing.segments), "snapshots": len(listing.snapshots),
                               "hashed": report.hashed, "unhashed": report.unhashed,
                               "recorded": report.recorded,
                               "unanchored": list(report.unanchored)}, indent=2))
    else:
        click.echo(message)


def _check_segment_object(store: RemoteStorage, m: Manifest) -> bytes:
    data = read_piece(store, Piece("tier", m.data_key, m.start_offset, m.end_offset, m))
    try:
        found = describe_batches(data, m.start_offset)
    except CorruptBatchError as exc:
        raise CorruptObjectError(m.data_key, exc.reason, exc.offset) from None
    if (found.end_offset, found.epochs) != (m.end_offset, m.epochs):
        raise CorruptObjectError(m.data_key, "the batches do not match the manifest's "
                                 "end offset or epochs", m.start_offset)
    return data


def _verify_failed(output: str, first: str, findings: list[str] | None = None) -> NoReturn:
    if output == "json":
        click.echo(json.dumps({"ok": False, "first": first, "findings": findings or [first]},
                              indent=2))
    else:
        click.echo(f"BAD {first}", err=True)
        for more in (findings or [])[1:]:
            click.echo(f"    also: {more}", err=True)
    sys.exit(1)


__all__ = ["tier"]
