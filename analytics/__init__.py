"""Spark audit of the metadata log (DESIGN §10; docs/analytics.md).

- `register(spark)`: makes `spark.read.format("metakraft")` available;
- `read_log(spark, log_dir, **options)`: the data source with options (no name join);
- `load(spark, log_dir, **options)`: read + resolve topic names (the usual entry);
- `analytics.audit`: pure DataFrame -> DataFrame audit functions;
- `analytics.invariants`: checks returning the violating rows;
- `analytics.report`: the `metakraft audit` report.

pyspark is imported only by the functions that need it, so `import analytics` (and
the CLI) stays fast and works without Java.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def register(spark: SparkSession) -> None:
    """Register the `metakraft` data source with this session (idempotent)."""
    from analytics.source import MetakraftDataSource

    spark.dataSource.register(MetakraftDataSource)


def read_log(spark: SparkSession, log_dir: str, **options: str | int | bool) -> DataFrame:
    """`spark.read.format("metakraft")` with `options` (booleans as "true"/"false")."""
    register(spark)
    reader = spark.read.format("metakraft")
    for key, value in options.items():
        reader = reader.option(key, str(value).lower() if isinstance(value, bool) else value)
    return reader.load(log_dir)


def load(spark: SparkSession, log_dir: str, **options: str | int | bool) -> DataFrame:
    """The log as a DataFrame with `topic_name` filled for every record of a known topic.

    The data source itself sets `topic_name` only on records that carry the name
    (Topic records, topic Config records); this adds the join that resolves it for
    records that carry only the id (see `analytics.audit.resolve_topic_names`).
    """
    from analytics.audit import resolve_topic_names

    return resolve_topic_names(read_log(spark, log_dir, **options))
