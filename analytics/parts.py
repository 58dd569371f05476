"""A DataFrame an audit uses, in two parts: what this audit computed and what a cache kept.

The partition-state checkpoints (`analytics.states_cache`) hand an audit the states
kept before a boundary as Parquet files, beside the states it derives after it (as
its rows come from Parquet files: the row cache's and its own decoded ones). Only the
part it computed is worth persisting for the sections that follow: the kept files are
as quick to scan again as a persisted copy is to read (each query reads only its
columns, pruned by Spark's Parquet reader), while persisting them means reading them
whole and building that copy first. Measured on a re-audit of 10.1M records: the
states ready in 6-7 s instead of 31-43 s (docs/benchmarks.md).
"""

from __future__ import annotations

import attrs
from pyspark import StorageLevel
from pyspark.sql import DataFrame


@attrs.frozen
class Parts:
    """`new`: computed by this audit (decoded, derived); `kept`: read from a cache's
    Parquet files. Either may be None, not both; both have the same columns."""

    new: DataFrame | None
    kept: DataFrame | None

    def __attrs_post_init__(self) -> None:
        assert self.new is not None or self.kept is not None, "a DataFrame from nothing"

    def joined(self) -> DataFrame:
        """Both parts as one DataFrame (nothing persisted)."""
        if self.new is None or self.kept is None:
            only = self.kept if self.new is None else self.new
            assert only is not None
            return only
        return self.new.unionByName(self.kept)

    def held(self) -> tuple[DataFrame, DataFrame | None]:
        """Both parts as one DataFrame with the new part persisted, and that persisted
        part (None if there is none), to unpersist when done."""
        new = None if self.new is None else self.new.persist(StorageLevel.MEMORY_AND_DISK)
        return Parts(new, self.kept).joined(), new
