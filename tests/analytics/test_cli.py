"""`metakraft audit`: registered, starts without importing pyspark, and its verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from controller.cli.admin_output import human_bytes
from controller.cli.main import cli
from controller.records import BrokerIdList, PartitionChangeRecord
from tests.analytics.history import Known
from tests.analytics.plant import copy_log, damage_crc, plant, record_count


def test_audit_is_registered_and_cli_import_does_not_load_spark() -> None:
    code = ("import sys; import controller.cli.main; "
            "sys.exit(1 if any(m.startswith('pyspark') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    result = CliRunner().invoke(cli, ["audit", "--help"])
    assert result.exit_code == 0 and "--log-dir" in result.output and "--master" in result.output


def test_a_directory_without_a_log_is_refused_before_spark_starts(tmp_path: Path) -> None:
    # The layout `metakraft dev` leaves: DATA_DIR/controller-N/{config.toml,data/metadata/}.
    process_dir = tmp_path / "controller-3000"
    (process_dir / "data" / "metadata").mkdir(parents=True)
    (process_dir / "config.toml").write_text("")
    result = CliRunner().invoke(cli, ["audit", "--log-dir", str(process_dir),
                                      "--out", str(tmp_path / "report")])
    assert result.exit_code == 2, result.output
    assert "no segment files" in result.output
    assert f"a log directory below it: {process_dir / 'data'}" in result.output
    assert "starting Spark" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "report").exists()


def test_without_the_analytics_extra_the_audit_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyspark" else real(name, *a))
    result = CliRunner().invoke(cli, ["audit", "--log-dir", str(tmp_path),
                                      "--out", str(tmp_path / "report")])
    assert result.exit_code == 2, result.output
    assert "pip install 'metakraft[analytics]' (missing: pyspark)" in result.output
    assert "starting Spark" not in result.output


def test_session_conf_tunes_local_masters_and_leaves_clusters_alone() -> None:
    from analytics.report import session_conf

    local = session_conf("local[3]", "6g")
    assert local["spark.sql.shuffle.partitions"] == "6"
    assert local["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC"
    assert local["spark.driver.memory"] == "6g"
    assert session_conf("local")["spark.sql.shuffle.partitions"] == "2"
    cluster = session_conf("spark://10.0.0.5:7077")
    assert "spark.sql.shuffle.partitions" not in cluster
    assert "spark.driver.extraJavaOptions" not in cluster
    assert "spark.driver.memory" not in cluster
    assert cluster["spark.sql.session.timeZone"] == "UTC"
    # One partition per row-cache file, on every master.
    assert local["spark.sql.files.openCostInBytes"] == str(128 * 2**20)
    assert cluster["spark.sql.files.openCostInBytes"] == str(128 * 2**20)
    # --conf: applied last, over the audit's own settings.
    tuned = session_conf("local[2]", None, {"spark.sql.shuffle.partitions": "16",
                                            "spark.executor.memory": "2g"})
    assert tuned["spark.sql.shuffle.partitions"] == "16"
    assert tuned["spark.executor.memory"] == "2g"
    assert tuned["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC"


def test_a_small_logs_driver_runs_short_query_settings_unless_told_otherwise(
        log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    """Below SMALL_LOG_BYTES the driver JVM compiles with C1 only, on any master; at
    and above it, or with the size unknown, the usual settings; --conf still wins.
    The size is what the plan reads: the test log's segment files."""
    from analytics.reader import plan_read, planned_bytes
    from analytics.report import SMALL_LOG_BYTES, SMALL_LOG_JAVA_OPTIONS, session_conf

    segments = list((log_dir[0] / "metadata").glob("*.log"))
    assert segments
    size = planned_bytes(plan_read(str(log_dir[0]), None))
    assert size == sum(p.stat().st_size for p in segments) and 0 < size < SMALL_LOG_BYTES
    java = "spark.driver.extraJavaOptions"
    assert session_conf("local[2]", log_bytes=size)[java] == SMALL_LOG_JAVA_OPTIONS
    assert session_conf("spark://h:7077", log_bytes=size)[java] == SMALL_LOG_JAVA_OPTIONS
    assert session_conf("local[2]", log_bytes=SMALL_LOG_BYTES)[java] == "-XX:+UseParallelGC"
    assert java not in session_conf("spark://h:7077", log_bytes=SMALL_LOG_BYTES)
    assert session_conf("local[2]")[java] == "-XX:+UseParallelGC"
    assert session_conf("local[2]", None, {java: "-Xss4m"}, log_bytes=size)[java] == "-Xss4m"


