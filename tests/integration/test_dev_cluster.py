"""`metakraft dev` end to end: real controller and broker processes on loopback.

- `--scenario` runs the whole tour (restoring the cluster from its tier last) and exits 0
  with every checkpoint printed;
- a background `metakraft dev` comes up, the CLI works against it, SIGINT stops
  every process in cluster.json, and a second run resumes the same cluster.

Whatever happens, teardown kills the supervisor and every child it recorded.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.devcluster.layout import pid_alive
from tests.support.dev_cluster import (
    REPO_ROOT,
    dev_command,
    dev_env,
    kill_everything,
    recorded_pids,
    run_scenario,
    run_until_ready,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

def metakraft(*args: str, timeout_s: float = 60.0,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(dev_command(*args), cwd=REPO_ROOT, env={**dev_env(), **(env or {})},
                          capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "dev"
    try:
        yield path
    finally:
        # The tests kill their own supervisor; this catches children left by a crash.
        kill_everything(None, path)


@pytest.mark.parametrize("secure", [True, False], ids=["tls", "insecure"])
def test_scenario_runs_the_tour_and_exits_0(data_dir: Path, secure: bool) -> None:
    code, out = run_scenario(data_dir, () if secure else ("--insecure",))
    assert code == 0, out
    granted = "brokers may join: CLUSTER_ACTION granted to User:broker-1, User:broker-2"
    assert (granted in out) is secure, out
    for checkpoint in ("ready controller-3000 serving", "is the active controller",
                       "ready broker-3 registered and unfenced", "created topic 'demo'",
                       "[ok] topics created",
                       "[ok] every broker holds exactly the replicas the controller assigned it",
                       "fenced after its session timed out", "leader moved",
                       "registered again and unfenced", "rejoined: back in every ISR",
                       "[ok] reassignment accepted", "removed its replica",
                       "removed the voter of its lost disk", "joined the voters",
                       "is a voter again under directory id",
                       "[ok] the tier holds the log below offset",
                       "[ok] stopped 6 processes, every exit code 0",
                       "controllers restored: cluster", "the tour's topics among them; each "
                       "data dir read back", "scenario passed"):
        assert checkpoint in out, f"missing {checkpoint!r} in:\n{out}"
    assert "[FAILED]" not in out
    assert not any(pid_alive(pid) for pid in recorded_pids(data_dir))


def _stop(proc: subprocess.Popen[bytes], data_dir: Path, log: Path, processes: int = 6) -> None:
    pids = recorded_pids(data_dir)
    assert len(pids) == processes and all(pid_alive(p) for p in pids), log.read_text()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(40) == 0, log.read_text()
    assert not any(pid_alive(p) for p in pids), "a child outlived metakraft dev"
    doc = json.loads((data_dir / "cluster.json").read_text())
    assert {p["state"] for p in doc["processes"]} == {"stopped"}
    assert {p["exit_code"] for p in doc["processes"]} == {0}


def test_background_cluster_cli_sigint_and_resume(data_dir: Path, tmp_path: Path) -> None:
    proc: subprocess.Popen[bytes] | None = None
    try:
        log = tmp_path / "first.out"
        proc = run_until_ready(data_dir, log)
        doc = json.loads((data_dir / "cluster.json").read_text())
        cluster_id = doc["cluster_id"]
        roles = sorted((p["role"], p["node_id"]) for p in doc["processes"])
        assert roles == [("broker", 1), ("broker", 2), ("broker", 3), ("controller", 3000),
                         ("controller", 3001), ("controller", 3002)]
        assert doc["tls"] is True
        as_admin = {"METAKRAFT_COMMAND_CONFIG": doc["command_config"]}
        assert "export METAKRAFT_COMMAND_CONFIG=" in log.read_text()
        # Secured by default: a client without the admin's certificate is refused.
        refused = metakraft("topics", "list", "--bootstrap", doc["bootstrap"],
                            "--timeout-ms", "3000")
        assert refused.returncode == 3, refused.stderr
        assert "--command-config" in refused.stderr
        listed = metakraft("topics", "list", "--bootstrap", doc["bootstrap"], "--output", "json",
                           env=as_admin)
        assert listed.returncode == 0, listed.stderr
        assert [t["name"] for t in json.loads(listed.stdout)] == ["demo"]
        acls = metakraft("acls", "list", "--bootstrap", doc["bootstrap"], "--output", "json",
                         env=as_admin)
        assert acls.returncode == 0, acls.stderr
        assert sorted((a["principal"], a["operation"]) for a in json.loads(acls.stdout)) == [
            (f"User:broker-{i}", "CLUSTER_ACTION") for i in (1, 2, 3)]
        # The brokers serve TLS, and say so in their registrations.
        described = metakraft("cluster", "describe", "--bootstrap", doc["bootstrap"],
                              "--output", "json", env=as_admin)
        assert described.returncode == 0, described.stderr
        listeners = [li for b in json.loads(described.stdout)["brokers"] for li in b["listeners"]]
        assert len(listeners) == 3 and {(li["name"], li["security_protocol"])
                                        for li in listeners} == {("SSL", "SSL")}, listeners
        broker = next(p for p in doc["processes"] if p["role"] == "broker")
        status = metakraft("broker-status", "--address", broker["address"], "--output", "json",
                           env=as_admin)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["state"] == "RUNNING"
        _stop(proc, data_dir, log)

        log = tmp_path / "second.out"
        proc = run_until_ready(data_dir, log)
        assert f"Resuming cluster {cluster_id}" in log.read_text()
        doc = json.loads((data_dir / "cluster.json").read_text())
        assert doc["cluster_id"] == cluster_id
        listed = metakraft("topics", "list", "--bootstrap", doc["bootstrap"], "--output", "json",
                           env=as_admin)
        assert listed.returncode == 0, listed.stderr
        assert [t["name"] for t in json.loads(listed.stdout)] == ["demo"]
        _stop(proc, data_dir, log)
    finally:
        kill_everything(proc, data_dir)


def test_resume_with_more_or_fewer_controllers_changes_the_quorum_online(
        data_dir: Path, tmp_path: Path) -> None:
    proc: subprocess.Popen[bytes] | None = None
    quick = ("--brokers", "0", "--insecure")

    def voters(bootstrap: str) -> dict[int, str]:
        found = metakraft("quorum", "describe", "--bootstrap", bootstrap, "--output", "json")
        assert found.returncode == 0, found.stderr
        desc = json.loads(found.stdout)
        assert desc["dynamic"] is True
        return {v["replica_id"]: v["directory_id"] for v in desc["voters"]}

    try:
        log = tmp_path / "three.out"
        proc = run_until_ready(data_dir, log, "--controllers", "3", *quick)
        first = voters(json.loads((data_dir / "cluster.json").read_text())["bootstrap"])
        assert sorted(first) == [3000, 3001, 3002] and all(first.values())
        _stop(proc, data_dir, log, processes=3)

        log = tmp_path / "four.out"
        proc = run_until_ready(data_dir, log, "--controllers", "4", *quick)
        assert "controller-3003 joined the voters" in log.read_text()
        doc = json.loads((data_dir / "cluster.json").read_text())
        grown = voters(doc["bootstrap"])
        assert sorted(grown) == [3000, 3001, 3002, 3003]
        assert {k: grown[k] for k in first} == first  # the same replicas, one more
        _stop(proc, data_dir, log, processes=4)

        log = tmp_path / "two.out"
        proc = run_until_ready(data_dir, log, "--controllers", "2", *quick)
        text = log.read_text()
        assert "controller-3002 left the voters" in text and "controller-3003 left" in text
        doc = json.loads((data_dir / "cluster.json").read_text())
        assert sorted(p["node_id"] for p in doc["processes"]) == [3000, 3001]
        assert sorted(voters(doc["bootstrap"])) == [3000, 3001]
        assert (data_dir / "controller-3003" / "data" / "meta.properties").exists()
        _stop(proc, data_dir, log, processes=2)
    finally:
        kill_everything(proc, data_dir)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a reparented child may wait a moment to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_children_die_with_a_sigkilled_supervisor(data_dir: Path, tmp_path: Path) -> None:
    proc: subprocess.Popen[bytes] | None = None
    try:
        log = tmp_path / "dev.out"
        proc = run_until_ready(data_dir, log)
        pids = recorded_pids(data_dir)
        assert len(pids) == 6 and all(_running(p) for p in pids), log.read_text()
        proc.kill()  # no chance to stop anything itself
        proc.wait(10)
        deadline = time.monotonic() + 20
        while any(_running(p) for p in pids):
            assert time.monotonic() < deadline, "children outlived a SIGKILLed metakraft dev"
            time.sleep(0.1)
    finally:
        kill_everything(proc, data_dir)
