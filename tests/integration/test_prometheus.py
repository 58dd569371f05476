"""A real Prometheus scrapes a `metakraft dev` cluster through the committed
scrape config (docs/monitoring/prometheus.yml) and the target files the dev
cluster writes, and evaluates the committed alert rules (alerts.yml) against it.

Prometheus is Debian's package: the `prometheus` on PATH if there is one, else the
package's files fetched with `apt-get download` (after an `apt-get update` if the
machine has no package lists yet) and unpacked under the test's cache (no service
started). If neither works the test is skipped with the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.dev_cluster import kill_everything, run_until_ready
from tests.support.polling import wait_until
from tests.support.ports import free_ports
from tests.support.processes import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MONITORING = REPO_ROOT / "docs" / "monitoring"


def _prometheus_binary(cache: Path) -> Path:
    found = shutil.which("prometheus")
    if found is not None:
        return Path(found)
    unpacked = cache / "root" / "usr" / "bin" / "prometheus"
    if unpacked.exists():
        return unpacked
    cache.mkdir(parents=True, exist_ok=True)

    def download() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["apt-get", "download", "prometheus"], cwd=cache,
                              capture_output=True, text=True, timeout=180, check=False)

    fetched = download()
    if fetched.returncode != 0:
        # A fresh machine may have no package lists yet.
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300,
                       check=False)
        fetched = download()
    debs = sorted(cache.glob("prometheus_*.deb"))
    if fetched.returncode != 0 or not debs:
        pytest.skip(f"no Prometheus: not on PATH, and `apt-get download prometheus` "
                    f"failed: {fetched.stderr.strip()[-300:]}")
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(cache / "root")], check=True,
                   timeout=120)
    assert unpacked.exists(), sorted(str(p) for p in (cache / "root").rglob("*"))[:20]
    return unpacked


@pytest.fixture(scope="session")
def prometheus_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _prometheus_binary(tmp_path_factory.getbasetemp() / "prometheus-package")


def _api(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=5) as reply:
        body = json.loads(reply.read())
    assert body["status"] == "success", body
    return body["data"]


def test_prometheus_scrapes_every_dev_process_and_evaluates_the_alerts(
        prometheus_binary: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    # The committed config, with its target files pointed at this cluster's.
    config_dir = tmp_path / "prometheus"
    config_dir.mkdir()
    committed = (MONITORING / "prometheus.yml").read_text()
    assert committed.count("../../.metakraft-dev/") == 2
    (config_dir / "prometheus.yml").write_text(
        committed.replace("../../.metakraft-dev/", f"{data_dir}/"))
    shutil.copy(MONITORING / "alerts.yml", config_dir / "alerts.yml")
    [port] = free_ports(1)
    dev = prometheus = None
    try:
        dev = run_until_ready(data_dir, tmp_path / "dev.out", "--insecure")
        with open(tmp_path / "prometheus.out", "wb") as out:
            prometheus = subprocess.Popen(
                [str(prometheus_binary), f"--config.file={config_dir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdout=out, stderr=subprocess.STDOUT)
        processes = json.loads((data_dir / "cluster.json").read_text())["processes"]
        wanted = {p["metrics_address"] for p in processes}
        assert len(wanted) == 6

        def all_up() -> bool:
            assert prometheus is not None and prometheus.poll() is None, \
                (tmp_path / "prometheus.out").read_text()[-3000:]
            targets = _api(port, "targets")["activeTargets"]
            return {t["labels"]["instance"] for t in targets if t["health"] == "up"} == wanted

        wait_until(all_up, 60, "every dev process scraped", 0.5)
        jobs = {t["labels"]["job"] for t in _api(port, "targets")["activeTargets"]}
        assert jobs == {"metakraft-controller", "metakraft-broker"}

        def evaluated() -> list[dict[str, Any]] | None:
            rules = [r for g in _api(port, "rules")["groups"] for r in g["rules"]]
            done = all(r["health"] == "ok" and not r["lastEvaluation"].startswith("0001")
                       for r in rules)
            return rules if rules and done else None

        rules = wait_until(evaluated, 60, "every alert rule evaluated", 0.5)
        assert {r["type"] for r in rules} == {"alerting"}
        # A healthy cluster: exactly one active controller, and no alert firing.
        active = _api(port, "query?query=sum(metakraft_controller_active)")["result"]
        assert [float(r["value"][1]) for r in active] == [1.0]
        firing = [r["name"] for r in rules if r["state"] == "firing"]
        assert not firing, firing
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(20)
        kill_everything(dev, data_dir)