@pytest.mark.parametrize("bad", ["spark.sql.shuffle.partitions", "shuffle.partitions=4",
                                 "=4"])
def test_a_malformed_conf_is_refused_before_spark_starts(log_dir: tuple[Path, Known],
                                                         tmp_path: Path, bad: str) -> None:
    result = CliRunner().invoke(cli, ["audit", "--log-dir", str(log_dir[0]), "--out",
                                      str(tmp_path / "report"), "--conf", bad])
    assert result.exit_code == 2, result.output
    assert "expected KEY=VALUE with a Spark key" in result.output
    assert "starting Spark" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "report").exists()


@pytest.mark.spark
def test_audit_command_as_its_own_process(log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    """The installed `metakraft audit`, started as operators start it: its own JVM with
    the session settings of `session_conf` (the in-process tests reuse the test
    session), on the clean test log: every invariant holds, exit 0."""
    from analytics.invariants import INVARIANTS

    out = tmp_path / "report"
    metakraft = Path(sys.executable).parent / "metakraft"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run(
        [str(metakraft), "audit", "--log-dir", str(log_dir[0]), "--out", str(out),
         "--master", "local[1]", "--driver-memory", "1g"],
        capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    size = human_bytes(sum(p.stat().st_size for p in (log_dir[0] / "metadata").glob("*.log")))
    assert (f"starting Spark (local[1]) for {size} of log (small: its driver compiles with "
            "C1 only)") in done.stderr
    # Quiet: the JVM's own output went to spark.log beside the report, not here.
    assert "log4j" not in done.stderr and "WARN" not in done.stderr, done.stderr
    assert "log4j" in (out / "spark.log").read_text()
    assert all(line.startswith("[") for line in done.stderr.splitlines()), done.stderr
    assert "VIOLATED" not in done.stdout
    assert done.stdout.split() == [w for name in INVARIANTS for w in ("ok", name)]
    report = (out / "report.md").read_text()
    assert "violating rows" not in report and "## Topic lifecycle" in report
    # Beside the Markdown: one HTML file with the plots inside, and a JSON summary.
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3 and "<table>" in page
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed_checks"] == [] and set(summary["checks"]) == set(INVARIANTS)
    assert summary["reassignment_outcomes"] == {
        "completed": 2, "cancelled": 1, "replaced": 0, "ongoing": 0}
    assert summary["first_offset"] == 0 and summary["records"] > 0
    # All checks pass: said in words, not drawn as a chart of zeros.
    assert f"All {len(INVARIANTS)} checks pass." in report
    assert not (out / "invariant_violations.png").exists()


@pytest.mark.spark
def test_audit_report_and_exit_1_on_violation(spark: Any, log_dir: tuple[Path, Known],
                                              tmp_path: Path) -> None:
    copy = copy_log(log_dir[0], tmp_path / "log")
    plant(copy, [PartitionChangeRecord(topic_id=log_dir[1].topic_ids["orders"],
                                       partition_id=0, leader=0)])
    out = tmp_path / "report"
    # In-process: the command's getOrCreate returns the test session (one JVM per run).
    result = CliRunner().invoke(cli, ["audit", "--log-dir", str(copy), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "invariant: leader_in_isr_subset_replicas" in result.output  # progress
    report = (out / "report.md").read_text()
    assert "leader_in_isr_subset_replicas: **1 violating rows**" in report
    assert report.count("violating rows") == 1
    assert {p.name for p in out.glob("*.png")} == {
        "records_per_type.png", "leader_changes_per_broker.png",
        "broker_fencing_timeline.png", "invariant_violations.png"}
    assert "VIOLATED  leader_in_isr_subset_replicas" in result.output
    assert not list(out.glob(".audit-rows-*"))  # the rows' scratch folder is gone


@pytest.mark.spark
def test_a_damaged_log_stops_the_audit_with_exit_2_naming_the_place(
        spark: Any, log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    """Exit 1 is a verdict on the metadata; a log the audit cannot read is not one."""
    copy = copy_log(log_dir[0], tmp_path / "log")
    seg, offset = damage_crc(copy)
    out = tmp_path / "report"
    # A scratch folder of rows a crashed audit left: removed by the next audit, whose
    # own is removed too when it stops.
    (out / ".audit-rows-crashed").mkdir(parents=True)
    (out / ".audit-rows-crashed" / "000000.parquet").write_bytes(b"PAR1")
    result = CliRunner().invoke(cli, ["audit", "--log-dir", str(copy), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert not list(out.glob(".audit-rows-*"))
    [error] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert error.startswith(f"error: the audit could not run: the log cannot be read: {seg}: "
                            f"corrupt batch at offset {offset}, byte position 0: CRC"), error
    assert "--permissive audits what is readable" in result.output
    assert "Traceback" not in result.output and "VIOLATED" not in result.output
    assert not (out / "report.md").exists()


@pytest.mark.spark
def test_permissive_audit_lists_the_damage_and_audits_the_rest(
        spark: Any, log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    from analytics.reader import plan_files, read_file
    from analytics.report import DAMAGE_CHECK

    copy = copy_log(log_dir[0], tmp_path / "log")
    seg, offset = damage_crc(copy)
    readable = sum(b.column("_corrupt").null_count
                   for piece in plan_files(str(copy)) for b in read_file(piece, permissive=True))
    assert 0 < readable < record_count(log_dir[0])
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["audit", "--log-dir", str(copy), "--out", str(out),
                                      "--permissive"])
    assert result.exit_code == 1, result.output
    assert f"VIOLATED  {DAMAGE_CHECK} (1 rows)" in result.output
    report = (out / "report.md").read_text()
    assert f"({readable} records)" in report
    assert "**Damaged places: 1.**" in report
    assert f"- offset {offset}: {seg}: corrupt batch at offset {offset}" in report


@pytest.mark.spark
def test_compare_with_finds_where_a_replica_log_differs(spark: Any, log_dir: tuple[Path, Known],
                                                        tmp_path: Path) -> None:
    from analytics.report import REPLICA_CHECK

    other = copy_log(log_dir[0], tmp_path / "other")
    tail = plant(other, [PartitionChangeRecord(topic_id=log_dir[1].topic_ids["orders"],
                                               partition_id=0, leader=0)])
    out = tmp_path / "report"
    # Committed up to the planted record: the audited log lacks an offset the other holds.
    result = CliRunner().invoke(cli, [
        "audit", "--log-dir", str(log_dir[0]), "--out", str(out), "--compare-with", str(other),
        "--committed-offset", str(tail)])
    assert result.exit_code == 1, result.output
    assert f"VIOLATED  {REPLICA_CHECK} (2 rows)" in result.output
    # The audited log itself is clean: that is the only verdict against it.
    assert result.output.count("VIOLATED") == 1
    report = (out / "report.md").read_text()
    assert (f"**The logs differ at offset {tail}** (compared up to the committed offset "
            f"{tail}); replica 0 is the audited log:") in report
    assert f"| {tail} | 1 | {other} | 2 | False | partition_change |" in report


def test_compare_options_are_checked_before_spark_starts(log_dir: tuple[Path, Known],
                                                         tmp_path: Path) -> None:
    alone = CliRunner().invoke(cli, ["audit", "--log-dir", str(log_dir[0]),
                                     "--committed-offset", "5"])
    assert alone.exit_code == 2 and "--committed-offset needs --compare-with" in alone.output
    empty = tmp_path / "empty"
    (empty / "metadata").mkdir(parents=True)
    other = CliRunner().invoke(cli, ["audit", "--log-dir", str(log_dir[0]),
                                     "--compare-with", str(empty)])
    assert other.exit_code == 2 and "no segment files" in other.output, other.output
    assert "starting Spark" not in alone.output + other.output


@pytest.mark.parametrize("flags", [["--full"], ["--cache-dir", "somewhere"]])
def test_no_cache_goes_with_no_other_row_cache_option(flags: list[str],
                                                      log_dir: tuple[Path, Known]) -> None:
    refused = CliRunner().invoke(cli, ["audit", "--log-dir", str(log_dir[0]), "--no-cache",
                                       *flags])
    assert refused.exit_code == 2, refused.output
    assert "--no-cache goes with neither --full nor --cache-dir" in refused.output
    assert "starting Spark" not in refused.output


def test_failure_message_names_the_cause_an_operator_can_act_on() -> None:
    from controller.cli.audit_cmd import failure_message

    # As Spark reports a task whose Python worker could not import the reader.
    spark_text = ("An error occurred while calling o51.collectToPython.\n"
                  "org.apache.spark.api.python.PythonException: Traceback (most recent "
                  "call last):\n  File \"<frozen importlib._bootstrap>\", line 1\n"
                  "ModuleNotFoundError: No module named 'analytics'\n\tat org.apache.spark")
    assert failure_message(RuntimeError(spark_text)) == (
        "the executors' Python cannot import metakraft (No module named 'analytics'): "
        "install the package there, or pass --ship-code")
    # Another package missing is not this package missing.
    assert "metakraft" not in failure_message(
        RuntimeError("ModuleNotFoundError: No module named 'pyarrow'"))
    assert failure_message(ValueError("boom\nand more")) == "ValueError: boom"


@pytest.mark.spark
def test_report_cache_gives_the_same_answers(spark: Any, log_dir: tuple[Path, Known]) -> None:
    """The report caches the log without PartitionChange JSON and unused columns
    (`report.report_rows`) and derives the states from those rows with the name table
    given; every section and check answers the same on it."""
    import analytics
    from analytics import audit
    from analytics.invariants import INVARIANTS, USES_STATES
    from analytics.report import SECTIONS, SECTIONS_USING_STATES, report_rows

    # Cached, as the report does: each section and check reads them several times.
    raw = analytics.read_log(spark, str(log_dir[0])).cache()
    compact = report_rows(spark, str(log_dir[0])).cache()
    assert compact.where("record_type = 'partition_change' AND record_json IS NOT NULL"
                         ).count() == 0
    assert compact.where("record_type = 'partition_change'").count() > 0
    assert compact.where("record_type = 'config' AND record_json IS NULL").count() == 0
    answers = []
    for frame, report_way in ((raw, False), (compact, True)):
        df = audit.resolve_topic_names(frame)
        states = (audit.partition_states(frame, audit.topic_names(frame)) if report_way
                  else audit.partition_states(df)).cache()
        got = [sorted(map(str, (fn(df, states) if fn in SECTIONS_USING_STATES else fn(df))
                          .collect())) for _, fn in SECTIONS]
        got += [sorted(map(str, (check(df, states) if name in USES_STATES else check(df))
                           .collect())) for name, check in INVARIANTS.items()]
        got.append(sorted(map(str, states.collect())))
        answers.append(got)
        states.unpersist()
    raw.unpersist()
    compact.unpersist()
    assert answers[0] == answers[1]
    assert any(answers[0])


@pytest.mark.spark
def test_the_report_shows_eligible_leader_replicas(spark: Any, log_dir: tuple[Path, Known],
                                                   tmp_path: Path) -> None:
    """KIP-966 in the report: the summary counts ELR changes and elections from the
    ELR, and a section lists them."""
    copy = copy_log(log_dir[0], tmp_path / "log")
    tid = log_dir[1].topic_ids["orders"]
    at = plant(copy, [
        PartitionChangeRecord(topic_id=tid, partition_id=0, leader=2, isr=BrokerIdList(ids=[2]),
                              eligible_leader_replicas=BrokerIdList(ids=[3, 1])),
        PartitionChangeRecord(topic_id=tid, partition_id=0, leader=3, isr=BrokerIdList(ids=[3]),
                              eligible_leader_replicas=BrokerIdList(ids=[1, 2]))])
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["audit", "--log-dir", str(copy), "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = (out / "report.md").read_text()
    assert "ELR changes: 2 (1 elections from the ELR)" in report
    section = report.split("## Eligible leader replicas (KIP-966)")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| orders")]
    assert [row.split(" | ")[3] for row in rows] == [str(at), str(at + 1)]
    assert rows[1].rstrip(" |").endswith("| 3 | True")


@pytest.mark.spark
def test_a_clean_stop_is_not_an_outage_and_only_expired_sessions_count_as_fencing(
        spark: Any, log_dir: tuple[Path, Known], tmp_path: Path) -> None:
    """Broker 3 stops cleanly at the end of the log: it enters controlled shutdown,
    leaves an ISR, and is fenced. That is a controlled shutdown, not a fencing, and
    the ISR it left is 'stopped', not an open outage."""
    import analytics
    from analytics import audit
    from controller.records import BrokerRegistrationChangeRecord, metadata_pb2

    copy = copy_log(log_dir[0], tmp_path / "log")
    known = log_dir[1]
    epoch = known.broker_epochs[3]
    at = plant(copy, [
        BrokerRegistrationChangeRecord(
            broker_id=3, broker_epoch=epoch,
            in_controlled_shutdown=metadata_pb2.CONTROLLED_SHUTDOWN_CHANGE_ENTER),
        PartitionChangeRecord(topic_id=known.topic_ids["orders"], partition_id=0,
                              isr=BrokerIdList(ids=[2, 1])),
        BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=epoch,
                                       fenced=metadata_pb2.FENCE_CHANGE_FENCE)])
    df = analytics.load(spark, str(copy))
    causes = [(r.broker_id, r.cause) for r in audit.fencing_intervals(df).collect()
              if r.cause != "registered"]
    # The three failures of the scripted history, then the clean stop.
    assert causes == [(2, "fenced"), (3, "fenced"), (1, "fenced"), (3, "controlled_shutdown")]
    incidents = [(r.broker_id, r.start_offset, r.outcome)
                 for r in audit.isr_incidents(df).collect()]
    assert incidents[-1] == (3, at + 1, "stopped")
    assert [o for _, _, o in incidents[:-1]] == ["recovered"] * 3
    # The report with its tables cut to one row: the counts and breakdowns below are
    # still of every row (ISR incidents: 4 rows, counted by a query of their own).
    from analytics.report import run_audit
    out = tmp_path / "report"
    assert not any(run_audit(spark, str(copy), out, lambda _: None, max_rows=1).values())
    report = (out / "report.md").read_text()
    assert ("brokers fenced: 3 by an expired session, 1 after a controlled shutdown"
            in report), report[:1500]
    assert "ISR incidents: 4 (3 recovered, 1 stopped with their broker, 0 open)" in report
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fencing_causes"]["controlled_shutdown"] == 1
    assert summary["isr_incident_outcomes"] == {"recovered": 3, "stopped": 1, "open": 0}
