"""Start, watch and stop the dev cluster's processes.

Each node runs as `python -c <launch> controller|broker --config FILE` with the
same interpreter as `metakraft dev`, its output appended to its process.log; it
dies with the supervisor, even a SIGKILLed one (`parent_death.py`). The
children get their own process group: a Ctrl-C in the terminal reaches only the
supervisor, which then stops brokers before controllers (a broker's controlled
shutdown needs a controller to answer it).

A child that exits on its own is reported once (`poll_exits`) and left down: a
silent restart would hide the crash the developer needs to see.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

import controller
from controller.devcluster.layout import ClusterSpec, NodeSpec, ProcessStatus, write_cluster_json
from controller.devcluster.parent_death import ENV_PARENT

# The children die with the supervisor even if it is SIGKILLed (parent_death.py).
LAUNCH = ("from controller.devcluster.parent_death import die_with_parent; die_with_parent(); "
          "from controller.cli.main import main; main()")
# Lines of the log shown when a process dies.
TAIL_LINES = 15
_BIND_FAILURE_MARKS = ("could not bind", "address already in use", "failed to bind")


@attrs.frozen
class Exit:
    name: str
    exit_code: int
    log_path: Path
    last_lines: tuple[str, ...]

    def describe(self) -> str:
        how = f"killed by signal {-self.exit_code}" if self.exit_code < 0 else \
            f"exit code {self.exit_code}"
        return f"{self.name} exited ({how}); log: {self.log_path}"


def node_command(node: NodeSpec, config: Path) -> list[str]:
    return [sys.executable, "-c", LAUNCH, node.role, "--config", str(config)]


def _child_env() -> dict[str, str]:
    # The children import the same source tree as this process, installed or not.
    source_root = str(Path(controller.__file__).resolve().parents[1])
    current = os.environ.get("PYTHONPATH")
    path = source_root if not current else f"{source_root}{os.pathsep}{current}"
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1",
            ENV_PARENT: str(os.getpid())}


class _Managed:
    def __init__(self, node: NodeSpec) -> None:
        self.node = node
        self.proc: subprocess.Popen[bytes] | None = None
        self.status = ProcessStatus()
        # Where this run's output starts in the (appended) log file.
        self.log_offset = 0
        # The supervisor stopped or killed it: its exit is not news.
        self.expected_exit = False


class Supervisor:
    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self._procs = {node.name: _Managed(node) for node in spec.nodes}

    # -- state -------------------------------------------------------------------------

    def write_json(self) -> Path:
        statuses = {name: m.status for name, m in self._procs.items()}
        return write_cluster_json(self.spec, statuses, supervisor_pid=os.getpid())

    def stop_and_forget(self, name: str, timeout_s: float) -> int | None:
        """Stop one process (SIGTERM, then SIGKILL) and drop its node from the spec
        (a controller that left the quorum; its data stays). Its exit code, None if it
        was not running."""
        code = self._stop_group([name], timeout_s).get(name)
        self.spec = attrs.evolve(self.spec, nodes=tuple(n for n in self.spec.nodes
                                                        if n.name != name),
                                 leaving=self.spec.leaving - {int(name.rsplit("-", 1)[1])})
        del self._procs[name]
        self.write_json()
        return code

    def replace_spec(self, spec: ClusterSpec) -> None:
        """New ports after a bind conflict: only while nothing runs."""
        assert not self.running_names(), "replace_spec with processes running"
        self.spec = spec
        self._procs = {node.name: _Managed(node) for node in spec.nodes}

    def pid(self, name: str) -> int | None:
        return self._procs[name].status.pid

    def is_running(self, name: str) -> bool:
        proc = self._procs[name].proc
        return proc is not None and proc.poll() is None

    def running_names(self) -> list[str]:
        return [name for name in self._procs if self.is_running(name)]

    def log_since_start(self, name: str) -> str:
        managed = self._procs[name]
        path = self.spec.paths(managed.node).log
        try:
            with open(path, "rb") as f:
                f.seek(managed.log_offset)
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def tail(self, name: str, lines: int = TAIL_LINES) -> tuple[str, ...]:
        return tuple(self.log_since_start(name).splitlines()[-lines:])

    def bind_failed(self, name: str) -> bool:
        text = self.log_since_start(name).lower()
        return any(mark in text for mark in _BIND_FAILURE_MARKS)

    # -- start -------------------------------------------------------------------------

    def start(self, name: str) -> int:
        managed = self._procs[name]
        assert not self.is_running(name), f"{name} is already running"
        paths = self.spec.paths(managed.node)
        with open(paths.log, "ab") as log:
            managed.log_offset = log.tell()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log.write(f"=== metakraft dev: starting {name} at {stamp} ===\n".encode())
            log.flush()
            managed.proc = subprocess.Popen(
                node_command(managed.node, paths.config), stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, env=_child_env(), process_group=0)
        managed.expected_exit = False
        managed.status = ProcessStatus(pid=managed.proc.pid, state="running")
        self.write_json()
        return managed.proc.pid

    def start_all(self, names: Iterable[str] | None = None) -> None:
        for name in names if names is not None else list(self._procs):
            self.start(name)

    # -- watch -------------------------------------------------------------------------

    def poll_exits(self) -> list[Exit]:
        """Processes that exited on their own since the last call (each reported once)."""
        found: list[Exit] = []
        for name, managed in self._procs.items():
            proc = managed.proc
            if proc is None or managed.status.state != "running":
                continue
            code = proc.poll()
            if code is None:
                continue
            managed.status = ProcessStatus(pid=proc.pid, state="exited", exit_code=code)
            if not managed.expected_exit:
                found.append(Exit(name, code, self.spec.paths(managed.node).log,
                                  self.tail(name)))
        if found:
            self.write_json()
        return found

    # -- stop --------------------------------------------------------------------------

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send `sig` (the scenario's crash); the exit is expected, not reported."""
        managed = self._procs[name]
        if managed.proc is None or managed.proc.poll() is not None:
            return
        managed.expected_exit = True
        managed.proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            managed.proc.wait(10)
        code = managed.proc.poll()
        managed.status = ProcessStatus(pid=managed.proc.pid, state="exited", exit_code=code)
        self.write_json()

    def _stop_group(self, names: Sequence[str], timeout_s: float) -> dict[str, int]:
        """SIGTERM every running process of `names` at once, wait up to `timeout_s`,
        then SIGKILL what remains. Returns each one's exit code."""
        procs = {n: self._procs[n] for n in names if self.is_running(n)}
        for managed in procs.values():
            assert managed.proc is not None
            managed.expected_exit = True
            with contextlib.suppress(ProcessLookupError):
                managed.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        codes: dict[str, int] = {}
        for name, managed in procs.items():
            assert managed.proc is not None
            try:
                codes[name] = managed.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                managed.proc.kill()
                codes[name] = managed.proc.wait(10)
            managed.status = ProcessStatus(pid=managed.proc.pid, state="stopped",
                                           exit_code=codes[name])
        return codes

    def stop_all(self, broker_timeout_s: float, controller_timeout_s: float) -> dict[str, int]:
        """Brokers first (their controlled shutdown talks to the controllers), then
        controllers. Returns the exit code of each process that was running."""
        brokers = [n.name for n in self.spec.brokers]
        controllers = [n.name for n in self.spec.controllers]
        codes = self._stop_group(brokers, broker_timeout_s)
        codes.update(self._stop_group(controllers, controller_timeout_s))
        # Children killed behind the groups' backs (a second Ctrl-C) are stopped too.
        for name, managed in self._procs.items():
            proc = managed.proc
            if proc is not None and managed.status.state == "running":
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
                code = proc.poll()
                if code is not None:
                    codes[name] = code
                    managed.status = ProcessStatus(pid=proc.pid, state="stopped",
                                                   exit_code=code)
        self.write_json()
        return codes

    def signal_all(self, sig: signal.Signals) -> None:
        """Send `sig` to every running child and return at once (safe in a signal
        handler: no waiting, no shared state changed)."""
        for managed in self._procs.values():
            proc = managed.proc
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, sig)
