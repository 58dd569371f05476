"""`metakraft log ...`: dump and verify segments and snapshots, read-only.

Both commands read files directly (never through `SegmentedLog.open`, which
would repair a torn tail): a tool pointed at a live or damaged log must not
change it.

`log dump` prints JSON lines. Without `--skip-metadata`, a file starts with a
marker line `{"file": PATH, "kind": "segment" | "snapshot"}` and each record line
carries its batch's metadata:
`{"offset", "batch_base_offset", "epoch", "append_time_ms", "append_time",
"is_control", "origin": {"principal", "client_address", "request_id"}, "type",
"version", "fields"}` (`append_time`: the same instant in ISO 8601, UTC). With
`--skip-metadata` a line is just `{"type", "version", "fields"}`.
`--from-offset` / `--to-offset` (both inclusive) and `--type` (repeatable) keep
only the records asked for; file marker lines are still printed.
A record that does not decode becomes `{"error": ..., "offset": ...}`; a corrupt
batch becomes `{"error": ..., "file": ..., "offset": ..., "position": ...}` and
ends that file. The exit code is 1 if any error line was printed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import click

from controller.logformat import SNAPSHOT_SUFFIX, parse_snapshot_file_name
from controller.logformat.batch import RecordBatch, decode_batch
from controller.records import RecordDecodeError, decode_record, record_to_dict
from controller.records.registry import RECORD_TYPES
from controller.storage.errors import CorruptBatchError, SnapshotCorruptionError, StorageError
from controller.storage.meta_properties import cluster_id_of
from controller.storage.segment import LOG_SUFFIX, iter_stored_batches, parse_segment_file_name
from controller.storage.snapshot_file import SnapshotReader
from controller.tier.history import (
    MAX_OFFSET,
    Piece,
    history_batches,
    list_tier,
    local_segments,
    plan_history,
)
from controller.tier.remote import RemoteStorage, TierError, open_store


def _collect(paths: tuple[str, ...]) -> list[Path]:
    """Files named, plus segments and snapshots found under directories, in log order."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = [p for p in path.rglob("*") if p.is_file()
                     and (parse_segment_file_name(p.name) is not None
                          or parse_snapshot_file_name(p.name) is not None)]
            files.extend(sorted(found, key=lambda p: (str(p.parent), p.suffix != LOG_SUFFIX,
                                                      p.name)))
        elif path.exists():
            files.append(path)
        else:
            raise click.BadParameter(f"{path} does not exist", param_hint="PATH")
    return files


def _kind(path: Path) -> str:
    return "snapshot" if path.name.endswith(SNAPSHOT_SUFFIX) else "segment"


