"""The light install: a fresh venv with only `pip install -e .` (the core: no Spark,
no boto3, no test tools) runs `metakraft dev`, and says which extra the audit and
an S3 tier need. Real pip, real venv, real processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dev_cluster import READY_LINE, kill_everything
from tests.support.polling import wait_until
from tests.support.processes import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

EXTRAS_ONLY = ("pyspark", "pyarrow", "boto3", "moto", "pytest")


def test_the_core_install_runs_a_dev_cluster(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-e",
                                str(REPO_ROOT)], capture_output=True, text=True, timeout=480,
                               check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    for module in EXTRAS_ONLY:
        found = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True,
                               timeout=60, check=False)
        assert found.returncode != 0, f"{module} is in the core install"

    metakraft = str(venv / "bin" / "metakraft")
    audit = subprocess.run([metakraft, "audit", "--log-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert audit.returncode == 2 and "pip install 'metakraft[analytics]'" in audit.stderr, \
        audit.stderr

    data_dir = tmp_path / "dev"
    log = tmp_path / "dev.out"
    with open(log, "wb") as out:
        # From another directory: the venv's own install is what runs.
        dev = subprocess.Popen([metakraft, "dev", "--data-dir", str(data_dir), "--brokers",
                                "1", "--controllers", "1", "--insecure"], cwd=tmp_path,
                               stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: dev.poll() is None and READY_LINE in log.read_text(errors="replace"),
                   90, "the core install's dev cluster up")
        bootstrap = json.loads((data_dir / "cluster.json").read_text())["bootstrap"]
        topics = subprocess.run([metakraft, "topics", "list", "--bootstrap", bootstrap],
                                capture_output=True, text=True, timeout=60, check=False)
        assert topics.returncode == 0 and "demo" in topics.stdout, topics.stderr
        dev.send_signal(signal.SIGINT)
        assert dev.wait(60) == 0, log.read_text()[-3000:]
    finally:
        kill_everything(dev, data_dir)
