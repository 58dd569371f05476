"""Spark audit of the metadata log (docs/analytics.md).

- `register(spark)`: makes `spark.read.format("metakraft")` available;
- `read_log(spark, log_dir, **options)`: the data source with options (no name join);
- `load(spark, log_dir, **options)`: read + resolve topic names (the usual entry);
- `ship_code(spark)`: send this package's code to executors that lack it;
- `analytics.audit`: pure DataFrame -> DataFrame audit functions;
- `analytics.invariants`: checks returning the violating rows;
- `analytics.report`: the `metakraft audit` report.

pyspark is imported only by the functions that need it, so `import analytics` (and
the CLI) stays fast and works without Java.
"""

from __future__ import annotations

import atexit
import importlib
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def register(spark: SparkSession) -> None:
    """Register the `metakraft` data source with this session (idempotent)."""
    from analytics.source import MetakraftDataSource

    spark.dataSource.register(MetakraftDataSource)


def read_log(spark: SparkSession, log_dir: str | None, **options: str | int | bool) -> DataFrame:
    """`spark.read.format("metakraft")` with `options` (booleans as "true"/"false").
    `log_dir` may be None when `tier=URL` is given (the tier alone)."""
    register(spark)
    reader = spark.read.format("metakraft")
    for key, value in options.items():
        reader = reader.option(key, str(value).lower() if isinstance(value, bool) else value)
    return reader.load(log_dir) if log_dir else reader.load()


def load(spark: SparkSession, log_dir: str, **options: str | int | bool) -> DataFrame:
    """The log as a DataFrame with `topic_name` filled for every record of a known topic.

    The data source itself sets `topic_name` only on records that carry the name
    (Topic records, topic Config records); this adds the join that resolves it for
    records that carry only the id (see `analytics.audit.resolve_topic_names`).
    """
    from analytics.audit import resolve_topic_names

    return resolve_topic_names(read_log(spark, log_dir, **options))


# What the executors import to read a log: the data source and the record decoders.
SHIPPED_PACKAGES = ("analytics", "controller")


def ship_code(spark: SparkSession) -> str:
    """Send the running code of `SHIPPED_PACKAGES` to the executors, as
    `spark-submit --py-files` does: for a cluster whose Python has the dependencies
    (pyarrow, numpy, protobuf, crc32c, attrs) but not this package. Returns the zip's
    path; it is removed when this process exits (the driver serves it until then)."""
    folder = Path(tempfile.mkdtemp(prefix="metakraft-code-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    archive = folder / "metakraft.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for name in SHIPPED_PACKAGES:
            package = importlib.import_module(name)
            assert package.__file__ is not None, f"{name} is not a regular package"
            root = Path(package.__file__).parent
            for path in sorted(root.rglob("*.py")):
                out.write(path, path.relative_to(root.parent))
    spark.sparkContext.addPyFile(str(archive))
    return str(archive)
