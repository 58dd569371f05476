"""`metakraft audit --log-dir DIR [--master URL] [--out DIR] [--conf K=V]...`: the audit report.

pyspark is imported inside the command, not at module level: every `metakraft`
invocation imports this module, and starting the CLI must not pay for (or need)
Spark and Java.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

import click


def _java_problem() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=os.path.join(home, "bin")) if home else shutil.which("java")
    if java is None:
        return "the Spark audit needs Java: install a JDK 17+ and put `java` on PATH " \
               "(or set JAVA_HOME)"
    return None


def _log_dir_problem(log_dir: str, snapshots: bool) -> str | None:
    # Checked here, before Spark starts: inside Spark the same error arrives wrapped
    # in a JVM traceback.
    from analytics.reader import plan_files

    try:
        plan_files(log_dir, snapshots=snapshots)
    except (OSError, ValueError) as exc:
        return str(exc)
    return None


def _spark_conf(ctx: click.Context, param: click.Parameter,
                values: tuple[str, ...]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith("spark."):
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE with a Spark key, e.g. "
                                     f"spark.sql.shuffle.partitions=64", ctx, param)
        conf[key.strip()] = value
    return conf


@click.command()
@click.option("--log-dir", "log_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="A controller's data directory (holding metadata/) or its metadata/ dir.")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master URL, e.g. spark://host:7077 for a standalone cluster.")
@click.option("--out", "out_dir", default="audit-report", show_default=True,
              type=click.Path(file_okay=False), help="Directory for report.md and the plots.")
@click.option("--snapshots/--no-snapshots", default=False, show_default=True,
              help="Also read the snapshot files (for state at offsets below the log start).")
@click.option("--driver-memory", "driver_memory", default=None,
              help="Spark driver memory, e.g. 8g. In local mode the driver holds the "
                   "cached log (about 250 bytes a record); Spark's default is 1g.")
@click.option("--conf", "spark_conf", multiple=True, callback=_spark_conf, metavar="KEY=VALUE",
              help="A Spark setting (repeatable), applied over the audit's own, as "
                   "spark-submit's --conf: e.g. spark.sql.shuffle.partitions=64 on a cluster.")
def audit(log_dir: str, master: str, out_dir: str, snapshots: bool,
          driver_memory: str | None, spark_conf: dict[str, str]) -> None:
    """Audit a metadata log with Spark: history, invariants, report with plots.

    Exits 1 when an invariant is violated, 2 when the audit could not run.
    """
    problem = _log_dir_problem(log_dir, snapshots) or _java_problem()
    if problem is not None:
        click.echo(f"error: {problem}", err=True)
        sys.exit(2)
    # Executors must run this interpreter (it has pyarrow and this package).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()

    def progress(message: str) -> None:
        click.echo(f"[{time.monotonic() - started:6.1f}s] {message}", err=True)

    progress(f"starting Spark ({master})")
    from analytics.report import audit_session, run_audit

    spark = audit_session(master, driver_memory=driver_memory, extra=spark_conf)
    violations = run_audit(spark, os.path.abspath(log_dir), out_dir, progress,
                           snapshots=snapshots)
    bad = {name: n for name, n in violations.items() if n}
    for name, n in violations.items():
        click.echo(f"{'VIOLATED' if n else 'ok':>8}  {name}" + (f" ({n} rows)" if n else ""))
    if bad:
        sys.exit(1)
