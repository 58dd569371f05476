"""The test kit's one wrapper of a child process: start a command from this
checkout with its output appended to a log file, signal it, kill -9 it, stop it
with SIGTERM (SIGKILL past a timeout), read its log. Controllers, brokers and bare
Raft nodes are subclasses that only say which command to run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# `metakraft ...` run by this interpreter from this checkout.
LAUNCH = "from controller.cli.main import main; main()"


def metakraft_command(*args: str) -> list[str]:
    return [sys.executable, "-c", LAUNCH, *args]


class ChildProcess:
    def __init__(self, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        # The source tree the process runs (another release's, in an upgrade test).
        self.source_root = REPO_ROOT

    def command(self) -> Sequence[str]:
        raise NotImplementedError

    def start(self) -> None:
        assert not self.running, "already running"
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                list(self.command()), cwd=self.source_root, stdout=out, stderr=out,
                env={**os.environ, **self.env, "PYTHONPATH": str(self.source_root)})

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """kill -9 (a paused process too), and reap it."""
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 10.0) -> int:
        """SIGTERM and wait; its exit status (after SIGKILL if it does not stop in time).
        A process paused with SIGSTOP is resumed first: it could not exit."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
