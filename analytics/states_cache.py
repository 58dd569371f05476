"""Partition-state checkpoints: a re-audit derives partition states for new records only.

Most of an audit starts from the partition states (`audit.indexed_partition_states`:
the full state of a partition after each of its records), and deriving them is a
shuffle and a sort of every partition record. The state of a partition after a
record depends only on the records before it, and tier objects never change (see
`analytics.row_cache`), so the states of the records of a run of tier objects at the
start of the history are the same for ever. An audit keeps them, beside the row
cache:

- a *chunk* per audit: the states of the records in [previous boundary, boundary),
  where a boundary is the end of the leading run of cacheable tier pieces of the
  read plan (the local log's tail is never kept: a segment file grows and may be
  truncated);
- a *checkpoint* at the boundary: the last state of every partition before it;
- a manifest naming the chunks up to the boundary and its checkpoint, written last
  (atomic rename): a boundary is in the cache only once its manifest is.

A boundary's name is a hash of everything the states before it depend on: this
module's version, the row cache's (the reader's rows), and every piece's cache key
from the first one (each object's manifest, with the SHA-256 of its data, and the
offset range read). A history that changed below the boundary (an object replaced,
the tier's head trimmed) names other boundaries and misses. A re-audit finds the
latest boundary of its plan in the cache, reads the chunks up to it as they are,
and derives the states of the records after it with the checkpoint as the first
state of each partition (`indexed_partition_states(last_states=...)`); the result
equals the states of a full derivation (tests compare them).

Not kept, and then derived in full as before: window audits (`--from-offset`),
permissive audits (a damaged read is not an object's rows), and audits that read
snapshots (a snapshot's Topic records could reorder the topic index the kept states
use). Everything is written by Spark's writer into the directory the row cache
uses, so on a cluster it must be shared; a write that fails leaves no manifest and
the audit goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

import attrs
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from analytics import audit, row_cache
from analytics.audit import CHECKPOINT_COLUMNS, PARTITION_KEY
from analytics.parts import Parts
from analytics.reader import FileSlice

# Raise when the states `audit.indexed_partition_states` derives change (a column
# added, a rule fixed): every boundary of an older version is then a miss.
STATES_VERSION = 1
MANIFEST_SUFFIX = ".states.json"


def folder_of(rows_folder: Path) -> Path:
    """Where the states live: beside the row cache files of the same reading mode."""
    return rows_folder / f"states-v{STATES_VERSION}"


class NotKeptError(Exception):
    """The states could not be written; the audit goes on (the next one derives them)."""


@attrs.frozen
class Boundary:
    """The end offset of the leading run of cacheable pieces up to one of them, and
    the name of the states before it."""

    end_offset: int
    key: str


def boundaries(pieces: Sequence[FileSlice]) -> list[Boundary]:
    """The boundaries of a read plan, ascending: one after each piece of its leading
    run of cacheable tier pieces (`row_cache.piece_key`), contiguous from the plan's
    first offset."""
    out: list[Boundary] = []
    chain = hashlib.sha256(json.dumps([STATES_VERSION, row_cache.ROWS_VERSION]).encode())
    expected_start: int | None = None
    for piece in pieces:
        key = row_cache.piece_key(piece)
        if key is None or (expected_start is not None and piece.start != expected_start):
            break
        chain.update(key.encode())
        out.append(Boundary(piece.end, chain.copy().hexdigest()))
        expected_start = piece.end
    return out


@attrs.frozen
class Hit:
    """What the cache holds for a plan: the states before `boundary` as `chunks`
    (Parquet directories) and the last state of each partition there."""

    boundary: Boundary
    chunks: tuple[str, ...]
    checkpoint: str


def _manifest(folder: Path, boundary: Boundary) -> Path:
    return folder / f"{boundary.key}{MANIFEST_SUFFIX}"


def find(folder: Path, plan: Sequence[Boundary]) -> Hit | None:
    """The latest of `plan`'s boundaries the cache holds whole, or None."""
    for boundary in reversed(plan):
        path = _manifest(folder, boundary)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        chunks = tuple(str(folder / c) for c in doc.get("chunks", ()))
        checkpoint = str(folder / str(doc.get("checkpoint", "")))
        if doc.get("end_offset") == boundary.end_offset and doc.get("checkpoint") and \
                all(Path(p).is_dir() for p in (*chunks, checkpoint)):
            return Hit(boundary, chunks, checkpoint)
    return None


