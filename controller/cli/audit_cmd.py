"""`metakraft audit [--log-dir DIR] [--tier URL] [--master URL] [--out DIR] [--conf K=V]...`: the audit report.

pyspark is imported inside the command, not at module level: every `metakraft`
invocation imports this module, and starting the CLI must not pay for (or need)
Spark and Java.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import time
from pathlib import Path

import click

from controller.cli.admin_output import human_bytes

# What the audit imports beyond the core install (the `analytics` extra).
ANALYTICS_MODULES = ("pyspark", "pyarrow", "numpy", "matplotlib")


def _analytics_problem() -> str | None:
    missing = [m for m in ANALYTICS_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return (f"the Spark audit needs the analytics extra, which the core install leaves "
                f"out: pip install 'metakraft[analytics]' (missing: {', '.join(missing)})")
    return None


def _java_problem() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=os.path.join(home, "bin")) if home else shutil.which("java")
    if java is None:
        return "the Spark audit needs Java: install a JDK 17+ and put `java` on PATH " \
               "(or set JAVA_HOME)"
    return None


def _log_dir_problem(log_dir: str | None, snapshots: bool, tier: str | None = None
                     ) -> str | None:
    # Checked here, before Spark starts: inside Spark the same error arrives wrapped
    # in a JVM traceback.
    from analytics.reader import plan_read
    from controller.tier.remote import TierError

    try:
        plan_read(log_dir, tier, snapshots=snapshots)
    except (OSError, ValueError, TierError) as exc:
        return str(exc)
    return None


# A failure inside Spark reaches the driver as one long text: the JVM's error with the
# executor's Python traceback inside. These are the causes an operator can act on.
_CORRUPT = re.compile(r"MetakraftCorruptLogError: (.+)")
_NO_MODULE = re.compile(r"ModuleNotFoundError: (No module named '(?:analytics|controller)\S*)")


def failure_message(exc: BaseException) -> str:
    """What went wrong when the audit could not run, in a line or two."""
    text = str(exc)
    damage = _CORRUPT.search(text)
    if damage is not None:
        return (f"the log cannot be read: {damage.group(1)}\n"
                "(--permissive audits what is readable and lists the damage in the report)")
    missing = _NO_MODULE.search(text)
    if missing is not None:
        return (f"the executors' Python cannot import metakraft ({missing.group(1)}): "
                "install the package there, or pass --ship-code")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first[:500]}"


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


def window_start(log_dir: str | None, tier: str | None, from_offset: int | None,
                  since: str | None, whole_history_options: bool) -> int:
    """Where a window audit starts: the end of the newest snapshot (the tier's or the
    log directory's) at or below the offset asked for, or found for a time; 0 when
    none is (the whole history, said by the caller's progress)."""
    from controller.cli.storage_cmd import parse_time_ms
    from controller.storage.meta_properties import DataDir
    from controller.storage.snapshot_file import list_snapshots
    from controller.tier.history import first_offset_after, list_tier
    from controller.tier.objects import Manifest
    from controller.tier.remote import open_store

    if from_offset is not None and since is not None:
        raise ValueError("give --from-offset or --since, not both")
    if whole_history_options:
        raise ValueError("a window (--from-offset, --since) goes with neither --snapshots "
                         "nor --compare-with")
    ends: list[int] = []
    segments: tuple[Manifest, ...] = ()
    if tier is not None:
        listing = list_tier(open_store(tier))
        ends += [m.end_offset for m in listing.snapshots]
        segments = listing.segments
    if log_dir is not None:
        root = Path(log_dir)
        data_dir = root.parent if root.name == "metadata" else root
        ends += [s.end_offset for s in list_snapshots(DataDir(data_dir).snapshot_dir)]
    if since is not None:
        if tier is None:
            raise ValueError("--since finds its offset through the tier's time indexes: give "
                             "--tier (or use --from-offset)")
        found = first_offset_after(segments, parse_time_ms(since) - 1)
        if found is None:
            raise ValueError(f"the tier holds nothing appended at or after {since}")
        from_offset = found
    assert from_offset is not None
    return max((e for e in ends if e <= from_offset), default=0)


@click.command()
@click.option("--log-dir", "log_dir", type=click.Path(exists=True, file_okay=False),
              help="A controller's data directory (holding metadata/) or its metadata/ dir.")
@click.option("--tier", "tier", metavar="URL",
              help="The cluster's remote tier (file:///path or s3://bucket/prefix?endpoint="
                   "URL): its objects and --log-dir (optional then) are audited as one "
                   "history, from the oldest offset the tier holds.")
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
@click.option("--permissive", is_flag=True,
              help="Audit what is readable of a damaged log: the damage is listed in the "
                   "report (check log_readable) and the rest of a damaged file is skipped. "
                   "Without it, damage stops the audit (exit 2), naming the file and offset.")
@click.option("--compare-with", "compare_with", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False),
              help="Another controller's log directory (repeatable): the report's "
                   "replicas_agree check finds the first offset up to the committed "
                   "offset where it and --log-dir differ.")
@click.option("--committed-offset", "committed_offset", type=click.IntRange(min=0),
              default=None, help="With --compare-with: compare up to this offset (the "
                                 "quorum's high watermark - 1). Default: the shortest "
                                 "log's end.")
@click.option("--from-offset", "from_offset", type=click.IntRange(min=0), default=None,
              help="Audit a window: the log from the newest snapshot at or below this "
                   "offset (the tier's or --log-dir's), the state then seeded from it. "
                   "Reads only the objects and byte ranges the window needs.")
@click.option("--since", "since", default=None, metavar="TIME",
              help="Audit a window from TIME (ISO 8601, UTC unless it says, or ms since the "
                   "epoch), found through the tier's time indexes; as --from-offset.")
@click.option("--cache-dir", "cache_dir", default=None, type=click.Path(file_okay=False),
              help="The row cache: the rows of each tier object decoded, kept as Parquet "
                   "so that a re-audit decodes only new objects and the local log, and "
                   "the partition states of their records up to a checkpoint "
                   "(default: OUT/row-cache; on a cluster, a directory the driver and "
                   "the executors share).")
@click.option("--full", is_flag=True,
              help="Decode every tier object and derive every partition state, not "
                   "reading the row cache (which is written afresh).")
@click.option("--no-cache", "no_cache", is_flag=True,
              help="Neither read nor write the row cache.")
@click.option("--ship-code", "ship_code", is_flag=True,
              help="Send this package's code to the executors (what spark-submit "
                   "--py-files does), for a cluster whose Python has the dependencies "
                   "but not metakraft.")
def audit(log_dir: str | None, tier: str | None, master: str, out_dir: str, snapshots: bool,
          driver_memory: str | None, spark_conf: dict[str, str], permissive: bool,
          compare_with: tuple[str, ...], committed_offset: int | None,
          from_offset: int | None, since: str | None, cache_dir: str | None, full: bool,
          no_cache: bool, ship_code: bool) -> None:
    """Audit a metadata log with Spark: history, invariants, report with plots.

    Exits 1 when a check fails (an invariant; with --permissive, the log's damage;
    with --compare-with, the logs' agreement), 2 when the audit could not run.
    With --tier, the rows of each tier object are kept in a row cache, so a
    re-audit decodes only what is new (--full decodes everything again).
    """
    if no_cache and (full or cache_dir is not None):
        click.echo("error: --no-cache goes with neither --full nor --cache-dir", err=True)
        sys.exit(2)
    if committed_offset is not None and not compare_with:
        click.echo("error: --committed-offset needs --compare-with", err=True)
        sys.exit(2)
    if log_dir is None and (tier is None or compare_with):
        click.echo("error: give --log-dir (--tier alone is enough without --compare-with)",
                   err=True)
        sys.exit(2)
    start_offset = 0
    if from_offset is not None or since is not None:
        try:
            start_offset = window_start(log_dir, tier, from_offset, since,
                                         snapshots or bool(compare_with))
        except (ValueError, OSError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
    problem = (_analytics_problem()
               or _log_dir_problem(log_dir, snapshots, tier)
               or next(filter(None, (_log_dir_problem(d, False) for d in compare_with)), None)
               or _java_problem())
    if problem is not None:
        click.echo(f"error: {problem}", err=True)
        sys.exit(2)
    # Executors must run this interpreter (it has pyarrow and this package).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()

    def progress(message: str) -> None:
        click.echo(f"[{time.monotonic() - started:6.1f}s] {message}", err=True)

    # Spark's own output (JVM warnings, log4j banners) goes to a file beside the
    # report; the terminal gets the audit's progress and verdicts.
    jvm_log = Path(out_dir) / "spark.log"
    import analytics
    from analytics.reader import plan_read, planned_bytes
    from analytics.report import SMALL_LOG_JAVA_OPTIONS, audit_session, run_audit, session_conf

    try:
        # What the audit reads, in bytes: a small log's driver JVM is started with
        # settings for short queries (`analytics.report.session_conf`). The plan is
        # handed on to the audit, which would otherwise list the tier again.
        log_path = log_dir and os.path.abspath(log_dir)
        plan = plan_read(log_path, tier, snapshots=snapshots, start=start_offset,
                         seed=bool(start_offset))
        log_bytes = planned_bytes(plan)
        log_bytes += sum(planned_bytes(plan_read(d, None)) for d in compare_with)
        java = session_conf(master, extra=spark_conf, log_bytes=log_bytes).get(
            "spark.driver.extraJavaOptions")
        small = " (small: its driver compiles with C1 only)" if (
            java == SMALL_LOG_JAVA_OPTIONS) else ""
        progress(f"starting Spark ({master}) for {human_bytes(log_bytes)} of log{small}; "
                 f"its own output: {jvm_log}")
        spark = audit_session(master, driver_memory=driver_memory, extra=spark_conf,
                              jvm_log=jvm_log, log_bytes=log_bytes)
        if ship_code:
            progress(f"code for the executors: {analytics.ship_code(spark)}")
        violations = run_audit(spark, log_path, out_dir, progress,
                               snapshots=snapshots, permissive=permissive,
                               compare_with=[os.path.abspath(d) for d in compare_with],
                               committed_offset=committed_offset, tier=tier,
                               start_offset=start_offset,
                               cache_dir=None if no_cache or not tier else os.path.abspath(
                                   cache_dir or os.path.join(out_dir, "row-cache")),
                               use_cache=not full, plan=plan)
    except Exception as exc:  # any failure exits 2, never 1 (which is a verdict)
        click.echo(f"error: the audit could not run: {failure_message(exc)}", err=True)
        sys.exit(2)
    bad = {name: n for name, n in violations.items() if n}
    for name, n in violations.items():
        click.echo(f"{'VIOLATED' if n else 'ok':>8}  {name}" + (f" ({n} rows)" if n else ""))
    if bad:
        sys.exit(1)
