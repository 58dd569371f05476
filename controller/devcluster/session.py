"""One `metakraft dev` run: lock the data dir, plan, start, wait until healthy, keep
watching, stop on a signal.

`DevSession` is shared by the plain run (`run_dev`, in `runner`) and the scripted
tour (`scenario`). Every wait polls with a deadline and returns early on Ctrl-C
or SIGTERM (`stop_requested`) and on a child that died.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import FrameType
from typing import IO, TypeVar

import attrs
from rich.console import Console

from controller.api.seam import VoterChangeOutcome
from controller.devcluster.configs import CONTROLLED_SHUTDOWN_TIMEOUT_MS, prepare_cluster
from controller.devcluster.layout import (
    ClusterSpec,
    DevClusterError,
    NodeSpec,
    pid_alive,
    plan_cluster,
)
from controller.devcluster.ports import pick_free_ports
from controller.devcluster.probe import BrokerView, ClusterProbe, broker_running, serving
from controller.devcluster.security import principal_of
from controller.devcluster.supervisor import Exit, Supervisor
from controller.storage.meta_properties import read_meta_properties

T = TypeVar("T")
# `metakraft dev`'s exit statuses.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
POLL_INTERVAL_S = 0.2
# Starting six Python processes on two busy cores takes a while; a leader needs a
# majority serving first.
CONTROLLERS_READY_TIMEOUT_S = 60.0
BROKERS_READY_TIMEOUT_S = 60.0
# Brokers stop first: a controlled shutdown may take its whole timeout.
BROKER_STOP_TIMEOUT_S = CONTROLLED_SHUTDOWN_TIMEOUT_MS / 1000 + 5.0
CONTROLLER_STOP_TIMEOUT_S = 10.0
BIND_RETRIES = 3
# A second signal at least this long after the first kills every child at once.
FORCE_AFTER_S = 0.5


class WaitAborted(Exception):
    """A wait ended early: a stop was requested, or a process died."""


class Interrupted(WaitAborted):
    def __init__(self, signal_name: str) -> None:
        super().__init__(f"stopped by {signal_name or 'a signal'}")
        self.signal_name = signal_name


class ProcessDied(WaitAborted):
    def __init__(self, exits: list[Exit]) -> None:
        super().__init__(", ".join(e.describe() for e in exits))
        self.exits = exits


def _lock(root: Path) -> IO[str]:
    """An exclusive lock on root/.lock held for the run: two supervisors on one data
    dir would start two copies of every node on the same data."""
    root.mkdir(parents=True, exist_ok=True)
    handle = open(root / ".lock", "a+")  # noqa: SIM115 - held until the run ends
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        owner = handle.read().strip() or "?"
        handle.close()
        raise DevClusterError(f"another `metakraft dev` (pid {owner}) is running on {root}; "
                              "stop it first (Ctrl-C there) or pass another --data-dir") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def leftover_processes(root: Path, spec: ClusterSpec) -> list[str]:
    """Processes of this cluster still alive from an earlier run that was killed
    (its pid alive and running that node's config). Starting again would put two
    processes on one data dir."""
    try:
        doc = json.loads((root / "cluster.json").read_text("utf-8"))
    except (OSError, ValueError):
        return []
    found: list[str] = []
    for entry in doc.get("processes", []):
        pid = entry.get("pid")
        if not isinstance(pid, int) or not pid_alive(pid):
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(entry.get("config_path")) in cmdline:
            found.append(f"{entry.get('name')} (pid {pid})")
    return found


def _check(what: str, outcome: VoterChangeOutcome) -> None:
    if not outcome.error.ok:
        raise DevClusterError(f"{what}: {outcome.error}")


class DevSession:
    def __init__(self, root: Path, controllers: int | None, brokers: int | None,
                 console: Console, *, secure: bool = True) -> None:
        self.root = root.resolve()
        self.console = console
        self._lock_handle = _lock(self.root)
        try:
            spec, self.resumed = plan_cluster(self.root, controllers, brokers)
            self.spec = attrs.evolve(spec, secure=secure)
        except BaseException:
            self.close()
            raise
        leftovers = leftover_processes(self.root, self.spec)
        if leftovers:
            self.close()
            raise DevClusterError(
                f"processes of the cluster in {self.root} are still running from an earlier "
                f"run: {', '.join(leftovers)}; stop them (kill PID) and run again")
        self.supervisor = Supervisor(self.spec)
        self.probe: ClusterProbe | None = None
        self.stop_requested = threading.Event()
        self.signal_name = ""
        self._old_handlers: dict[int, object] = {}

    # -- signals -----------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        first_at: list[float] = []

        def handler(signum: int, _frame: FrameType | None) -> None:
            if self.stop_requested.is_set():
                # A second Ctrl-C: the person does not want to wait for a clean stop.
                # Not one that follows at once: `timeout` and some shells signal the
                # process and then its group, which is one request, not two.
                if first_at and time.monotonic() - first_at[0] >= FORCE_AFTER_S:
                    self.supervisor.signal_all(signal.SIGKILL)
                return
            first_at.append(time.monotonic())
            self.signal_name = signal.Signals(signum).name
            self.stop_requested.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, handler)

    def restore_signal_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
        self._old_handlers.clear()

    # -- waiting -----------------------------------------------------------------------

    def check(self) -> None:
        """Raise if a stop was requested or a child died on its own."""
        if self.stop_requested.is_set():
            raise Interrupted(self.signal_name)
        exits = self.supervisor.poll_exits()
        if exits:
            raise ProcessDied(exits)

    def wait_for(self, what: str, cond: Callable[[], T | None], timeout_s: float) -> T:
        """Poll `cond` until it returns something truthy; DevClusterError after
        `timeout_s`, WaitAborted on a signal or a death."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check()
            value = cond()
            if value:
                return value
            if time.monotonic() > deadline:
                raise DevClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            self.stop_requested.wait(POLL_INTERVAL_S)

    # -- start -------------------------------------------------------------------------

    def prepare(self) -> list[NodeSpec]:
        formatted = prepare_cluster(self.spec)
        self.supervisor.write_json()
        return formatted

    def _repick_ports(self, names: set[str]) -> None:
        """Give new ports to nodes that could not bind theirs, rewrite every config
        (voter addresses must agree everywhere) and forget the old processes."""
        nodes = list(self.spec.nodes)
        taken = {p for n in nodes for p in (n.port, n.metrics_port) if p is not None}
        for i, node in enumerate(nodes):
            if node.name in names:
                port, metrics = pick_free_ports(2, avoid=taken)
                taken.update((port, metrics))
                nodes[i] = attrs.evolve(node, port=port, metrics_port=(
                    None if node.metrics_port is None else metrics))
        self.spec = attrs.evolve(self.spec, nodes=tuple(nodes))
        self.supervisor.replace_spec(self.spec)
        self.prepare()
        if self.probe is not None:
            self.probe.close()
            self.probe = None

    def start_and_wait(self, on_progress: Callable[[str], None]) -> int:
        """Start every node and wait until controllers serve, a leader is elected and
        every broker is registered and unfenced. Returns the leader's id."""
        for attempt in range(BIND_RETRIES + 1):
            try:
                return self._start_and_wait_once(on_progress)
            except ProcessDied as died:
                bound = {e.name for e in died.exits if self.supervisor.bind_failed(e.name)}
                if not bound or attempt == BIND_RETRIES:
                    raise
                on_progress(f"port taken for {', '.join(sorted(bound))}: picking new ports")
                self.supervisor.stop_all(BROKER_STOP_TIMEOUT_S, CONTROLLER_STOP_TIMEOUT_S)
                self._repick_ports(bound)
        raise AssertionError("unreachable")

    def _start_and_wait_once(self, on_progress: Callable[[str], None]) -> int:
        """Controllers first; once one leads, the brokers' ACLs (secure clusters), then
        the brokers (so none is refused while its ACL is missing)."""
        self.supervisor.start_all(node.name for node in self.spec.controllers)
        if self.probe is None:
            self.probe = ClusterProbe(self.spec)
        probe = self.probe
        for node in self.spec.controllers:
            self.wait_for(f"{node.name} to serve on {node.address}",
                          partial(serving, node.address, probe.tls),
                          CONTROLLERS_READY_TIMEOUT_S)
            on_progress(f"{node.name} serving on {node.address}")
        leader = self.wait_for("a controller leader", probe.leader_id,
                               CONTROLLERS_READY_TIMEOUT_S)
        on_progress(f"controller {leader} is the active controller")
        if self.spec.secure and self.spec.brokers:
            self.wait_for("the brokers' ACLs (CLUSTER_ACTION)",
                          partial(probe.grant_brokers, self.spec), CONTROLLERS_READY_TIMEOUT_S)
            on_progress(f"brokers may join: CLUSTER_ACTION granted to "
                        f"{', '.join(principal_of(n) for n in self.spec.brokers)}")
        self.supervisor.start_all(node.name for node in self.spec.brokers)
        for node in self.spec.brokers:
            self.wait_for(f"{node.name} to register and be unfenced",
                          partial(self.broker_is_active, node.node_id), BROKERS_READY_TIMEOUT_S)
            # Its own view too: this also proves cluster.json has its right address.
            self.wait_for(f"{node.name} to report RUNNING on {node.address}",
                          partial(broker_running, node.address, probe.tls),
                          BROKERS_READY_TIMEOUT_S)
            on_progress(f"{node.name} registered and unfenced (listening on {node.address})")
        return leader

    def reconcile_voters(self, on_progress: Callable[[str], None]) -> None:
        """Make the quorum's voter set match the spec: add each controller that is
        not a voter (a new one, or one whose disk was replaced: its old identity is
        removed first), then remove the controllers leaving and stop them."""
        assert self.probe is not None
        admin = self.probe.admin
        if not admin.describe_quorum().dynamic:
            return  # a cluster from before dynamic quorums: its voters are fixed
        for node in self.spec.controllers:
            if node.node_id in self.spec.leaving:
                continue
            directory_id = read_meta_properties(self.spec.paths(node).data_dir).directory_id
            voters = {v.replica_id: v.directory_id for v in admin.describe_quorum().voters}
            old = voters.get(node.node_id)
            if old == directory_id:
                continue
            if old is not None:
                _check(f"remove {node.name}'s lost disk ({old})",
                       admin.remove_raft_voter(node.node_id, old))
                on_progress(f"{node.name}: removed the voter of its lost disk ({old})")
            _check(f"add {node.name}",
                   admin.add_raft_voter(node.node_id, directory_id, node.address))
            on_progress(f"{node.name} joined the voters (directory id {directory_id})")
        for node in [n for n in self.spec.controllers if n.node_id in self.spec.leaving]:
            voters = {v.replica_id: v.directory_id for v in admin.describe_quorum().voters}
            if node.node_id in voters:
                _check(f"remove {node.name}",
                       admin.remove_raft_voter(node.node_id, voters[node.node_id]))
            self.supervisor.stop_and_forget(node.name, CONTROLLER_STOP_TIMEOUT_S)
            self.spec = self.supervisor.spec
            on_progress(f"{node.name} left the voters and stopped (its data stays in "
                        f"{self.spec.paths(node).root})")

    def broker_views(self) -> dict[int, BrokerView]:
        assert self.probe is not None
        return dict(self.probe.brokers() or {})

    def broker_is_active(self, broker_id: int) -> bool:
        return self.broker_state(broker_id) == "active"

    def broker_state(self, broker_id: int) -> str | None:
        view = self.broker_views().get(broker_id)
        return None if view is None else view.state

    # -- stop --------------------------------------------------------------------------

    def stop(self) -> dict[str, int]:
        if self.probe is not None:
            self.probe.close()
            self.probe = None
        return self.supervisor.stop_all(BROKER_STOP_TIMEOUT_S, CONTROLLER_STOP_TIMEOUT_S)

    def close(self) -> None:
        """Release the data-dir lock (after everything stopped)."""
        if not self._lock_handle.closed:
            self._lock_handle.close()
