"""Segment and snapshot files -> Arrow record batches (no Spark here).

The Spark data source (`analytics.source`) is a thin shell over `plan_files` (on the
driver: which files, one Spark partition each) and `read_file` (on an executor: one
file's rows as Arrow batches). Keeping this layer Spark-free lets the benchmark and
the unit tests drive it directly.

Batch-level columns are one value per log batch, expanded with an Arrow `take`;
the record-level ones come from `analytics.rows.rows_of` as one tuple per record
and are transposed in C with `zip(*rows)`. The typed partition columns are built once
per distinct value in an Arrow batch (records with equal bytes share one value object,
see `analytics.rows`) and expanded with a `take` too. The garbage collector is paused
while a batch is built (see `read_file`).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pyarrow as pa

from analytics.rows import record_columns, rows_of
from analytics.schema import (
    CORRUPT_COLUMN,
    EVENT_FIELD_COLUMNS,
    PARTITION_FIELD_COLUMNS,
    arrow_schema,
)
from controller.records.codec import RecordDecodeError
from controller.storage.batch import decode_batch
from controller.storage.errors import CorruptBatchError, TruncatedBatchError
from controller.storage.segment import parse_segment_file_name
from controller.storage.snapshot_file import parse_snapshot_file_name

# Rows per Arrow batch handed to Spark: large enough to amortise the per-batch cost,
# small enough that an executor holds a few MiB at a time.
ROWS_PER_ARROW_BATCH = 65_536
MAX_OFFSET = 2**63 - 1


class MetakraftCorruptLogError(RuntimeError):
    """A batch or record that cannot be read; the message names the file and offset."""


@attrs.frozen
class FileSlice:
    """One file to read and the offset range [start, end) wanted from it."""

    path: str
    kind: str  # "segment" or "snapshot"
    start: int
    end: int
    # For snapshots: the offset every row of the file gets (last contained offset).
    snapshot_offset: int = -1


def plan_files(log_dir: str, *, snapshots: bool = False, start: int = 0,
               end: int = MAX_OFFSET) -> list[FileSlice]:
    """The files of a controller's data directory overlapping [start, end), in offset order.

    `log_dir` is the data directory (holding `metadata/` and `snapshots/`) or the
    `metadata/` directory itself. Segment i covers [base_i, base_{i+1}); files wholly
    outside the range are left out, so an offset range reads only what it needs.
    """
    root = Path(log_dir)
    seg_dir = root / "metadata" if (root / "metadata").is_dir() else root
    if not seg_dir.is_dir():
        raise FileNotFoundError(f"{log_dir}: no such log directory")
    bases = sorted((b, p) for p in seg_dir.iterdir()
                   if (b := parse_segment_file_name(p.name)) is not None)
    out: list[FileSlice] = []
    for i, (base, path) in enumerate(bases):
        seg_end = bases[i + 1][0] if i + 1 < len(bases) else MAX_OFFSET
        if seg_end > start and base < end:
            out.append(FileSlice(str(path), "segment", start, end))
    if snapshots:
        snap_dir = root / "snapshots"
        found = sorted((sid, p) for p in (snap_dir.iterdir() if snap_dir.is_dir() else ())
                       if (sid := parse_snapshot_file_name(p.name)) is not None)
        for sid, path in found:
            if start <= sid.end_offset - 1 < end:
                out.append(FileSlice(str(path), "snapshot", start, end, sid.end_offset - 1))
    if not out and not bases:
        hint = ""
        nested = sorted(str(d.parent) for d in root.glob("*/metadata") if d.is_dir())
        if nested:  # e.g. a `metakraft dev` process dir: DATA_DIR/controller-N/data
            hint = f" (a log directory below it: {', '.join(nested)})"
        raise FileNotFoundError(
            f"{log_dir}: no segment files (*.log) found in {seg_dir}; --log-dir must be a "
            f"controller's data directory (holding metadata/) or its metadata/ directory"
            + hint)
    return out


class _Builder:
    """Accumulates rows and cuts them into Arrow batches.

    Per record, Python appends one tuple (from `rows_of`); everything else is per
    batch or per Arrow batch: a log batch is one *run* of rows sharing the
    batch-level columns, which become one value per run and a `take` by run index
    in Arrow, and consecutive offsets are one `range`.
    """

    def __init__(self, permissive: bool, source: str, file: str) -> None:
        self.schema = arrow_schema(permissive)
        self.permissive = permissive
        self.source, self.file = source, file
        self._reset()

    def _reset(self) -> None:
        self.offsets: list[int] = []
        self.run_of_row: list[int] = []
        # Per run: base, epoch, time (us), principal, client, request, is_control, corrupt.
        self.runs: list[list[object]] = [[] for _ in range(8)]
        self.records: list[tuple[object, ...]] = []

    def __len__(self) -> int:
        return len(self.records)

    def add(self, offsets: range | list[int], base: int, epoch: int, time_ms: int,
            origin: tuple[str | None, str | None, str | None], is_control: bool,
            rows: list[tuple[object, ...]], corrupt: str | None = None) -> None:
        runs = self.runs
        self.run_of_row.extend([len(runs[0])] * len(rows))
        self.offsets.extend(offsets)
        # Microseconds as plain ints: Arrow builds the timestamp column from int64.
        for column, value in zip(runs, (base, epoch, time_ms * 1000, *origin, is_control,
                                        corrupt), strict=True):
            column.append(value)
        self.records.extend(rows)

    def flush(self) -> pa.RecordBatch:
        n = len(self.records)
        record_cols = list(zip(*self.records, strict=True)) if n else [()] * 11
        schema = self.schema
        take = pa.array(self.run_of_row, pa.int32())
        runs = self.runs if self.permissive else self.runs[:-1]
        per_run = [pa.array(values, type=typ).take(take)
                   for values, typ in zip(runs, _RUN_TYPES, strict=False)]
        base, epoch, time_us, principal, client, request, control = per_run[:7]
        arrays = [
            pa.array(self.offsets, pa.int64()), base, epoch, time_us,
            *[pa.array(col, type=schema.field(4 + i).type)
              for i, col in enumerate(record_cols[:8])],
            principal, client, request, control,
            pa.repeat(pa.scalar(self.source, pa.string()), n),
            pa.repeat(pa.scalar(self.file, pa.string()), n),
            pa.array(record_cols[8], pa.string()),
            *_typed_arrays(record_cols[9], _PARTITION_TYPES),
            *_typed_arrays(record_cols[10], _EVENT_TYPES),
        ]
        if self.permissive:
            arrays.append(per_run[7])
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


_PARTITION_TYPES = tuple(arrow_schema().field(name).type for name in PARTITION_FIELD_COLUMNS)
_EVENT_TYPES = tuple(arrow_schema().field(name).type for name in EVENT_FIELD_COLUMNS)
# The record-level columns of a corrupt row: all null.
_NO_COLUMNS = (None,) * 11


def _typed_arrays(values: tuple[object, ...], types: tuple[pa.DataType, ...]) -> list[pa.Array]:
    """Typed columns of `types` from each row's fields tuple (`PartitionFields`,
    `EventFields`) or None (all null).

    Rows of records with equal bytes share one value object (the caches in
    `analytics.rows`), so the columns are built from the distinct objects only (by
    identity, in C: `map(id, ...)` and a dict) and expanded with one `take`.
    """
    ids = list(map(id, values))
    distinct = dict(zip(ids, values, strict=True))
    position = {key: i for i, key in enumerate(distinct)}
    take = pa.array(list(map(position.__getitem__, ids)), pa.int32())
    empty = (None,) * len(types)
    rows = [empty if v is None else v for v in distinct.values()]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(types)
    return [pa.array(col, type=typ).take(take) for col, typ in zip(columns, types, strict=True)]


_RUN_TYPES = tuple(arrow_schema(permissive=True).field(name).type for name in (
    "batch_base_offset", "epoch", "append_time", "principal", "client_address", "request_id",
    "is_control", CORRUPT_COLUMN))


def read_file(piece: FileSlice, *, permissive: bool = False,
              change_json: bool = True) -> Iterator[pa.RecordBatch]:
    """The rows of one file in [piece.start, piece.end), as Arrow batches.

    `change_json=False`: `record_json` is null on PartitionChange records (see
    `analytics.rows.rows_of`).

    Damage (bad CRC, torn batch, unreadable record) raises `MetakraftCorruptLogError`
    naming the file, the byte position and the offset; in permissive mode it becomes
    one row with `_corrupt` set instead and the rest of the file is not read (batches
    have no sync marker, so nothing after a damaged batch can be trusted).

    The cyclic garbage collector is paused while a batch is built: the rows are
    hundreds of thousands of young tuples, and the collections they trigger cost
    more than building them (none of them is part of a cycle). It runs as usual
    while the caller holds the batch.
    """
    batches = _read_file(piece, permissive, change_json)
    while True:
        enabled = gc.isenabled()
        gc.disable()
        try:
            batch = next(batches, None)
        finally:
            if enabled:
                gc.enable()
        if batch is None:
            return
        yield batch


def _read_file(piece: FileSlice, permissive: bool,
               change_json: bool) -> Iterator[pa.RecordBatch]:
    data = Path(piece.path).read_bytes()
    name = os.path.basename(piece.path)
    out = _Builder(permissive, piece.kind, name)
    pos = 0
    while pos < len(data):
        try:
            batch, size = decode_batch(data, pos)
        except (CorruptBatchError, TruncatedBatchError) as exc:
            # The header's base offset when it was readable; else -1 (unknown).
            offset = exc.offset if exc.offset is not None else -1
            message = f"{piece.path}: byte {pos}, offset {offset}: {exc}"
            if not permissive:
                raise MetakraftCorruptLogError(message) from exc
            out.add([offset], offset, -1, 0, (None, None, None), False,
                     [_NO_COLUMNS], corrupt=message)
            break
        pos += size
        if piece.kind == "snapshot":
            if batch.is_control:
                continue  # snapshot header/footer: file framing, not image records
            first = piece.snapshot_offset
            offsets: range | list[int] = [first] * batch.record_count
        else:
            if batch.next_offset <= piece.start or batch.base_offset >= piece.end:
                continue
            first = max(batch.base_offset, piece.start)
            offsets = range(first, min(batch.next_offset, piece.end))
        skip = first - batch.base_offset if piece.kind == "segment" else 0
        wanted = batch.records[skip:skip + len(offsets)]
        try:
            rows: list[tuple[object, ...]] = list(rows_of(wanted, change_json=change_json))
        except RecordDecodeError as exc:
            bad = next(i for i, r in enumerate(wanted) if _unreadable(r))
            at = offsets[bad]
            message = f"{piece.path}: unreadable record at offset {at} (batch at byte " \
                      f"{pos - size}): {exc}"
            if not permissive:
                raise MetakraftCorruptLogError(message) from exc
            good: list[tuple[object, ...]] = [record_columns(r, change_json=change_json)
                                              for r in wanted[:bad]]
            out.add(list(offsets[:bad]), batch.base_offset, batch.epoch,
                    batch.append_time_ms, _origin(batch.origin), batch.is_control, good)
            out.add([at], batch.base_offset, batch.epoch, batch.append_time_ms,
                    _origin(batch.origin), batch.is_control, [_NO_COLUMNS], corrupt=message)
            break
        out.add(offsets, batch.base_offset, batch.epoch, batch.append_time_ms,
                _origin(batch.origin), batch.is_control, rows)
        if len(out) >= ROWS_PER_ARROW_BATCH:
            yield out.flush()
    if len(out):
        yield out.flush()


def _unreadable(data: bytes) -> bool:
    try:
        record_columns(data)
    except RecordDecodeError:
        return True
    return False


def _origin(origin: object) -> tuple[str | None, str | None, str | None]:
    # Internal batches (timers, bootstrap) have an empty origin: null says "nobody".
    principal = getattr(origin, "principal", "") or None
    client = getattr(origin, "client_address", "") or None
    request = getattr(origin, "request_id", "") or None
    return principal, client, request
