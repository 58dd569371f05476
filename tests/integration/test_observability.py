"""What an operator watches, on real processes: every documented metric is exported
by the process it is documented for, the shipped alert rules and dashboard use only
exported metrics, and the JSON logs answer "who changed what" (one typed line per
admin write, leadership change and fencing)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.api.client import AdminClient
from controller.metadata import CreatableTopic, ReassignmentRequest
from tests.support.broker_processes import BrokerCluster, running_cluster
from tests.support.polling import wait_until
from tests.support.processes import ChildProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
OPERATIONS = REPO / "docs" / "operations.md"
MONITORING = REPO / "docs" / "monitoring"
_ROW = re.compile(r"^\| `(metakraft_[a-z_]+)` \| (gauge|counter|histogram) \|", re.M)


def documented() -> dict[str, dict[str, str]]:
    """Section heading ("Controller", "Raft", "Broker agent", "With a `[tier]`") ->
    metric name -> type, from the tables of docs/operations.md's Metrics section."""
    text = OPERATIONS.read_text()
    section = text[text.index("### Metrics\n"):text.index("### Logs\n")]
    out: dict[str, dict[str, str]] = {}
    current = ""
    for line in section.splitlines():
        if line and not line.startswith("|") and line.rstrip().endswith(":"):
            current = line.split(" ")[0].split("(")[0]
        match = _ROW.match(line)
        if match:
            out.setdefault(current, {})[match.group(1)] = match.group(2)
    return out


def exported_names(name: str, kind: str) -> list[str]:
    if kind == "counter":
        return [name] if name.endswith("_total") else [name + "_total"]
    if kind == "histogram":
        return [name + "_bucket", name + "_count", name + "_sum"]
    return [name]


def scrape(process: ChildProcess) -> set[str]:
    found = re.findall(r'"event": "metrics_serving", "address": "([\d.]+:\d+)"',
                       process.log_text())
    assert found, "no metrics exporter in the log"
    with urllib.request.urlopen(f"http://{found[-1]}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def events(process: ChildProcess) -> list[dict[str, Any]]:
    """Every log line of the process parsed as JSON (stdout's one banner aside)."""
    out = []
    for line in process.log_text().splitlines():
        if line.startswith("controller ") and " serving on " in line:
            continue  # the daemon's stdout banner, not a log line
        out.append(json.loads(line))
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("observability"), controllers=1,
                         brokers=(1, 2), session_timeout_ms=2_000, log_format="json",
                         metrics=True) as c:
        yield c


@pytest.fixture()
def admin(cluster: BrokerCluster) -> Iterator[AdminClient]:
    with cluster.admin() as client:
        yield client


def test_the_docs_list_the_metrics_of_each_process() -> None:
    tables = documented()
    assert set(tables) == {"Controller", "Raft", "Broker", "With"}, tables.keys()
    assert len(tables["Controller"]) >= 20 and len(tables["Broker"]) >= 10


def test_every_documented_metric_is_exported(cluster: BrokerCluster, admin: AdminClient) -> None:
    # Something in every family: a topic (partitions, reconcile actions), a refusal
    # (item errors), a fetch (Raft counters).
    admin.create_topics([CreatableTopic("metered", 2, 2)])
    admin.create_topics([CreatableTopic("metered", 2, 2)])
    tables = documented()
    (controller,) = cluster.controllers.values()

    def missing() -> dict[str, list[str]] | None:
        gaps = {}
        have = scrape(controller)
        for section in ("Controller", "Raft"):
            names = [n for name, kind in tables[section].items()
                     for n in exported_names(name, kind) if n not in have]
            if names:
                gaps[section] = names
        for broker in cluster.brokers.values():
            have = scrape(broker)
            names = [n for name, kind in tables["Broker"].items()
                     for n in exported_names(name, kind) if n not in have]
            if names:
                gaps[f"broker {broker.broker_id}"] = names
        return gaps or None

    # Refreshed on the next tick (controller) or within a second (brokers).
    try:
        wait_until(lambda: missing() is None, 15, "every documented metric exported", 0.5)
    except AssertionError:
        assert missing() is None  # names what is missing
    assert missing() is None
    # The standard collectors too.
    assert {"process_cpu_seconds_total", "python_gc_collections_total"} <= scrape(controller)


