"""A real Spark standalone cluster on loopback: one master and one worker process.

Started with the pyspark package's own `bin/spark-class` (the pip package carries
the jars; no separate Spark install), bound to 127.0.0.1 on ephemeral ports, with
the master's REST submission server off (it would take the fixed port 6066). The
worker runs the executors in JVMs of its own, which start their Python workers with
the application's `PYSPARK_PYTHON`: this venv's interpreter, where this package is
installed (the "installed on the executors" route of docs/analytics.md).

Also the Java check of the Spark tests (`check_java`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from analytics.report import SMALL_LOG_JAVA_OPTIONS

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.2


def check_java() -> None:
    """Fail (not skip) with what to install when there is no JDK 17+."""
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")
                        ) if os.environ.get("JAVA_HOME") else shutil.which("java")
    if java is None:
        pytest.fail("Spark tests need Java: install a JDK 17+ (e.g. apt-get install "
                    "openjdk-17-jre-headless) and put `java` on PATH or set JAVA_HOME.")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    found = re.search(r'version "(\d+)', out.stderr + out.stdout)
    if found is None or int(found.group(1)) < 17:
        pytest.fail(f"Spark tests need a JDK 17+; `java -version` says: {out.stderr.strip()}")


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class StandaloneCluster:
    """`start()`, then `master_url`; `stop()` ends both daemons and their executors."""

    def __init__(self, root: Path, *, worker_cores: int, worker_memory: str) -> None:
        self.root = root
        self.work_dir = root / "work"
        self.worker_cores, self.worker_memory = worker_cores, worker_memory
        self.master_url = ""
        self._procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        master_log = self._spawn("master", "org.apache.spark.deploy.master.Master",
                                 "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        found = self._wait_for(master_log, r"Starting Spark master at (spark://\S+)")
        self.master_url = found.group(1)
        worker_log = self._spawn(
            "worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
            "--port", "0", "--webui-port", "0", "--cores", str(self.worker_cores),
            "--memory", self.worker_memory, "--work-dir", str(self.work_dir),
            self.master_url)
        self._wait_for(worker_log, r"Successfully registered with master")

    def applications(self) -> list[Path]:
        """The worker's directories of the applications it ran executors for."""
        return sorted(p for p in self.work_dir.iterdir() if p.name.startswith("app-"))

    def stop(self) -> None:
        # Worker first: its executors are its children, in its process group.
        for proc, _ in reversed(self._procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
        self._procs.clear()

    def _spawn(self, name: str, main_class: str, *args: str) -> Path:
        log = self.root / f"{name}.log"
        env = {**os.environ, "SPARK_HOME": str(_spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
               # Two idle daemons: what they compile is not worth C2's CPU.
               "SPARK_DAEMON_JAVA_OPTS": SMALL_LOG_JAVA_OPTIONS}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(_spark_home() / "bin" / "spark-class"), main_class, *args],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self._procs.append((proc, log))
        return log

    def _wait_for(self, log: Path, pattern: str) -> re.Match[str]:
        proc = self._procs[-1][0]
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = re.search(pattern, log.read_text(errors="replace"))
            if found is not None:
                return found
            if proc.poll() is not None:
                break
            time.sleep(POLL_INTERVAL_S)
        tail = log.read_text(errors="replace")[-3000:]
        self.stop()
        raise AssertionError(f"{log.name}: no {pattern!r} within {START_TIMEOUT_S:.0f} s "
                             f"(exit code {proc.poll()}):\n{tail}")
