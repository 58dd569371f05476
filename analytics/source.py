"""The `metakraft` PySpark (4.x) Python data source.

    analytics.register(spark)
    df = (spark.read.format("metakraft")
          .option("snapshots", "true")          # also read DIR/snapshots/*.checkpoint
          .option("startOffset", 100)           # offsets [startOffset, endOffset)
          .option("endOffset", 5000)
          .option("mode", "permissive")         # damage -> a `_corrupt` row, not an error
          .option("partitionChangeJson", "false")  # no record_json on PartitionChange rows
          .option("seed", "true")               # + the snapshot ending at startOffset
          .load("/var/lib/metakraft/node-1"))

    # The whole history: the remote tier's objects, then the local log after them.
    df = (spark.read.format("metakraft")
          .option("tier", "s3://bucket/metakraft?endpoint=http://127.0.0.1:9000")
          .load("/var/lib/metakraft/node-1"))     # or .load() for the tier alone

    # With a row cache (`analytics.row_cache`, what `metakraft audit` does): the rows
    # of each tier piece decoded are also written to CACHE as Parquet; the pieces
    # named in cachedPieces (comma-separated keys) are left to the caller, who reads
    # their files with spark.read.parquet.
    df = (spark.read.format("metakraft").option("tier", URL)
          .option("cacheDir", CACHE).option("cachedPieces", "KEY,KEY").load(DIR))

One Spark partition per segment (and per snapshot) file, or tier object. Executors
read tier objects themselves (S3 credentials from their environment): no data goes
through the driver. Readers run on executors:
they import this package there, so on a cluster the package (and `controller`) must
be installed on every executor or shipped with `--py-files` (docs/analytics.md).

No `pushFilters`: Spark 4.3 refuses every read of a source that implements it unless
`spark.sql.python.filterPushdown.enabled` is set, and the offset range options give
the pruning that matters (whole segments skipped on the driver).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from analytics import row_cache
from analytics.reader import MAX_OFFSET, FileSlice, plan_read, read_file
from analytics.schema import arrow_schema, ddl_schema

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def _options(options: Any) -> dict[str, str]:
    # Spark hands over a case-insensitive map; normalise so lookups are simple.
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _flag(opts: dict[str, str], name: str, default: bool) -> bool:
    value = opts.get(name.lower())
    if value is None:
        return default
    if value.lower() not in _TRUE | _FALSE:
        raise ValueError(f"metakraft source: option {name} must be true or false, not {value!r}")
    return value.lower() in _TRUE


# Every option the source takes (Spark lower-cases the keys); "path" is load()'s.
KNOWN_OPTIONS = ("path", "snapshots", "partitionChangeJson", "mode", "startOffset",
                 "endOffset", "tier", "seed", "cacheDir", "cachedPieces")


def _offset(opts: dict[str, str], name: str, default: int) -> int:
    value = opts.get(name.lower())
    if value is None:
        return default
    try:
        offset = int(value)
    except ValueError:
        offset = -1
    if offset < 0:
        raise ValueError(f"metakraft source: option {name} must be an offset (an integer "
                         f">= 0), not {value!r}")
    return offset


class _Options:
    def __init__(self, options: Any) -> None:
        opts = _options(options)
        # A misspelt option would otherwise be ignored, and the read quietly differ
        # from the one asked for (say, the whole log instead of an offset range).
        unknown = sorted(set(opts) - {k.lower() for k in KNOWN_OPTIONS})
        if unknown:
            raise ValueError(f"metakraft source: unknown option(s) {', '.join(unknown)}; "
                             f"the options are "
                             f"{', '.join(o for o in KNOWN_OPTIONS if o != 'path')}")
        path = opts.get("path")
        # The remote tier's URL: its objects and the log directory (if any) are read as
        # one history.
        self.tier = opts.get("tier") or ""
        if not path and not self.tier:
            raise ValueError("metakraft source: give the log directory to load(PATH), "
                             "or a remote tier with option(\"tier\", URL), or both")
        if self.tier:
            from controller.tier.remote import parse_tier_url

            parse_tier_url(self.tier)  # ValueError naming what is wrong, on the driver
        self.path = path or ""
        self.snapshots = _flag(opts, "snapshots", False)
        # False: PartitionChange rows get no record_json (their fields are the typed
        # partition columns); saves building and shipping most of a busy log's JSON.
        self.change_json = _flag(opts, "partitionChangeJson", True)
        mode = opts.get("mode", "failfast").lower()
        if mode not in ("failfast", "permissive"):
            raise ValueError(f"metakraft source: mode must be failfast or permissive, not {mode}")
        self.permissive = mode == "permissive"
        self.start = _offset(opts, "startOffset", 0)
        self.end = _offset(opts, "endOffset", MAX_OFFSET)
        if self.start > self.end:
            raise ValueError(f"metakraft source: empty offset range: startOffset "
                             f"{self.start} > endOffset {self.end}")
        # The snapshot that ends at startOffset (its rows at offset startOffset - 1):
        # the state a window of the log starts from (`metakraft audit --from-offset`).
        self.seed = _flag(opts, "seed", False)
        if self.seed and self.start == 0:
            raise ValueError("metakraft source: option seed needs a startOffset above 0")
        # The row cache's folder for this reading mode (`row_cache.mode_dir`): rows of
        # the tier pieces read are written there. `cachedPieces`: the keys of pieces
        # the caller reads from it, left out here.
        self.cache_dir = opts.get("cachedir", "")
        self.cached = frozenset(k for k in opts.get("cachedpieces", "").split(",") if k)
        if self.cached and not self.cache_dir:
            raise ValueError("metakraft source: option cachedPieces needs cacheDir")


class MetakraftPartition(InputPartition):
    def __init__(self, piece: FileSlice) -> None:
        super().__init__(piece.path)
        self.piece = piece


class MetakraftReader(DataSourceReader):
    def __init__(self, options: _Options) -> None:
        self.opts = options

    def partitions(self) -> list[MetakraftPartition]:
        opts = self.opts
        pieces = plan_read(opts.path or None, opts.tier or None, snapshots=opts.snapshots,
                           start=opts.start, end=opts.end, seed=opts.seed)
        if not opts.cached:
            return [MetakraftPartition(p) for p in pieces]
        keys = {p: row_cache.piece_key(p) for p in pieces}
        missing = opts.cached - set(keys.values())
        if missing:
            # The caller planned against another listing: its cached rows and these
            # pieces would not make one history.
            raise ValueError(f"metakraft source: {len(missing)} cached piece(s) are not in "
                             f"this read's plan (the tier changed while the audit "
                             f"planned it): run it again")
        return [MetakraftPartition(p) for p in pieces if keys[p] not in opts.cached]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MetakraftPartition), partition
        opts = self.opts
        batches = read_file(partition.piece, permissive=opts.permissive,
                            change_json=opts.change_json)
        key = row_cache.piece_key(partition.piece) if opts.cache_dir else None
        if key is None:
            yield from batches
            return
        kept = []
        for batch in batches:
            kept.append(batch)
            yield batch
        # Only after the last batch: a read Spark stops early is not the piece's rows.
        row_cache.store(opts.cache_dir, key, kept, arrow_schema(opts.permissive))


class MetakraftDataSource(DataSource):
    """`spark.read.format("metakraft").load(log_dir)`; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "metakraft"

    def schema(self) -> str:
        return ddl_schema(permissive=_Options(self.options).permissive)

    def reader(self, schema: Any) -> MetakraftReader:
        return MetakraftReader(_Options(self.options))
