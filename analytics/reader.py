"""Segment and snapshot files -> Arrow record batches (no Spark here).

The Spark data source (`analytics.source`) is a thin shell over `plan_files` (on the
driver: which files, one Spark partition each) and `read_file` (on an executor: one
file's rows as Arrow batches). Keeping this layer Spark-free lets the benchmark and
the unit tests drive it directly.

Per log batch Python reads the header (CRC checked) and where the records are; no
`bytes` object is made per record. Per Arrow batch of rows: the batch-level columns
are one value per log batch, expanded with an Arrow `take`; PartitionChange records
(most of a busy log) are decoded in bulk by `analytics.wire`, with numpy over the
file's bytes; the other records come from `analytics.rows.rows_of` as one tuple per
record, transposed in C with `zip(*rows)`, and the two parts are put back in offset
order with one `take` per column. The typed partition and event columns are built
once per distinct value and expanded with a `take` too. The garbage collector is
paused while a batch is built (see `read_file`).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import numpy as np
import pyarrow as pa

from analytics.rows import RecordColumns, record_columns, rows_of
from analytics.schema import (
    CORRUPT_COLUMN,
    EVENT_FIELD_COLUMNS,
    PARTITION_FIELD_COLUMNS,
    arrow_schema,
)
from analytics.wire import PartitionChanges, Positions, decode_partition_changes
from controller.logformat import parse_snapshot_file_name
from controller.logformat.batch import record_bounds, verify_batch
from controller.records.codec import RecordDecodeError
from controller.storage.errors import CorruptBatchError, TruncatedBatchError
from controller.storage.meta_properties import cluster_id_of
from controller.storage.segment import parse_segment_file_name
from controller.tier.history import list_tier, local_segments, plan_history, read_tier_range
from controller.tier.objects import CorruptObjectError, Manifest, manifest_key
from controller.tier.remote import RemoteStorage, open_store

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
    # A remote tier object: the tier's URL (`path` is then the object's key) and its
    # manifest, which the executor checks the object against. Empty: a local file.
    tier: str = ""
    manifest: str = ""


def plan_read(log_dir: str | None, tier: str | None, *, snapshots: bool = False,
              start: int = 0, end: int = MAX_OFFSET, seed: bool = False) -> list[FileSlice]:
    """The pieces a read of `log_dir` (a controller's data directory), of `tier` (a
    remote tier's URL) or of both as one history covers: `plan_history_files` with a
    tier, else `plan_files`."""
    if tier:
        return plan_history_files(log_dir, tier, snapshots=snapshots, start=start, end=end,
                                  seed=seed)
    if not log_dir:
        raise ValueError("give a log directory, a remote tier, or both")
    return plan_files(log_dir, snapshots=snapshots, start=start, end=end, seed=seed)


def planned_bytes(pieces: Sequence[FileSlice]) -> int:
    """The bytes of the files the pieces are read from (a tier object's from its
    manifest; a piece read in part counts whole): what reading them reads at most."""
    total = 0
    for piece in pieces:
        if piece.tier:
            total += Manifest.decode(manifest_key(piece.path), piece.manifest.encode()).size_bytes
        else:
            total += os.path.getsize(piece.path)
    return total


def plan_history_files(log_dir: str | None, tier: str, *, snapshots: bool = False,
                       start: int = 0, end: int = MAX_OFFSET,
                       seed: bool = False) -> list[FileSlice]:
    """`plan_files` over a remote tier and (optionally) a local log directory, read as
    one history: each offset from one place (controller.tier.history.plan_history),
    a gap an error naming the missing range. With `snapshots`, the tier's snapshots
    and the local ones (one per end offset) are read too; with `seed`, the one
    snapshot that ends at `start` (the tier's, else the local one)."""
    store = open_store(tier)
    cluster_id = cluster_id_of(log_dir) if log_dir else None
    local = local_segments(log_dir) if log_dir else []
    listing = list_tier(store, cluster_id)
    out: list[FileSlice] = []
    for piece in plan_history(listing.segments, local, start=start, end=end):
        if piece.source == "tier":
            assert piece.manifest is not None
            out.append(FileSlice(piece.location, "segment", piece.start, piece.end, tier=tier,
                                 manifest=piece.manifest.encode().decode()))
        else:
            out.append(FileSlice(piece.location, "segment", piece.start, piece.end))
    if seed:
        found = [m for m in listing.snapshots if m.end_offset == start]
        if found:
            m = found[0]
            out.insert(0, FileSlice(m.data_key, "snapshot", start, end, start - 1, tier=tier,
                                    manifest=m.encode().decode()))
        elif log_dir:
            out[:0] = _seed_slice(log_dir, start, end)
        else:
            raise FileNotFoundError(f"{tier}: no snapshot ends at offset {start}")
    if snapshots:
        seen: set[int] = set()
        if log_dir:
            for f in plan_files(log_dir, snapshots=True, start=start, end=end):
                if f.kind == "snapshot":
                    out.append(f)
                    seen.add(f.snapshot_offset)
        for m in listing.snapshots:
            last = m.end_offset - 1
            if start <= last < end and last not in seen:
                seen.add(last)
                out.append(FileSlice(m.data_key, "snapshot", start, end, last, tier=tier,
                                     manifest=m.encode().decode()))
    if not out:
        raise FileNotFoundError(f"{tier}: the tier holds no log objects"
                                + (f" and {log_dir} no segments" if log_dir else "")
                                + f" in offsets [{start}, {end})")
    return out


# Executors open each tier once per process (an S3 client is costly to make).
_STORES: dict[str, RemoteStorage] = {}


def _load(piece: FileSlice) -> bytes:
    """The bytes of a piece's file, or of its tier object checked against its manifest
    (CorruptObjectError naming the object and offset)."""
    if not piece.tier:
        return Path(piece.path).read_bytes()
    store = _STORES.get(piece.tier)
    if store is None:
        store = _STORES[piece.tier] = open_store(piece.tier)
    manifest = Manifest.decode(manifest_key(piece.path), piece.manifest.encode())
    # Only the byte range the slice needs (an offset range, `audit --from-offset`),
    # through the manifest's offset index; read whole, the object is checked against
    # its manifest.
    data, _first = read_tier_range(store, manifest, piece.start, piece.end)
    return data


def _seed_slice(log_dir: str, start: int, end: int) -> list[FileSlice]:
    """The local snapshot that ends at `start` (FileNotFoundError if none)."""
    root = Path(log_dir)
    snap_dir = (root.parent if root.name == "metadata" else root) / "snapshots"
    for p in (snap_dir.iterdir() if snap_dir.is_dir() else ()):
        sid = parse_snapshot_file_name(p.name)
        if sid is not None and sid.end_offset == start:
            return [FileSlice(str(p), "snapshot", start, end, start - 1)]
    raise FileNotFoundError(f"{log_dir}: no snapshot ends at offset {start}")


def plan_files(log_dir: str, *, snapshots: bool = False, start: int = 0,
               end: int = MAX_OFFSET, seed: bool = False) -> list[FileSlice]:
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
    out: list[FileSlice] = _seed_slice(log_dir, start, end) if seed else []
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
    """Accumulates a file's rows and cuts them into Arrow batches.

    Per log batch, Python appends the batch's fields once (a *run* of rows sharing
    them) and where its records are in the file; everything else happens per Arrow
    batch in `flush`: the batch-level columns are one value per run expanded with a
    `take`, PartitionChange records are decoded in bulk (`analytics.wire`), and the
    other records go through `rows_of` one at a time.
    """

    def __init__(self, piece: FileSlice, data: bytes, permissive: bool,
                 change_json: bool) -> None:
        self.schema = arrow_schema(permissive)
        self.piece, self.permissive, self.change_json = piece, permissive, change_json
        self.file = os.path.basename(piece.path)
        self.data, self.buf = data, np.frombuffer(data, np.uint8)
        # Set when damage ended the file's rows: nothing after it is read.
        self.stopped = False
        self._reset()

    def _reset(self) -> None:
        self.offsets: list[int] = []
        self.run_of_row: list[int] = []
        # Per run: base, epoch, time (us), principal, client, request, is_control,
        # corrupt, the batch's byte position.
        self.runs: list[list[object]] = [[] for _ in range(9)]
        # Where each row's record is in the file (-1: a damaged batch's row, no record).
        self.starts: list[int] = []
        self.ends: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, offsets: range | list[int], base: int, epoch: int, time_ms: int,
            origin: tuple[str | None, str | None, str | None], is_control: bool,
            bounds: list[int], position: int) -> None:
        """A run of rows: record i is `data[bounds[i]:bounds[i + 1]]`."""
        runs = self.runs
        self.run_of_row.extend([len(runs[0])] * len(offsets))
        self.offsets.extend(offsets)
        # Microseconds as plain ints: Arrow builds the timestamp column from int64.
        for column, value in zip(runs, (base, epoch, time_ms * 1000, *origin, is_control,
                                        None, position), strict=True):
            column.append(value)
        self.starts.extend(bounds[:-1])
        self.ends.extend(bounds[1:])

    def add_damaged(self, offset: int, position: int, message: str,
                    like_run: int | None = None) -> None:
        """The row that stands for damage (permissive mode): no record, `_corrupt` set.

        With `like_run` (an unreadable record in a sound batch) it carries that run's
        batch fields; without (a damaged batch) only the offset, as its base offset.
        """
        runs = self.runs
        fields = ([offset, -1, 0, None, None, None, False] if like_run is None
                  else [column[like_run] for column in runs[:7]])
        self.run_of_row.append(len(runs[0]))
        self.offsets.append(offset)
        for column, value in zip(runs, [*fields, message, position], strict=True):
            column.append(value)
        self.starts.append(-1)
        self.ends.append(-1)
        self.stopped = True

    def flush(self) -> list[pa.RecordBatch]:
        """The rows so far as Arrow batches; raises at an unreadable record (failfast)
        or cuts the rows there (permissive)."""
        n = len(self.offsets)
        if not n:
            return []
        damaged = self.starts[-1] < 0
        with_record = n - 1 if damaged else n
        starts = np.array(self.starts[:with_record], np.int64)
        ends = np.array(self.ends[:with_record], np.int64)
        changes = decode_partition_changes(self.buf, starts, ends, change_json=self.change_json)
        is_change = np.zeros(with_record, bool)
        is_change[changes.rows] = True
        others = np.flatnonzero(~is_change)
        data = self.data
        records = list(map(data.__getitem__, map(slice, starts[others].tolist(),
                                                 ends[others].tolist())))
        try:
            rows = rows_of(records, change_json=self.change_json)
        except RecordDecodeError:
            return self._cut_at_unreadable(records, others)
        if damaged:
            others = np.append(others, with_record)
            rows.append(_NO_COLUMNS)
        batch = self._assemble(n, changes, others, rows)
        self._reset()
        return [batch]

    def _cut_at_unreadable(self, records: list[bytes], others: Positions
                           ) -> list[pa.RecordBatch]:
        bad, error = _first_unreadable(records)
        row = int(others[bad])
        run = self.run_of_row[row]
        at = self.offsets[row]
        position = self.runs[8][run]
        assert isinstance(position, int)
        message = (f"{self.piece.path}: unreadable record at offset {at} (batch at byte "
                   f"{position}): {error}")
        if not self.permissive:
            raise MetakraftCorruptLogError(message) from error
        # The rows before it as they are, then the damage; nothing after it is read.
        for rows in (self.offsets, self.run_of_row, self.starts, self.ends):
            del rows[row:]
        self.add_damaged(at, position, message, like_run=run)
        return self.flush()

    def _assemble(self, n: int, changes: PartitionChanges, others: Positions,
                  rows: list[RecordColumns]) -> pa.RecordBatch:
        schema = self.schema
        k, m = len(others), len(changes.rows)
        record_cols = list(zip(*rows, strict=True)) if k else [()] * 11
        # Each row's place in (other rows, then change rows): one `take` puts a column
        # built as those two parts back in offset order.
        place = np.empty(n, np.int64)
        place[others] = np.arange(k)
        place[changes.rows] = k + np.arange(m)
        order = pa.array(place)
        change_columns = {
            "record_type": pa.repeat(pa.scalar("partition_change", pa.string()), m),
            "version": changes.version, "topic_id": changes.topic_id,
            "partition_id": changes.partition_id, "record_json": changes.record_json,
        }

        def merged(name: str, values: Sequence[object]) -> pa.Array:
            typ = schema.field(name).type
            of_changes = change_columns.get(name)
            if of_changes is None:
                of_changes = pa.nulls(m, typ)
            return pa.concat_arrays([pa.array(values, type=typ), of_changes]).take(order)

        take = pa.array(self.run_of_row, pa.int32())
        runs = self.runs[:8] if self.permissive else self.runs[:7]
        per_run = [pa.array(values, type=typ).take(take)
                   for values, typ in zip(runs, _RUN_TYPES, strict=False)]
        base, epoch, time_us, principal, client, request, control = per_run[:7]
        names = schema.names
        others_fields, others_index = _distinct(record_cols[9] if k else ())
        events, events_index = _distinct(record_cols[10] if k else ())
        arrays = [
            pa.array(self.offsets, pa.int64()), base, epoch, time_us,
            *[merged(names[4 + i], record_cols[i]) for i in range(8)],
            principal, client, request, control,
            pa.repeat(pa.scalar(self.piece.kind, pa.string()), n),
            pa.repeat(pa.scalar(self.file, pa.string()), n),
            merged("record_json", record_cols[8]),
            *_typed_columns(n, [(others, others_fields, others_index),
                                (changes.rows, changes.fields, changes.field_index)],
                            _PARTITION_TYPES),
            *_typed_columns(n, [(others, events, events_index)], _EVENT_TYPES),
        ]
        if self.permissive:
            arrays.append(per_run[7])
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


_PARTITION_TYPES = tuple(arrow_schema().field(name).type for name in PARTITION_FIELD_COLUMNS)
_EVENT_TYPES = tuple(arrow_schema().field(name).type for name in EVENT_FIELD_COLUMNS)
# The record-level columns of a corrupt row: all null.
_NO_COLUMNS: RecordColumns = (None,) * 11  # type: ignore[assignment]


def _distinct(values: Sequence[object]) -> tuple[list[object], Positions]:
    """The distinct objects of `values` (by identity: rows of records with equal bytes
    share one value object, see the caches in `analytics.rows`) and each value's
    position among them, in C (`map(id, ...)` and a dict)."""
    ids = list(map(id, values))
    distinct = dict(zip(ids, values, strict=True))
    position = {key: i for i, key in enumerate(distinct)}
    return list(distinct.values()), np.fromiter(map(position.__getitem__, ids), np.int64,
                                                len(ids))


def _typed_columns(n: int, parts: list[tuple[Positions, Sequence[object], Positions]],
                   types: tuple[pa.DataType, ...]) -> list[pa.Array]:
    """Typed columns of `types` from fields tuples (`PartitionFields`, `EventFields`).

    Each part is (rows, distinct values, each row's value among them); a value is a
    fields tuple or None (all null), and a row in no part is all null. The columns
    are built from the distinct values only and expanded with one `take`.
    """
    distinct: list[object] = [None]
    index = np.zeros(n, np.int64)
    for rows, values, which in parts:
        index[rows] = len(distinct) + which
        distinct.extend(values)
    empty = (None,) * len(types)
    table = list(zip(*[empty if v is None else v for v in distinct], strict=True))
    take = pa.array(index)
    return [pa.array(col, type=typ).take(take) for col, typ in zip(table, types, strict=True)]


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
    try:
        data = _load(piece)
    except CorruptObjectError as exc:
        # A damaged or short tier object: none of it is trusted (its CRC covers it all).
        message = f"{piece.tier}: {exc}"
        if not permissive:
            raise MetakraftCorruptLogError(message) from exc
        out = _Builder(piece, b"", permissive, change_json)
        out.add_damaged(exc.offset if exc.offset is not None else piece.start, 0, message)
        yield from out.flush()
        return
    out = _Builder(piece, data, permissive, change_json)
    pos = 0
    while pos < len(data) and not out.stopped:
        try:
            header = verify_batch(data, pos)
            origin, bounds = record_bounds(data, pos, header)
        except (CorruptBatchError, TruncatedBatchError) as exc:
            # An unreadable record before this batch is the first damage: the flush
            # raises at it (failfast) or ends the rows there (permissive).
            yield from out.flush()
            if out.stopped:
                return
            # The header's base offset when it was readable; else -1 (unknown).
            offset = exc.offset if exc.offset is not None else -1
            # The error names the offset and byte position when it knows them.
            where = "" if exc.position is not None else f"byte {pos}, offset {offset}: "
            message = f"{piece.path}: {where}{exc}"
            if not permissive:
                raise MetakraftCorruptLogError(message) from exc
            out.add_damaged(offset, pos, message)
            break
        at = pos
        pos += header.size_bytes
        if piece.kind == "snapshot":
            if header.is_control:
                continue  # snapshot header/footer: file framing, not image records
            first = piece.snapshot_offset
            offsets: range | list[int] = [first] * header.record_count
        else:
            if header.next_offset <= piece.start or header.base_offset >= piece.end:
                continue
            first = max(header.base_offset, piece.start)
            offsets = range(first, min(header.next_offset, piece.end))
        skip = first - header.base_offset if piece.kind == "segment" else 0
        out.add(offsets, header.base_offset, header.epoch, header.append_time_ms,
                _origin(origin), header.is_control, bounds[skip:skip + len(offsets) + 1], at)
        if len(out) >= ROWS_PER_ARROW_BATCH:
            yield from out.flush()
    yield from out.flush()


def _first_unreadable(records: list[bytes]) -> tuple[int, RecordDecodeError]:
    """The first record `rows_of` raised at, and its error."""
    for i, record in enumerate(records):
        try:
            record_columns(record)
        except RecordDecodeError as exc:
            return i, exc
    raise AssertionError("rows_of raised on records that each decode")


def _origin(origin: object) -> tuple[str | None, str | None, str | None]:
    # Internal batches (timers, bootstrap) have an empty origin: null says "nobody".
    principal = getattr(origin, "principal", "") or None
    client = getattr(origin, "client_address", "") or None
    request = getattr(origin, "request_id", "") or None
    return principal, client, request