def test_alerts_and_dashboard_use_documented_metrics() -> None:
    names = {n for table in documented().values() for name, kind in table.items()
             for n in exported_names(name, kind)} | {"up", "process_cpu_seconds_total",
                                                     "process_resident_memory_bytes"}
    for path in (MONITORING / "alerts.yml", MONITORING / "grafana-dashboard.json"):
        used = set(re.findall(r"\b(metakraft_[a-z_]+|process_[a-z_]+)\b", path.read_text()))
        assert used, path
        assert used <= names, (path.name, sorted(used - names))


def _first(request: dict[str, Any], field: str) -> Any:
    items = request.get(field) or [{}]
    return items[0].items()


def test_json_logs_say_who_changed_what(cluster: BrokerCluster, admin: AdminClient) -> None:
    (controller,) = cluster.controllers.values()
    assert admin.create_topics([CreatableTopic("audited", 1, 2)])[0].error.ok
    assert not admin.create_topics([CreatableTopic("audited", 1, 2)])[0].error.ok
    assert admin.delete_topics(["audited"])[0].error.ok

    def writes() -> list[dict[str, Any]] | None:
        found = [e for e in events(controller) if e["event"] == "admin_write"
                 and ("audited" in e["request"].get("names", [])
                      or {"name": "audited"}.items() <= _first(e["request"], "topics"))]
        return found if len(found) >= 3 else None

    create, again, delete = wait_until(writes, 10, "three admin_write lines")[-3:]
    for line in (create, again, delete):
        assert line["principal"] == "User:ANONYMOUS" and line["request_id"], line
        assert line["level"] == "info" and line["logger"] == "metakraft.audit"
    assert (create["method"], create["result"]) == ("CreateTopics", "ok")
    assert again["result"] == "TOPIC_ALREADY_EXISTS:1"
    assert (delete["method"], delete["result"]) == ("DeleteTopics", "ok")
    # The request as sent, every field: a partition 0 stays partition 0.
    assert create["request"]["topics"][0]["num_partitions"] == 1
    # (the topic does not exist: the line is written whatever the answer)
    admin.alter_partition_reassignments([ReassignmentRequest("kept", 0, (2, 1))])
    moved = wait_until(lambda: [e for e in events(controller) if e["event"] == "admin_write"
                                and e["method"] == "AlterPartitionReassignments"],
                       10, "the reassignment's admin_write line")
    assert moved[-1]["request"]["partitions"] == [
        {"topic": "kept", "partition": 0, "replicas": [2, 1], "cancel": False}]
    # Typed values: numbers stay numbers.
    elected = [e for e in events(controller) if e["event"] == "leader_elected"]
    assert elected and isinstance(elected[0]["epoch"], int)

    # A fencing: kill -9 a broker; one line names it once its session times out.
    cluster.brokers[2].kill()
    fenced = wait_until(lambda: [e for e in events(controller) if e["event"] == "broker_fenced"],
                        15, "a broker_fenced line")
    assert fenced[-1]["broker"] == 2 and fenced[-1]["reason"] == "session_timeout"
    # The brokers' logs are JSON too, with typed fields.
    states = [e for e in events(cluster.brokers[1]) if e["event"] == "state_change"]
    assert states and states[-1]["state"] == "RUNNING" and isinstance(states[-1]["epoch"], int)
    cluster.brokers[2].start()
    cluster.wait_running([2], timeout_s=30)


def test_the_tier_metrics_are_the_documented_ones() -> None:
    from prometheus_client import CollectorRegistry

    from controller.tier.metrics import TierMetrics

    registry = CollectorRegistry()
    TierMetrics(registry)
    have = {metric.name + ("_total" if metric.type == "counter" else "")
            for metric in registry.collect()}
    assert have == set(documented()["With"])


def test_a_broker_with_a_damaged_quorum_state_refuses_in_one_line(
        cluster: BrokerCluster) -> None:
    broker = cluster.brokers[1]
    broker.terminate()
    state = broker.data_dir / "quorum-state"
    kept = state.read_bytes()
    state.write_bytes(kept.replace(b'"epoch": ', b'"epoch": 9'))  # the CRC no longer matches
    try:
        broker.start()
        assert broker.proc is not None and broker.proc.wait(30) == 1
        text = broker.log_text()
        refusal = [line for line in text.splitlines() if "refusing to start" in line]
        assert len(refusal) == 1 and str(state) in refusal[0], text[-2000:]
        assert "Traceback" not in text
    finally:
        state.write_bytes(kept)
        broker.start()
        cluster.wait_running([1], timeout_s=30)
