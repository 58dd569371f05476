"""The audit on the log of a real cluster: `metakraft dev --scenario` (controller and
broker processes on loopback, a broker killed with kill -9 and restarted, a
reassignment). What the tour did must show in the audit, every invariant must hold,
and the three controllers' logs must agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import analytics
from analytics import audit
from analytics.invariants import INVARIANTS, first_divergence
from analytics.report import REPLICA_CHECK
from controller.cli.main import cli
from tests.analytics.conftest import DevRun
from tests.analytics.history import Known

pytestmark = pytest.mark.spark


def test_audit_command_passes_on_a_dev_cluster_log(spark: Any, dev_run: DevRun,
                                                   tmp_path: Path) -> None:
    logs = dev_run.controller_logs()
    assert len(logs) == 3
    out = tmp_path / "report"
    # In-process: the command's getOrCreate returns the test session.
    result = CliRunner().invoke(cli, ["audit", "--log-dir", str(logs[0]), "--out", str(out),
                                      "--compare-with", str(logs[1]),
                                      "--compare-with", str(logs[2])])
    assert result.exit_code == 0, result.output
    assert [line.split() for line in result.output.splitlines() if line.startswith(" ")
            and line.split()[0] in ("ok", "VIOLATED")] == [
        ["ok", n] for n in [*INVARIANTS, REPLICA_CHECK]]
    report = (out / "report.md").read_text()
    assert "All 7 checks pass." in report
    # The head tells the tour: one real fencing (the kill -9), clean stops at the end
    # (not outages), the controller replaced, the brokers' ACLs.
    assert "brokers fenced: 1 by an expired session," in report
    assert "stopped with their broker, 0 open)" in report
    assert "voter set changes: 3 (1 initial, 1 removed, 1 replaced)" in report
    assert "ACL bindings: 3 created, 0 deleted" in report
    assert (f"The 3 logs (`{logs[0]}`, `{logs[1]}`, `{logs[2]}`) agree at every offset up "
            "to the shortest log's end.") in report


def test_the_tour_shows_in_the_audit(spark: Any, dev_run: DevRun) -> None:
    df = analytics.load(spark, str(dev_run.controller_logs()[0]))
    created = {r["topic_name"]: r["partitions"] for r in
               audit.topic_lifecycle(df).where("event = 'created'").collect()}
    assert {"tour-a": 3, "tour-b": 2}.items() <= created.items()

    victim = dev_run.victim
    events = [r["event"] for r in
              audit.broker_timeline(df).where(f"broker_id = {victim}").collect()]
    # Registered (fenced) and unfenced at start; fenced by the controller when its
    # session timed out after kill -9; registered again and unfenced on restart; a
    # controlled shutdown when the tour stops the cluster.
    fenced_at = events.index("fenced")
    assert events[0] == "registered" and "unfenced" in events[:fenced_at]
    assert events[fenced_at:] == ["fenced", "registered", "unfenced", "controlled_shutdown"]
    causes = [r["cause"] for r in audit.fencing_intervals(df)
              .where(f"broker_id = {victim}").collect()]
    assert "fenced" in causes

    moves = audit.leader_history(df).where(
        "topic_name = 'tour-a' AND partition_id = 0").collect()
    assert moves[0]["prev_leader"] is None and moves[0]["leader"] == victim
    assert any(m["prev_leader"] == victim and m["leader"] != victim for m in moves[1:])

    [moved] = audit.reassignments(df).where(
        "topic_name = 'tour-a' AND partition_id = 0").collect()
    assert moved["outcome"] == "completed"
    assert sorted(moved["original"]) == sorted(dev_run.original)
    assert sorted(moved["target"]) == sorted(dev_run.target)

    for name, check in INVARIANTS.items():
        assert check(df).count() == 0, name


def test_the_quorum_and_acl_sections_tell_the_tour(spark: Any, dev_run: DevRun) -> None:
    df = analytics.load(spark, str(dev_run.controller_logs()[0]))
    changes = audit.voter_changes(df).collect()
    # Formatted with three voters; the replaced controller's lost replica removed,
    # then its new one (same id, new directory) added: a replacement.
    assert [c["change"] for c in changes] == ["initial", "removed", "replaced"]
    assert len(changes[0]["voters"]) == 3
    (gone,) = changes[1]["removed"]
    (back,) = changes[2]["added"]
    assert changes[2]["replaces"] == [gone]
    assert gone.split("/")[0] == back.split("/")[0] and gone != back
    assert len(changes[2]["voters"]) == 3
    acls = audit.acl_changes(df).collect()
    assert [(a["change"], a["for_principal"], a["operation"], a["permission"],
             a["resource_type"]) for a in acls] == [
        ("created", f"User:broker-{b}", "CLUSTER_ACTION", "ALLOW", "CLUSTER") for b in (1, 2, 3)]
    assert {a["principal"] for a in acls} == {"User:admin"}


def test_the_controllers_logs_agree(spark: Any, dev_run: DevRun,
                                    log_dir: tuple[Path, Known]) -> None:
    logs = [str(p) for p in dev_run.controller_logs()]
    assert first_divergence(spark, logs).collect() == []
    # Against another cluster's log the same check finds a difference at once.
    other = first_divergence(spark, [logs[0], str(log_dir[0])]).collect()
    assert [r["replica"] for r in other] == [0, 1] and other[0]["offset"] == 0
