"""Running `metakraft dev` from tests: launch it as its own process, and clean up
every process it recorded in DATA_DIR/cluster.json whatever happened."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.processes import REPO_ROOT, metakraft_command


def dev_env() -> dict[str, str]:
    # A wide console keeps rich from wrapping the lines the tests look for.
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}


def dev_command(*args: str) -> list[str]:
    """`metakraft ARGS...` run by this interpreter from this checkout."""
    return metakraft_command(*args)


# What `metakraft dev` prints once every process is up.
READY_LINE = "Ctrl-C stops everything"


def run_until_ready(data_dir: Path, log: Path, *args: str,
                    timeout_s: float = 60.0) -> subprocess.Popen[bytes]:
    """`metakraft dev --data-dir DATA_DIR ARGS...` in the background, its output in
    `log`, returned once it says every process is up (bounded, checked)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(dev_command("dev", "--data-dir", str(data_dir), *args),
                                cwd=REPO_ROOT, env=dev_env(), stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while READY_LINE not in log.read_text(errors="replace"):
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"not ready in {timeout_s} s:\n{log.read_text()}"
        time.sleep(0.2)
    return proc


def recorded_pids(data_dir: Path) -> list[int]:
    try:
        doc = json.loads((data_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        return []
    return [p["pid"] for p in doc["processes"] if isinstance(p.get("pid"), int)]


def kill_everything(supervisor: subprocess.Popen[bytes] | None, data_dir: Path) -> None:
    if supervisor is not None and supervisor.poll() is None:
        supervisor.kill()
        supervisor.wait(10)
    for pid in recorded_pids(data_dir):
        # Only a process still running one of this cluster's configs is ours.
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(data_dir).encode() in cmdline:
            os.kill(pid, signal.SIGKILL)


SCENARIO_TIMEOUT_S = 150.0


def run_scenario(data_dir: Path, extra: tuple[str, ...] = (),
                 timeout_s: float = SCENARIO_TIMEOUT_S) -> tuple[int, str]:
    """`metakraft dev --scenario` in `data_dir`, run to its end: (exit code, output).
    Every process it started is gone when this returns, however it ended."""
    proc = subprocess.Popen(dev_command("dev", "--scenario", "--data-dir", str(data_dir),
                                        *extra),
                            cwd=REPO_ROOT, env=dev_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        kill_everything(proc, data_dir)
    return proc.returncode, out.decode(errors="replace")