def _file_batches(path: Path) -> Iterator[RecordBatch]:
    """Decoded batches of a segment or snapshot file; CorruptBatchError at the first bad one."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for _, header, buf, rel in iter_stored_batches(fd, 0, size):
            yield decode_batch(buf, rel, verified=header)[0]
    finally:
        os.close(fd)


@attrs.frozen
class RecordFilter:
    """Which records `log dump` prints: an inclusive offset range and record types
    (empty: every type)."""

    from_offset: int = 0
    to_offset: int | None = None
    types: frozenset[str] = frozenset()

    def wants_batch(self, batch: RecordBatch) -> bool:
        return batch.next_offset > self.from_offset and (
            self.to_offset is None or batch.base_offset <= self.to_offset)

    def wants_offset(self, offset: int) -> bool:
        return offset >= self.from_offset and (self.to_offset is None
                                               or offset <= self.to_offset)

    def wants_line(self, line: dict[str, Any]) -> bool:
        # A record that does not decode has no type: it is shown whatever the types.
        return not self.types or "error" in line or line.get("type") in self.types


def iso_time(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def _record_line(batch: RecordBatch, index: int, data: bytes, skip_metadata: bool,
                 ) -> tuple[dict[str, Any], bool]:
    offset = batch.base_offset + index
    try:
        rec: dict[str, Any] = record_to_dict(decode_record(data))
        ok = True
    except (RecordDecodeError, ValueError) as exc:
        rec = {"error": f"record does not decode: {exc}", "offset": offset,
               "size_bytes": len(data)}
        ok = False
    if skip_metadata:
        return rec, ok
    line: dict[str, Any] = {
        "offset": offset, "batch_base_offset": batch.base_offset, "epoch": batch.epoch,
        "append_time_ms": batch.append_time_ms, "append_time": iso_time(batch.append_time_ms),
        "is_control": batch.is_control,
        "origin": {"principal": batch.origin.principal,
                   "client_address": batch.origin.client_address,
                   "request_id": batch.origin.request_id},
    }
    line.update(rec)
    return line, ok


@click.group()
def log() -> None:
    """Dump and verify metadata log segments and snapshots."""


_TIER_HELP = ("Also read the remote tier at this URL (file:///path or s3://bucket/prefix?"
              "endpoint=...): the tier's objects and the log directory PATH (at most one, "
              "optional) are read as one history from its oldest offset.")


def _tier_pieces(tier: str, paths: tuple[str, ...], start: int = 0, end: int = MAX_OFFSET
                 ) -> tuple[RemoteStorage, list[Piece]]:
    if len(paths) > 1:
        raise click.BadParameter("with --tier, give at most one log directory",
                                 param_hint="PATH")
    try:
        store = open_store(tier)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier") from None
    try:
        local = local_segments(paths[0]) if paths else []
    except FileNotFoundError as exc:
        raise click.BadParameter(str(exc), param_hint="PATH") from None
    try:
        cluster_id = cluster_id_of(paths[0]) if paths else None
    except StorageError as exc:
        raise click.BadParameter(str(exc), param_hint="PATH") from None
    try:
        listing = list_tier(store, cluster_id)
        # Only the objects (and byte ranges of them) that hold [start, end).
        return store, plan_history(listing.segments, local, start=start, end=end)
    except TierError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


def _dump_history(tier: str, paths: tuple[str, ...], skip_metadata: bool,
                  wanted: RecordFilter) -> None:
    store, pieces = _tier_pieces(tier, paths, wanted.from_offset,
                                 MAX_OFFSET if wanted.to_offset is None
                                 else wanted.to_offset + 1)
    out = sys.stdout
    errors = 0
    current: Piece | None = None
    try:
        for piece, batch in history_batches(store, pieces):
            if piece is not current and not skip_metadata:
                out.write(json.dumps({"file": piece.location, "kind": "segment",
                                      "source": piece.source, "start_offset": piece.start,
                                      "end_offset": piece.end}) + "\n")
            current = piece
            if not wanted.wants_batch(batch):
                continue
            for i, data in enumerate(batch.records):
                offset = batch.base_offset + i
                if not piece.start <= offset < piece.end or not wanted.wants_offset(offset):
                    continue
                line, ok = _record_line(batch, i, data, skip_metadata)
                errors += not ok
                if wanted.wants_line(line):
                    out.write(json.dumps(line) + "\n")
    except (TierError, CorruptBatchError) as exc:
        errors += 1
        out.write(json.dumps({"error": str(exc), "offset": getattr(exc, "offset", None)})
                  + "\n")
    out.flush()
    if errors:
        sys.exit(1)


@log.command()
@click.argument("paths", nargs=-1, required=False)
@click.option("--skip-metadata", is_flag=True, help="Print the records only, no batch metadata.")
@click.option("--tier", "tier", metavar="URL", help=_TIER_HELP)
@click.option("--from-offset", type=click.IntRange(min=0), default=0, show_default=True,
              help="The first offset to print.")
@click.option("--to-offset", type=click.IntRange(min=0), default=None,
              help="The last offset to print (inclusive; default: to the end).")
@click.option("--type", "types", multiple=True, metavar="TYPE",
              type=click.Choice(sorted(RECORD_TYPES)),
              help="Only records of this type (repeatable), e.g. --type topic "
                   "--type partition_change.")
def dump(paths: tuple[str, ...], skip_metadata: bool, tier: str | None, from_offset: int,
         to_offset: int | None, types: tuple[str, ...]) -> None:
    """Print segment or snapshot files (or the ones under directories) as JSON lines."""
    if to_offset is not None and to_offset < from_offset:
        raise click.BadParameter(f"{to_offset} is below --from-offset {from_offset}",
                                 param_hint="--to-offset")
    wanted = RecordFilter(from_offset, to_offset, frozenset(types))
    if tier is not None:
        _dump_history(tier, paths, skip_metadata, wanted)
        return
    if not paths:
        raise click.UsageError("give at least one PATH (or --tier URL)")
    errors = 0
    out = sys.stdout
    for path in _collect(paths):
        if not skip_metadata:
            out.write(json.dumps({"file": str(path), "kind": _kind(path)}) + "\n")
        try:
            for batch in _file_batches(path):
                if not wanted.wants_batch(batch):
                    continue
                for i, data in enumerate(batch.records):
                    if not wanted.wants_offset(batch.base_offset + i):
                        continue
                    line, ok = _record_line(batch, i, data, skip_metadata)
                    errors += not ok
                    if wanted.wants_line(line):
                        out.write(json.dumps(line) + "\n")
        except CorruptBatchError as exc:
            errors += 1
            out.write(json.dumps({"error": str(exc), "file": str(path), "offset": exc.offset,
                                  "position": exc.position}) + "\n")
    out.flush()
    if errors:
        sys.exit(1)


def _verify_segment(path: Path, expected: int | None) -> tuple[int, int, int]:
    """(next offset, batches, records) of a good segment; CorruptBatchError otherwise."""
    base = parse_segment_file_name(path.name)
    expected = base if expected is None else expected
    if base is not None and base != expected:
        raise CorruptBatchError(f"segment name says base offset {base}, expected {expected} "
                                "(missing or overlapping segment)", expected, 0)
    batches = records = 0
    for batch in _file_batches(path):
        if expected is not None and batch.base_offset != expected:
            raise CorruptBatchError(f"offset discontinuity: batch starts at {batch.base_offset},"
                                    f" expected {expected}", batch.base_offset)
        expected = batch.next_offset
        batches += 1
        records += batch.record_count
    return (expected if expected is not None else 0), batches, records


def _verify_history(tier: str, paths: tuple[str, ...]) -> None:
    store, pieces = _tier_pieces(tier, paths)
    batches = records = 0
    try:
        for _piece, batch in history_batches(store, pieces):
            batches += 1
            records += batch.record_count
    except (TierError, CorruptBatchError) as exc:
        click.echo(f"BAD {exc}", err=True)
        sys.exit(1)
    tiered = [p for p in pieces if p.source == "tier"]
    span = f"offsets [{pieces[0].start}, {batch_end(pieces)})" if pieces else "no offsets"
    click.echo(f"OK: {span} in {len(tiered)} tier object(s) and {len(pieces) - len(tiered)} "
               f"local segment(s): {batches} batches, {records} records")


def batch_end(pieces: list[Piece]) -> str:
    last = pieces[-1]
    return "end of log" if last.end == MAX_OFFSET else str(last.end)


@log.command()
@click.argument("paths", nargs=-1, required=False)
@click.option("--tier", "tier", metavar="URL", help=_TIER_HELP)
def verify(paths: tuple[str, ...], tier: str | None) -> None:
    """Check every CRC and offset continuity; exit 1 naming the first bad file and offset."""
    if tier is not None:
        _verify_history(tier, paths)
        return
    if not paths:
        raise click.UsageError("give at least one PATH (or --tier URL)")
    segments = snapshots = batches = records = snapshot_records = 0
    next_by_dir: dict[Path, int] = {}
    for path in _collect(paths):
        try:
            if _kind(path) == "snapshot":
                reader = SnapshotReader.open(path)
                snapshots += 1
                snapshot_records += reader.summary.record_count
                continue
            # Segments of one directory must chain: each starts where the last ended.
            nxt, n_batches, n_records = _verify_segment(path, next_by_dir.get(path.parent))
            next_by_dir[path.parent] = nxt
            segments += 1
            batches += n_batches
            records += n_records
        except CorruptBatchError as exc:
            click.echo(f"BAD {path}: offset {exc.offset}, byte {exc.position}: {exc.reason}",
                       err=True)
            sys.exit(1)
        except SnapshotCorruptionError as exc:
            click.echo(f"BAD {exc}", err=True)
            sys.exit(1)
    ranges = ", ".join(f"{d} ends at {o}" for d, o in next_by_dir.items())
    click.echo(f"OK: {segments} segment file(s) with {batches} batches, {records} records; "
               f"{snapshots} snapshot file(s) with {snapshot_records} records"
               + (f"; {ranges}" if ranges else ""))
