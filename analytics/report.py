"""The `metakraft audit` report: every audit and invariant.

`run_audit(spark, log_dir, out_dir, progress)` loads the log once (cached), runs the
audit functions and the invariant checks, writes `report.md` (with its PNG plots),
`report.html` (one file, plots embedded) and `summary.json` into `out_dir`, and
returns the violation counts (the CLI exits 1 if any is non-zero). Only small
results are collected to the driver: tables are cut to `max_rows` and the plots are
drawn from aggregates.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import analytics
from analytics import audit, report_plots, row_cache, states_cache
from analytics.invariants import INVARIANTS, USES_STATES, first_divergence
from analytics.parts import Parts
from analytics.reader import FileSlice, plan_read
from analytics.report_plots import PLOT_INTERVALS
from analytics.report_render import (
    Block,
    Bullets,
    Heading,
    Plot,
    Table,
    Text,
    cell_text,
    write_report,
)
from analytics.schema import CORRUPT_COLUMN, ddl_schema
from analytics.tier_chain import tier_chain_section

Progress = Callable[[str], None]
MEMORY_AND_DISK = StorageLevel.MEMORY_AND_DISK

SECTIONS: tuple[tuple[str, Callable[..., DataFrame]], ...] = (
    ("Topic lifecycle", audit.topic_lifecycle),
    ("Broker timeline", audit.broker_timeline),
    ("Fencing intervals", audit.fencing_intervals),
    ("Leader churn per broker", audit.leader_churn_per_broker),
    ("Leader churn per partition", audit.leader_churn_per_partition),
    (ISR_TITLE := "ISR incidents (per broker, overlapping outages grouped)",
     audit.isr_incidents),
    ("Reassignments", audit.reassignments),
    ("Config history", audit.config_history),
    ("Elections per controller epoch", audit.elections_per_epoch),
    (QUORUM_TITLE := "Quorum membership (voter set changes)", audit.voter_changes),
    (ACL_TITLE := "ACL changes (bindings created and deleted)", audit.acl_changes),
    ("Unclean elections", audit.unclean_elections),
    (ELR_TITLE := "Eligible leader replicas (KIP-966)", audit.eligible_leader_replicas),
)
# The sections that start from `audit.partition_states` (given it precomputed).
SECTIONS_USING_STATES = frozenset({
    audit.leader_churn_per_broker, audit.leader_churn_per_partition, audit.isr_incidents,
    audit.reassignments, audit.elections_per_epoch, audit.eligible_leader_replicas})
PLOTTED = frozenset({"Leader churn per broker", "Fencing intervals"})
# Sections counted by a column's values for the report's head (over every row, not
# the rows shown).
BREAKDOWN = {"Fencing intervals": "cause", ISR_TITLE: "outcome", "Reassignments": "outcome",
             ELR_TITLE: "elected_from_elr", QUORUM_TITLE: "change", ACL_TITLE: "change"}
# In a permissive audit, the verdict on the log's damage (rows: the damaged places).
DAMAGE_CHECK = "log_readable"
# With logs to compare with, the verdict on the replicas (rows: one per log at the first
# offset where they differ).
REPLICA_CHECK = "replicas_agree"
# With a tier, the verdict on its hash chain against the log's record of it (rows:
# the findings, see `analytics.tier_chain`).
TIER_CHECK = "tier_chain"
# A verdict beside the invariants: its name, and what runs it and returns the number
# of rows at fault and its report section.
ExtraCheck = tuple[str, Callable[[], tuple[int, list[Block]]]]
# Sections and checks run at once (see `_report`); their Spark jobs share the cores.
CONCURRENT_QUERIES = 4
# `spark.sql.files.openCostInBytes` in audit sessions (see `session_conf`): Spark's
# default `spark.sql.files.maxPartitionBytes`.
FILE_OPEN_COST_BYTES = 128 * 1024 * 1024
# A log of fewer bytes is small (about 350,000 records): its audit's driver JVM spends
# most of its CPU compiling Spark's own code for ~80 short queries (a 121-record audit:
# 89-95 CPU-s), so it compiles with C1 only and collects with the serial collector
# (59-69 CPU-s, and a little faster); at 1M records (45 MB) the two settings were
# even, so larger logs keep C2's faster code (docs/benchmarks.md, "The test suite").
SMALL_LOG_BYTES = 16 * 1024 * 1024
SMALL_LOG_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def session_conf(master: str, driver_memory: str | None = None,
                 extra: Mapping[str, str] | None = None,
                 log_bytes: int | None = None) -> dict[str, str]:
    """The Spark settings an audit session starts with on `master`, for a log of
    `log_bytes` (None: not known).

    Local masters (`local`, `local[N]`, `local[*]`) also get: 2 shuffle partitions
    per core (enough to balance, few enough that the per-task cost stays small;
    Spark's default of 200 is made for clusters), and the driver JVM, which then
    does all the work, runs the parallel garbage collector (throughput over pause
    times: the 10M-record bench's full audit ran ~8% faster than with G1, see
    docs/benchmarks.md). Other masters keep the cluster's own settings. `extra`
    (`metakraft audit --conf KEY=VALUE`) is applied last: the operator's word wins.

    A small log (`SMALL_LOG_BYTES`), on any master: the driver JVM runs
    `SMALL_LOG_JAVA_OPTIONS` instead (its work is planning short queries).

    Every master: a file costs as much to open as a whole partition holds
    (`spark.sql.files.openCostInBytes` = `maxPartitionBytes`'s default), so each
    row-cache file (`analytics.row_cache`, a few MiB) is a partition of its own, as
    the piece was when decoded. Packed by Spark's default, 55 files of the 10M-record
    bench made 3 partitions: sorting and caching them took as long as decoding.
    """
    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.files.openCostInBytes": str(FILE_OPEN_COST_BYTES)}
    if driver_memory:
        conf["spark.driver.memory"] = driver_memory
    found = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if found is not None:
        cores = found.group(1)  # plain "local" is one thread
        n = 1 if cores is None else (os.cpu_count() or 1) if cores == "*" else int(cores)
        conf["spark.sql.shuffle.partitions"] = str(max(2, 2 * n))
        conf["spark.driver.extraJavaOptions"] = "-XX:+UseParallelGC"
    if log_bytes is not None and log_bytes < SMALL_LOG_BYTES:
        conf["spark.driver.extraJavaOptions"] = SMALL_LOG_JAVA_OPTIONS
    conf.update(extra or {})
    return conf


def audit_session(master: str, app_name: str = "metakraft-audit",
                  driver_memory: str | None = None,
                  extra: Mapping[str, str] | None = None,
                  jvm_log: Path | None = None,
                  log_bytes: int | None = None) -> SparkSession:
    """A SparkSession with `session_conf(master, driver_memory, extra, log_bytes)`. The JVM
    settings hold only if this starts the JVM (the first session of the process);
    so does `jvm_log`: the file the JVM (and the Python workers it starts) write
    their own output to, its warnings and launch banners, instead of the terminal."""
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_conf(master, driver_memory, extra, log_bytes).items():
        builder = builder.config(key, value)
    with contextlib.ExitStack() as stack:
        if jvm_log is not None:
            stack.enter_context(_stderr_to(jvm_log))
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """File descriptor 2 points at `path` while the block runs: a process started in
    it (the JVM) keeps it as its stderr; ours is given back after."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def _table(rows: Sequence[Any], columns: Sequence[str], total: int | None = None) -> Table:
    shown = tuple(tuple(r[c] for c in columns) for r in rows)
    return Table(tuple(columns), shown, max(0, (total or len(rows)) - len(rows)))


def run_audit(spark: SparkSession, log_dir: str | None, out_dir: str | Path,
              progress: Progress = print, *, max_rows: int = 200,
              snapshots: bool = False, permissive: bool = False,
              compare_with: Sequence[str] = (),
              committed_offset: int | None = None, tier: str | None = None,
              start_offset: int = 0, cache_dir: str | Path | None = None,
              use_cache: bool = True, plan: Sequence[FileSlice] | None = None
              ) -> dict[str, int]:
    """Run everything, write the report into `out_dir`; return violations per check.

    The log is decoded once into Parquet files (`row_cache.decode`: the row cache's
    for tier objects, a scratch folder in `out_dir` for the rest, removed at the
    end), and the partition states (what most sections and three invariants start
    from) are derived once and persisted (those kept by a checkpoint are read from
    their files: `analytics.parts`); every section and check then runs off those.

    Damage in the log (a bad CRC, a torn batch, an unreadable record) stops the
    audit with `MetakraftCorruptLogError` naming the file and offset. `permissive`
    audits what is readable instead: the damage is listed in the report and counted
    under `DAMAGE_CHECK` (the rest of a damaged file is not read, so the findings
    may miss what it held).

    `compare_with`: other controllers' log directories, compared with `log_dir` by
    `invariants.first_divergence` up to `committed_offset` (default: the shortest
    log's end) under the verdict `REPLICA_CHECK`.

    `start_offset` > 0 audits a window: the log from that offset, which must be where a
    snapshot ends (`window_start`), seeded with that snapshot's records as if they
    were one batch at `start_offset - 1` (what existed then shows as created there),
    so the partition states and every invariant start from the true state. Only the
    tier objects and byte ranges holding the window are read.

    `cache_dir`: the row cache (`report_rows`): a re-audit decodes only the tier
    pieces it has not seen and the local log, and (`analytics.states_cache`, not for
    windows, permissive or snapshot reads) derives partition states only after the
    latest checkpoint kept there; `use_cache=False` decodes and derives all (and
    refreshes the cache). The report is the same either way.

    `plan`: `plan_read(log_dir, tier, snapshots=..., start=start_offset, seed=...)` if
    the caller made it already (`metakraft audit` does, to size the log): not listed
    again.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with _scratch_folder(out) as scratch:
        started = time.monotonic()
        last = [started]

        def step(message: str) -> None:
            # Reported when the step is done, with its own duration.
            now = time.monotonic()
            progress(f"{message}: {now - last[0]:.1f} s")
            last[0] = now

        label = " + ".join(f"`{s}`" for s in (tier, log_dir) if s)
        if start_offset:
            label += (f", from offset {start_offset} (the state at offset {start_offset - 1}: "
                      "a snapshot's records, shown as created there)")
        progress(f"reading {label}")
        keep_states = cache_dir is not None and not (start_offset or permissive or snapshots)
        if keep_states:
            # Listed once, for the row cache and the states' boundaries alike.
            plan = list(plan) if plan is not None else plan_read(log_dir, tier)
        # The rows are decoded once, into Parquet files every query reads (the row
        # cache's and this audit's scratch ones), names not resolved: the functions
        # that show topic names join them to their (few) result rows, so no scan of
        # the whole log goes through the name join.
        rows = report_row_parts(
            spark, log_dir, snapshots=snapshots, permissive=permissive, tier=tier,
            start_offset=start_offset, cache_dir=cache_dir, use_cache=use_cache,
            progress=progress, plan=plan, scratch=scratch).joined()
        raw = rows
        extra: list[ExtraCheck] = []
        if permissive:
            # Damage rows carry no record: the audit runs on the others.
            raw = rows.where(F.col(CORRUPT_COLUMN).isNull()).drop(CORRUPT_COLUMN)
            damage = rows.where(F.col(CORRUPT_COLUMN).isNotNull())
            extra.append((DAMAGE_CHECK, lambda: _damage_section(damage)))
        if tier:
            extra.append((TIER_CHECK, lambda: tier_chain_section(
                raw, tier, complete=log_dir is not None, max_rows=max_rows)))
        if compare_with:
            assert log_dir, "the replica check compares local log directories"
            logs = [log_dir, *compare_with]
            extra.append((REPLICA_CHECK,
                          lambda: _replica_section(spark, logs, committed_offset, max_rows)))
        states_folder = None
        if keep_states:
            assert cache_dir is not None
            rows_folder = row_cache.mode_dir(Path(cache_dir).resolve(), permissive=False,
                                             change_json=False)
            # `report_row_parts` made the folder if it could write there (and said so
            # if not).
            if rows_folder.is_dir():
                states_folder = states_cache.folder_of(rows_folder)
        names = audit.topic_names(raw).persist(MEMORY_AND_DISK)
        bounds = states_cache.boundaries(plan or ()) if states_folder is not None else []
        hit = (states_cache.find(states_folder, bounds)
               if states_folder is not None and use_cache else None)
        state_parts, index, checkpoint = states_cache.derive(spark, raw, names, hit)
        kept_to: states_cache.Boundary | None = None
        # Persisted without topic ids and names (see `indexed_partition_states`); the
        # states kept before the hit's boundary are read as they are (`analytics.parts`).
        (indexed, derived), index = state_parts.held(), index.persist(MEMORY_AND_DISK)
        try:
            stats = raw.agg(F.count("*"), F.max("offset"), F.max("epoch"),
                            F.max("append_time"), F.min("offset"),
                            F.min(F.when(audit.has_real_time(), F.col("append_time")))).first()
            assert stats is not None
            index.count()
            step(f"{stats[0]} records read")
            indexed.count()
            step("partition states derived" if hit is None else
                 f"partition states derived from offset {hit.boundary.end_offset} (kept "
                 f"before it: {len(hit.chunks)} chunks and the last state of each partition)")
            if states_folder is not None:
                try:
                    kept_to = states_cache.store(states_folder, bounds, hit, indexed, checkpoint)
                except states_cache.NotKeptError as exc:
                    step(f"partition states not kept in {states_folder} ({exc}): the next audit "
                         "derives them again")
                else:
                    if kept_to is not None:
                        step(f"partition states kept up to offset {kept_to.end_offset} for the "
                             f"next audit ({states_folder})")
            states = audit.name_partition_states(indexed, index)
            return _report(raw, states, extra, out, label, stats, progress, max_rows, started)
        finally:
            for cached in (derived, index, names):
                if cached is not None:
                    cached.unpersist()
            if states_folder is not None and kept_to is not None:
                states_cache.prune(states_folder, kept_to)


SCRATCH_PREFIX = ".audit-rows-"


@contextlib.contextmanager
def _scratch_folder(out: Path) -> Iterator[Path]:
    """A folder in `out` for the rows this audit decodes (`row_cache.decode`), removed
    when it is done; one a crashed audit left there is removed by the next."""
    for stale in out.glob(f"{SCRATCH_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=out))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# Source columns no section or check reads: not cached.
UNUSED_COLUMNS = ("version", "is_control")


def report_rows(spark: SparkSession, log_dir: str | None, *, snapshots: bool = False,
                permissive: bool = False, tier: str | None = None,
                start_offset: int = 0, cache_dir: str | Path | None = None,
                use_cache: bool = True, progress: Progress | None = None,
                plan: Sequence[FileSlice] | None = None) -> DataFrame:
    """The rows as the report reads them: the source read without PartitionChange
    JSON (`partitionChangeJson=False`) and without the columns in `UNUSED_COLUMNS`
    (`report_row_parts(...).joined()`: nothing persisted)."""
    return report_row_parts(spark, log_dir, snapshots=snapshots, permissive=permissive,
                            tier=tier, start_offset=start_offset, cache_dir=cache_dir,
                            use_cache=use_cache, progress=progress, plan=plan).joined()


def report_row_parts(spark: SparkSession, log_dir: str | None, *, snapshots: bool = False,
                     permissive: bool = False, tier: str | None = None,
                     start_offset: int = 0, cache_dir: str | Path | None = None,
                     use_cache: bool = True, progress: Progress | None = None,
                     plan: Sequence[FileSlice] | None = None,
                     scratch: Path | None = None) -> Parts:
    """The report's rows: `new` decoded by the source (every piece not in the row
    cache, grouped by record type within each Spark partition), `kept` the row
    cache's Parquet files.

    PartitionChange records are most of a busy log and their JSON most of its bytes,
    and no section or check reads it (their fields are the typed partition columns);
    every other record keeps its JSON. Not building it saves reader time, and every
    byte and column left out saves the time of building the rows.

    With `cache_dir` (`analytics.row_cache`): the tier pieces whose rows the cache
    holds are read from its Parquet files, the others decoded (and their rows
    stored there); `use_cache=False` (`--full`) decodes every piece and stores them
    all afresh. A whole-history read also drops the files of pieces it no longer
    reads (objects the tier deleted).

    With `scratch` (a folder the caller removes when done): the pieces are decoded
    now (`row_cache.decode`: one Spark job) into Parquet files, in the cache or in
    `scratch`, and every row is `kept`: nothing to persist. Without it the rows are
    decoded lazily by the `metakraft` data source.
    """
    options: dict[str, str | int | bool] = {} if not tier else {"tier": tier}
    if start_offset:
        options.update(startOffset=start_offset, seed=True)
    mode = "permissive" if permissive else "failfast"
    folder = None if cache_dir is None else row_cache.mode_dir(
        Path(cache_dir).resolve(), permissive=permissive, change_json=False)
    if folder is not None and (unusable := row_cache.problem(folder)) is not None:
        if progress is not None:
            progress(f"row cache {folder}: cannot be written ({unusable}): every piece "
                     "is decoded and nothing is cached")
        folder = None
    # Planned once here: the source leaves out exactly the pieces read from the
    # cache (and refuses if its own plan no longer holds them).
    pieces = ([] if folder is None and scratch is None else list(plan) if plan is not None
              else plan_read(log_dir, tier, snapshots=snapshots, start=start_offset,
                             seed=bool(start_offset)))
    cached_files: tuple[str, ...] = ()
    to_read = tuple(pieces)
    if folder is not None:
        split = row_cache.split(pieces, folder, use=use_cache)
        if not start_offset:
            row_cache.prune(folder, filter(None, map(row_cache.piece_key, pieces)))
        cached_files, to_read = split.cached_files, split.to_read
        options.update(cacheDir=str(folder), cachedPieces=",".join(sorted(split.cached_keys)))
        if progress is not None:
            progress(f"row cache {folder}: {len(cached_files)} of {len(pieces)} pieces "
                     f"cached, {len(to_read)} to decode"
                     + ("" if use_cache else " (--full: the cache is not read)"))

    def finish(rows: DataFrame) -> DataFrame:
        rows = rows.drop(*UNUSED_COLUMNS)
        if start_offset:
            # The seed snapshot's rows (at start_offset - 1) count as log rows
            # (`audit.SEED`): the window starts from the state they hold (as
            # `analytics.state.as_of` does).
            rows = rows.withColumn("source", F.when(F.col("source") == "snapshot", audit.SEED)
                                   .otherwise(F.col("source")))
        return rows

    def parquet(files: Sequence[str]) -> DataFrame:
        if not files:  # (an empty log: Spark's reader wants at least one path)
            return finish(spark.createDataFrame([], ddl_schema(permissive)))
        return finish(spark.read.schema(ddl_schema(permissive)).parquet(*files))

    if scratch is not None:
        decoded = row_cache.decode(spark, to_read, permissive=permissive, folder=folder,
                                   scratch=scratch)
        return Parts(None, parquet(cached_files + decoded))
    source = None
    if to_read or folder is None:
        # Grouped by record type within each Spark partition: a persisted copy keeps
        # min/max per column per batch of rows, so a filter on a type spread thinly
        # over the log (broker changes, configs, leader changes) skips the batches of
        # the others instead of scanning the whole log. One noisy A/B at 10M records:
        # without the sort the four sections filtering on such types took ~15 CPU-s
        # more; the sort costs ~8.
        source = finish(analytics.read_log(
            spark, log_dir, snapshots=snapshots, mode=mode, partitionChangeJson=False,
            **options)).sortWithinPartitions("record_type")
    return Parts(source, parquet(cached_files) if cached_files else None)


def _damage_section(damage: DataFrame) -> tuple[int, list[Block]]:
    # At most one damaged place per file: reading a file stops at its damage.
    damaged = damage.orderBy("file").collect()
    if not damaged:
        return 0, [Heading("Damage"), Text("None: every file was read to its end.")]
    return len(damaged), [
        Heading("Damage"),
        Text(f"**Damaged places: {len(damaged)}.** Each file was read up to its damage and "
             "no further: the records after it are missing from everything below."),
        Bullets(tuple(f"offset {r['offset']}: {r[CORRUPT_COLUMN]}" for r in damaged))]


def _replica_section(spark: SparkSession, logs: list[str], committed_offset: int | None,
                     max_rows: int) -> tuple[int, list[Block]]:
    differ = first_divergence(spark, logs, committed_offset)
    rows = differ.limit(max_rows).collect()
    upto = ("the shortest log's end" if committed_offset is None
            else f"the committed offset {committed_offset}")
    named = ", ".join(f"`{d}`" for d in logs)
    if not rows:
        return 0, [Heading("Replica agreement"),
                   Text(f"The {len(logs)} logs ({named}) agree at every offset up to {upto}.")]
    return len(rows), [
        Heading("Replica agreement"),
        Text(f"**The logs differ at offset {rows[0]['offset']}** (compared up to {upto}); "
             "replica 0 is the audited log:"), _table(rows, differ.columns)]


def _kinds(counts: dict[Any, int], first: str) -> str:
    """"N (a initial, b added, ...)" from a breakdown, `first` listed first."""
    total = sum(counts.values())
    if not total:
        return "0"
    order = sorted(counts, key=lambda k: (k != first, str(k)))
    return f"{total} (" + ", ".join(f"{counts[k]} {k}" for k in order) + ")"


def _report(raw: DataFrame, states: DataFrame, extra: list[ExtraCheck], out: Path,
            log_dir: str, stats: Any, progress: Progress, max_rows: int,
            started: float) -> dict[str, int]:
    total, last_offset, last_epoch, last_time, first_offset, first_time = stats

    def section(title: str, fn: Callable[..., DataFrame]
                ) -> tuple[list[str], list[Any], int, dict[Any, int]]:
        t = time.monotonic()
        result = fn(raw, states) if fn in SECTIONS_USING_STATES else fn(raw)
        # The plotted sections are collected once, for the table and the plot.
        limit = max(max_rows, PLOT_INTERVALS + 1) if title in PLOTTED else max_rows + 1
        rows = result.limit(limit).collect()
        # Fewer rows than asked for: all of them. Else one more query counts them (by the
        # breakdown's column when there is one: the same query gives the total).
        whole = len(rows) < limit
        by: dict[Any, int] = {}
        if title in BREAKDOWN:
            column = BREAKDOWN[title]
            by = (dict(Counter(r[column] for r in rows)) if whole else
                  {r[column]: r["count"] for r in result.groupBy(column).count().collect()})
            count = sum(by.values())
        else:
            count = len(rows) if whole else result.count()
        progress(f"audit: {title}: {time.monotonic() - t:.1f} s")
        return result.columns, rows, count, by

    def check(name: str, fn: Callable[..., DataFrame]) -> tuple[list[str], list[Any], int]:
        t = time.monotonic()
        bad = fn(raw, states) if name in USES_STATES else fn(raw)
        rows = bad.limit(max_rows).collect()
        count = bad.count() if len(rows) == max_rows else len(rows)
        progress(f"invariant: {name}: {time.monotonic() - t:.1f} s")
        return bad.columns, rows, count

    def extra_check(name: str, run: Callable[[], tuple[int, list[Block]]]
                    ) -> tuple[int, list[Block]]:
        t = time.monotonic()
        result = run()
        progress(f"check: {name}: {time.monotonic() - t:.1f} s")
        return result

    # Each section and check is a chain of small Spark jobs (planning, a broadcast, a
    # sort's sampling, stages of one task) that alone keeps about half a core busy;
    # run a few at once so the cores are. Results are assembled in the usual order.
    with ThreadPoolExecutor(CONCURRENT_QUERIES, thread_name_prefix="audit") as pool:
        section_futures = [(title, pool.submit(section, title, fn)) for title, fn in SECTIONS]
        check_futures = [(name, pool.submit(check, name, fn)) for name, fn in INVARIANTS.items()]
        span_s = (last_time - first_time).total_seconds() if last_time and first_time else 0.0
        bucket, bucket_s, _ = report_plots.bucket_for(span_s)
        per_type = pool.submit(lambda: audit.records_per_type(raw, bucket).collect())
        extra_futures = [(name, pool.submit(extra_check, name, run)) for name, run in extra]
        body: list[Block] = []
        collected: dict[str, list[Any]] = {}
        counts: dict[str, int] = {}
        kinds: dict[str, dict[Any, int]] = {}
        for title, future in section_futures:
            columns, rows, count, kinds[title] = future.result()
            collected[title], counts[title] = rows, count
            body += [Heading(title), _table(rows[:max_rows], columns, count)]
        violations: dict[str, int] = {}
        verdicts: list[tuple[str, str]] = []
        failures: list[Block] = []
        for name, cfuture in check_futures:
            columns, rows, count = cfuture.result()
            violations[name] = count
            verdicts.append((name, "OK" if count == 0 else f"VIOLATED ({count} rows)"))
            if count:
                failures += [Heading(f"{name}: **{count} violating rows**", 3),
                             _table(rows, columns, count)]
        # One compact table of every check, then the rows at fault of the failing ones.
        details: list[Block] = [Table(("check", "verdict"), tuple(verdicts)), *failures]
        per_type_rows = per_type.result()
        extra_parts: list[Block] = []
        for name, efuture in extra_futures:
            violations[name], part = efuture.result()
            extra_parts += part
    t = time.monotonic()
    plots: list[Plot | None] = [
        report_plots.records_per_type(per_type_rows, bucket_s, out),
        report_plots.leader_changes(collected["Leader churn per broker"], out),
        report_plots.fencing_timeline(collected["Fencing intervals"], last_time, out),
        report_plots.violations(violations, out)]
    progress(f"plots: {time.monotonic() - t:.1f} s")
    failed = sorted(name for name, n in violations.items() if n)
    verdict = (f"**{len(failed)} of {len(violations)} checks failed**: {', '.join(failed)}"
               if failed else f"All {len(violations)} checks pass.")
    reassigned = kinds["Reassignments"]
    fencing, incidents = kinds["Fencing intervals"], kinds[ISR_TITLE]
    head: list[Block] = [
        Heading("metakraft audit report", 1),
        Bullets((
            f"log: {log_dir}",
            f"offsets {first_offset} to {last_offset} ({total} records); highest Raft "
            f"epoch {last_epoch}",
            f"time {cell_text(first_time)} to {cell_text(last_time)} UTC ({span_s:.0f} s)",
            f"reassignments: {counts['Reassignments']} ("
            + ", ".join(f"{k} {reassigned.get(k, 0)}"
                        for k in ("completed", "cancelled", "replaced", "ongoing")) + ")",
            f"brokers fenced: {fencing.get('fenced', 0)} by an expired session, "
            f"{fencing.get('controlled_shutdown', 0)} after a controlled shutdown "
            f"({fencing.get('registered', 0)} start-ups, fenced until caught up)",
            f"ISR incidents: {counts[ISR_TITLE]} ({incidents.get('recovered', 0)} recovered, "
            f"{incidents.get('stopped', 0)} stopped with their broker, "
            f"{incidents.get('open', 0)} open); unclean elections: "
            f"{counts['Unclean elections']}; ELR changes: {counts[ELR_TITLE]} "
            f"({kinds[ELR_TITLE].get(True, 0)} elections from the ELR)",
            f"controller epochs: {counts['Elections per controller epoch']}; voter set "
            f"changes: {_kinds(kinds[QUORUM_TITLE], 'initial')} (a static quorum, with its "
            "voters in the controllers' configs, has none)",
            f"ACL bindings: {kinds[ACL_TITLE].get('created', 0)} created, "
            f"{kinds[ACL_TITLE].get('deleted', 0)} deleted (denied requests are in the "
            "controllers' own logs, event=access_denied, not in the metadata log)",
            f"audit time: {time.monotonic() - started:.1f} s")),
        Text(verdict),
        Heading("Plots"),
        *[p for p in plots if p is not None],
        *extra_parts,
        Heading("Invariants"),
        *details,
    ]
    summary = {
        "log": log_dir.replace("`", ""), "records": total, "first_offset": first_offset,
        "last_offset": last_offset, "first_time": first_time, "last_time": last_time,
        "highest_epoch": last_epoch, "checks": violations, "failed_checks": failed,
        "sections": {title: counts[title] for title, _ in SECTIONS},
        "reassignment_outcomes": {
            k: reassigned.get(k, 0) for k in ("completed", "cancelled", "replaced", "ongoing")},
        "fencing_causes": {k: fencing.get(k, 0)
                           for k in ("fenced", "controlled_shutdown", "registered")},
        "isr_incident_outcomes": {k: incidents.get(k, 0)
                                  for k in ("recovered", "stopped", "open")},
        "voter_changes": dict(kinds[QUORUM_TITLE]),
        "acl_changes": {k: kinds[ACL_TITLE].get(k, 0) for k in ("created", "deleted")},
    }
    write_report(out, head + body, summary)
    progress(f"report written to {out / 'report.html'} (also report.md, summary.json)")
    return violations
