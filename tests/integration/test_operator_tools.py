"""Operator tools on a real `metakraft dev` cluster (TLS on): `endpoint status` and
`endpoint health` ask each controller on its own, the per-role health services
follow the roles, `quorum transfer-leadership` moves the leadership under a write
load without losing or doubling a write, and `endpoint health` names a killed
leader while the survivors report the new one.

Every wait polls with a deadline; teardown kills every process the cluster recorded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from controller import __version__
from controller.api.client import (
    AdminClient,
)
from controller.cli.admin_output import load_command_config
from controller.rpc import health_status
from tests.support.dev_cluster import dev_command, dev_env, kill_everything, run_until_ready
from tests.support.polling import wait_until
from tests.support.processes import REPO_ROOT
from tests.support.write_outcomes import check_outcomes, create_outcome

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ACTIVE = "metakraft.ActiveController"


def metakraft(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(dev_command(*args), cwd=REPO_ROOT, env={**dev_env(), **env},
                          capture_output=True, text=True, timeout=60)


def endpoint_status(bootstrap: str, env: dict[str, str]) -> list[dict[str, Any]]:
    done = metakraft("endpoint", "status", "--cluster", "--bootstrap", bootstrap,
                     "--output", "json", env=env)
    assert done.returncode in (0, 1), done.stderr
    reports: list[dict[str, Any]] = json.loads(done.stdout)
    return reports


def test_endpoints_role_health_and_leadership_transfer_under_load(tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = run_until_ready(data_dir, tmp_path / "dev.out")
        doc = json.loads((data_dir / "cluster.json").read_text())
        env = {"METAKRAFT_COMMAND_CONFIG": doc["command_config"]}
        tls = load_command_config(Path(doc["command_config"]))
        bootstrap = doc["bootstrap"]
        controllers = {p["node_id"]: p for p in doc["processes"] if p["role"] == "controller"}
        brokers = [p for p in doc["processes"] if p["role"] == "broker"]

        # Each controller on its own: one leader, active; everyone agrees on it.
        reports = endpoint_status(bootstrap, env)
        nodes = [r["node"] for r in reports]
        assert sorted(n["node_id"] for n in nodes) == sorted(controllers)
        assert [n["controller_mode"] for n in nodes].count("active") == 1
        leader = next(n for n in nodes if n["role"] == "leader")
        assert leader["controller_mode"] == "active"
        assert {n["leader_id"] for n in nodes} == {leader["node_id"]}
        assert {n["cluster_id"] for n in nodes} == {doc["cluster_id"]}
        assert {n["software_version"] for n in nodes} == {__version__}
        assert all(n["data_dir_bytes"] > 0 and n["voter"] for n in nodes)
        healthy = metakraft("endpoint", "health", "--cluster", "--bootstrap", bootstrap, env=env)
        assert healthy.returncode == 0, healthy.stderr
        assert healthy.stdout.count("is healthy") == 3, healthy.stdout

        # Per-role health: only the active controller serves ActiveController; every
        # running broker serves Broker.
        def active_by_health() -> list[int]:
            return [i for i, p in controllers.items()
                    if health_status(p["address"], tls, ACTIVE) == "SERVING"]

        assert active_by_health() == [leader["node_id"]]
        for broker in brokers:
            assert health_status(broker["address"], tls, "metakraft.Broker") == "SERVING"
        described = metakraft("quorum", "describe", "--status", "--bootstrap", bootstrap,
                              "--output", "json", env=env)
        assert json.loads(described.stdout)["cluster_id"] == doc["cluster_id"]

        # Transfer twice under a write load: every write applied once or refused.
        outcomes: dict[str, str] = {}
        lock = threading.Lock()
        stop = threading.Event()

        def writer(worker: int) -> None:
            with AdminClient(bootstrap.split(","), tls=tls, timeout_ms=20_000) as admin:
                i = 0
                while not stop.is_set():
                    name = f"w{worker}-{i}"
                    i += 1
                    outcome = create_outcome(admin, name)
                    with lock:
                        outcomes[name] = outcome

        def more_writes(count: int) -> None:
            start = len(outcomes)
            wait_until(lambda: len(outcomes) >= start + count, 60, f"{count} more writes")

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        try:
            followers = [i for i in sorted(controllers) if i != leader["node_id"]]
            for target in followers:
                more_writes(20)
                moved = metakraft("quorum", "transfer-leadership", "--to", str(target),
                                  "--bootstrap", bootstrap, env=env)
                assert moved.returncode == 0, moved.stderr
                assert f"controller {target} leads" in moved.stdout
                wait_until(lambda t=target: active_by_health() == [t], 10,
                           f"controller {target} serving as the active one")
            more_writes(20)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert not any(t.is_alive() for t in threads)
        with AdminClient(bootstrap.split(","), tls=tls) as admin:
            existing = {t.name for t in admin.list_topics()}
        counts = check_outcomes(outcomes, existing)
        assert counts["ok"] >= 60, counts
        print(f"writes across two leadership transfers: {dict(counts)}")

        # Kill -9 the active controller: health names it, the others report the new one.
        victim = followers[-1]
        os.kill(controllers[victim]["pid"], signal.SIGKILL)
        survivors = [i for i in controllers if i != victim]
        new_active = wait_until(lambda: [i for i in active_by_health() if i in survivors], 20,
                                "a new active controller")
        unhealthy = metakraft("endpoint", "health", "--bootstrap",
                              ",".join(p["address"] for p in controllers.values()), env=env)
        assert unhealthy.returncode == 1
        assert f"{controllers[victim]['address']} is unhealthy: unreachable" in unhealthy.stderr
        assert unhealthy.stdout.count("is healthy") == 2, unhealthy.stdout
        after = endpoint_status(",".join(controllers[i]["address"] for i in survivors), env)
        live = [r["node"] for r in after if r["node"] is not None]
        assert {n["node_id"] for n in live} == set(survivors)
        assert {n["leader_id"] for n in live} == {new_active[0]}
        assert all(n["leader_epoch"] > leader["leader_epoch"] + 1 for n in live)
    finally:
        kill_everything(proc, data_dir)