def derive(spark: SparkSession, rows: DataFrame, names: DataFrame, hit: Hit | None
           ) -> tuple[Parts, DataFrame, DataFrame | None]:
    """`audit.indexed_partition_states(rows, names)` (the states as `Parts`: `kept`
    the hit's chunks, `new` the states derived) and the hit's checkpoint (None
    without a hit): with a hit, the states kept before its boundary read as they are
    and those of the records after it derived on from the checkpoint."""
    if hit is None:
        states, index = audit.indexed_partition_states(rows, names)
        return Parts(states, None), index, None
    kept, checkpoint = spark.read.parquet(*hit.chunks), spark.read.parquet(hit.checkpoint)
    after = F.col("offset") >= hit.boundary.end_offset
    window, index = audit.indexed_partition_states(rows.where(after), names,
                                                   last_states=checkpoint)
    return Parts(window.where(after), kept), index, checkpoint


def last_states(states: DataFrame) -> DataFrame:
    """The last state of each partition in `states` (`CHECKPOINT_COLUMNS`)."""
    newest = Window.partitionBy(*PARTITION_KEY).orderBy(F.desc("offset"))
    return (states.select(*CHECKPOINT_COLUMNS)
            .withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n"))


def _write(df: DataFrame, target: Path) -> None:
    """`df` as the Parquet directory `target` (written aside, then renamed)."""
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        df.write.parquet(str(temporary))
        # A name stands for one content (a refresh, `--full`, writes the same again).
        shutil.rmtree(target, ignore_errors=True)
        os.replace(temporary, target)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def store(folder: Path, plan: Sequence[Boundary], hit: Hit | None, states: DataFrame,
          checkpoint: DataFrame | None) -> Boundary | None:
    """Keep the states of `states` (every partition state from the hit's boundary on,
    or from the start without a hit) before the plan's last boundary, with the
    checkpoint there; `checkpoint` is the hit's (None without one). Returns the
    boundary kept (None: nothing new to keep; `prune` it when the audit is done);
    `NotKeptError` when a write failed (no manifest names what was written)."""
    if not plan or (hit is not None and hit.boundary == plan[-1]):
        return None
    end = plan[-1]
    start_offset = hit.boundary.end_offset if hit is not None else None
    chunk = states.where(F.col("offset") < end.end_offset)
    if start_offset is not None:
        chunk = chunk.where(F.col("offset") >= start_offset)
    before = chunk if checkpoint is None else chunk.select(*CHECKPOINT_COLUMNS).unionByName(
        checkpoint.select(*CHECKPOINT_COLUMNS))
    # A chunk is named by both its boundaries (what it holds), a checkpoint by its one.
    since = hit.boundary.key[:16] if hit is not None else "start"
    chunk_name, checkpoint_name = f"{end.key}.from-{since}.chunk", f"{end.key}.last"
    try:  # (Spark's writer raises its own errors; a full disk is one of them)
        folder.mkdir(parents=True, exist_ok=True)
        _write(chunk, folder / chunk_name)
        _write(last_states(before), folder / checkpoint_name)
        names = [Path(c).name for c in hit.chunks] if hit is not None else []
        doc = {"end_offset": end.end_offset, "chunks": [*names, chunk_name],
               "checkpoint": checkpoint_name}
        manifest = _manifest(folder, end)
        temporary = manifest.with_name(f".{manifest.name}.{uuid.uuid4().hex}.tmp")
        temporary.write_text(json.dumps(doc))
        os.replace(temporary, manifest)
    except (OSError, Py4JJavaError, PySparkException) as exc:
        raise NotKeptError(f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from exc
    return end


def prune(folder: Path, boundary: Boundary) -> int:
    """Remove every manifest, chunk and checkpoint of `folder` but those the manifest of
    `boundary` names; returns how many. Called once the audit is done: until then its
    states may be recomputed (a lost cached block) from the files it read."""
    try:
        keep = json.loads(_manifest(folder, boundary).read_text())
    except (OSError, ValueError):
        return 0
    wanted = {*keep.get("chunks", ()), str(keep.get("checkpoint"))}
    removed = 0
    for path in folder.iterdir() if folder.is_dir() else ():
        if path.name.endswith(MANIFEST_SUFFIX):
            with contextlib.suppress(OSError, ValueError):
                if json.loads(path.read_text()) == keep:
                    continue
            path.unlink(missing_ok=True)
            removed += 1
        elif path.name not in wanted and not path.name.startswith("."):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed

