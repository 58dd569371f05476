"""What the dev cluster is made of, where it lives, and `cluster.json`.

Under the data dir (default `./.metakraft-dev`) each process has its own folder:

    cluster.json                 the cluster id and every process (for scripts)
    prometheus-controllers.json  the metrics addresses, as Prometheus file-based
    prometheus-brokers.json        service discovery reads them (docs/monitoring/)
    controller-3000/config.toml  written by `metakraft dev` on every start
    controller-3000/data/        the formatted data dir (meta.properties, log, ...)
    controller-3000/process.log  the process's stdout and stderr, appended
    broker-1/...                 the same for brokers

`plan_cluster` decides the nodes: a first run picks ids and free ports; a resume
reuses the cluster id, ids and ports from cluster.json, and gives a new port only
to a node whose old one is taken now. Configs are always rewritten from the plan,
so every controller sees the same voter addresses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from controller.devcluster.ports import LOOPBACK, pick_free_ports, port_is_free
from controller.storage.errors import StorageError
from controller.storage.fsutil import atomic_write_bytes
from controller.storage.meta_properties import (
    random_cluster_id,
    read_meta_properties,
    validate_cluster_id,
)

Role = Literal["controller", "broker"]
CLUSTER_JSON = "cluster.json"
CLUSTER_JSON_VERSION = 1
# Prometheus `file_sd_configs` target files, one per role (its scrape job).
PROMETHEUS_TARGETS = {"controller": "prometheus-controllers.json",
                      "broker": "prometheus-brokers.json"}
FIRST_CONTROLLER_ID = 3000
FIRST_BROKER_ID = 1
DEFAULT_CONTROLLERS = 3
DEFAULT_BROKERS = 3


class DevClusterError(Exception):
    """The dev cluster cannot be set up as asked; the message says what to do."""


@attrs.frozen
class NodeSpec:
    role: Role
    node_id: int
    port: int
    # Prometheus exporter port (controllers only; None: no exporter).
    metrics_port: int | None = None
    host: str = LOOPBACK

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_address(self) -> str | None:
        return None if self.metrics_port is None else f"{self.host}:{self.metrics_port}"


@attrs.frozen
class NodePaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "process.log"


@attrs.frozen
class ClusterSpec:
    root: Path
    cluster_id: str
    nodes: tuple[NodeSpec, ...]
    # Mutual TLS and the authorizer (`metakraft dev --insecure`: plaintext).
    secure: bool = True
    # Controllers to take out of the voter set in this run (`--controllers` lower than
    # before): they run until removed, then stop and leave the spec (data kept).
    leaving: frozenset[int] = frozenset()

    @property
    def controllers(self) -> tuple[NodeSpec, ...]:
        return tuple(n for n in self.nodes if n.role == "controller")

    @property
    def brokers(self) -> tuple[NodeSpec, ...]:
        return tuple(n for n in self.nodes if n.role == "broker")

    @property
    def bootstrap(self) -> str:
        """Every controller address, comma-separated (what --bootstrap takes)."""
        return ",".join(n.address for n in self.controllers)

    def voters(self) -> dict[int, str]:
        return {n.node_id: n.address for n in self.controllers}

    def paths(self, node: NodeSpec) -> NodePaths:
        return NodePaths(self.root / node.name)

    def node(self, name: str) -> NodeSpec:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)


@attrs.frozen
class ProcessStatus:
    """What cluster.json says of a process now."""

    pid: int | None = None
    # "planned", "starting", "running", "exited", "stopped"
    state: str = "planned"
    exit_code: int | None = None


# -- cluster.json ------------------------------------------------------------------------


def cluster_json_path(root: Path) -> Path:
    return root / CLUSTER_JSON


def cluster_document(spec: ClusterSpec, statuses: Mapping[str, ProcessStatus],
                     supervisor_pid: int | None) -> dict[str, Any]:
    processes = []
    for node in spec.nodes:
        paths = spec.paths(node)
        status = statuses.get(node.name, ProcessStatus())
        processes.append({
            "name": node.name, "role": node.role, "node_id": node.node_id,
            "address": node.address, "pid": status.pid, "state": status.state,
            "exit_code": status.exit_code, "data_dir": str(paths.data_dir),
            "config_path": str(paths.config), "log_path": str(paths.log),
            "metrics_address": node.metrics_address,
        })
    return {"version": CLUSTER_JSON_VERSION, "cluster_id": spec.cluster_id,
            "bootstrap": spec.bootstrap, "supervisor_pid": supervisor_pid,
            "tls": spec.secure,
            "command_config": str(spec.root / "admin.toml") if spec.secure else None,
            "processes": processes}


def prometheus_targets(spec: ClusterSpec) -> dict[str, list[dict[str, Any]]]:
    """File name -> the `file_sd_configs` document of that role's metrics addresses
    (a list of target groups; Prometheus rereads the file when it changes)."""
    return {
        name: [{"targets": [n.metrics_address for n in spec.nodes
                            if n.role == role and n.metrics_address is not None],
                "labels": {"cluster_id": spec.cluster_id}}]
        for role, name in PROMETHEUS_TARGETS.items()
    }


def write_cluster_json(spec: ClusterSpec, statuses: Mapping[str, ProcessStatus],
                       supervisor_pid: int | None = None) -> Path:
    """Write cluster.json and the Prometheus target files, each atomically: a script
    (or Prometheus) reading one never sees half a file."""
    for name, groups in prometheus_targets(spec).items():
        atomic_write_bytes(spec.root / name, (json.dumps(groups, indent=2) + "\n").encode())
    path = cluster_json_path(spec.root)
    text = json.dumps(cluster_document(spec, statuses, supervisor_pid), indent=2) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def _node_from_json(entry: Mapping[str, Any]) -> NodeSpec:
    role = entry["role"]
    if role not in ("controller", "broker"):
        raise ValueError(f"unknown role {role!r}")
    host, _, port = str(entry["address"]).rpartition(":")
    metrics = entry.get("metrics_address")
    metrics_port = int(str(metrics).rpartition(":")[2]) if metrics else None
    return NodeSpec(role=role, node_id=int(entry["node_id"]), port=int(port),
                    metrics_port=metrics_port, host=host or LOOPBACK)


def read_cluster_json(root: Path) -> ClusterSpec | None:
    """The cluster described by root/cluster.json, or None if there is none."""
    path = cluster_json_path(root)
    try:
        doc = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DevClusterError(f"cannot read {path}: {exc}; delete {root} to start a new "
                              "cluster") from None
    try:
        cluster_id = str(doc["cluster_id"])
        validate_cluster_id(cluster_id)
        nodes = tuple(_node_from_json(e) for e in doc["processes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DevClusterError(f"{path} is damaged ({exc!r}); delete {root} to start a new "
                              "cluster") from None
    return ClusterSpec(root=root, cluster_id=cluster_id, nodes=nodes)


# -- planning ----------------------------------------------------------------------------


def _fresh_nodes(controllers: int, brokers: int, taken: set[int]) -> list[NodeSpec]:
    # Every process has a gRPC and a metrics port.
    ports = iter(pick_free_ports(2 * (controllers + brokers), avoid=taken))
    nodes = [NodeSpec("controller", FIRST_CONTROLLER_ID + i, next(ports), next(ports))
             for i in range(controllers)]
    nodes += [NodeSpec("broker", FIRST_BROKER_ID + i, next(ports), next(ports))
              for i in range(brokers)]
    return nodes


def plan_cluster(root: Path, controllers: int | None, brokers: int | None, *,
                 is_free: Callable[[int], bool] = port_is_free,
                 new_cluster_id: Callable[[], str] = random_cluster_id) -> tuple[ClusterSpec, bool]:
    """The cluster to run under `root` and whether it resumes an existing one.

    None counts mean: the existing cluster's, or the defaults on a first run. A
    resumed cluster's controllers change online (a dynamic quorum): new ones join
    (`DevSession.reconcile_voters` adds them), the highest ids leave (removed, then
    stopped; their data stays). Brokers can be added, and brokers past the count
    asked for are left out (their data stays).
    """
    existing = read_cluster_json(root)
    if existing is None:
        want_c = DEFAULT_CONTROLLERS if controllers is None else controllers
        want_b = DEFAULT_BROKERS if brokers is None else brokers
        if want_c < 1:
            raise DevClusterError("--controllers must be at least 1")
        if want_b < 0:
            raise DevClusterError("--brokers must be at least 0")
        return ClusterSpec(root, new_cluster_id(), tuple(_fresh_nodes(want_c, want_b, set()))), False

    have_c = len(existing.controllers)
    want_c = have_c if controllers is None else controllers
    if want_c < 1:
        raise DevClusterError("--controllers must be at least 1")
    if want_c != have_c and not is_dynamic(existing):
        raise DevClusterError(
            f"the cluster in {root} has {have_c} controllers and a static voter set (it was "
            f"created before dynamic quorums): pass --controllers {have_c}, or use a new "
            f"--data-dir (or delete {root}) for a cluster of {controllers}")
    by_id = sorted(existing.controllers, key=lambda n: n.node_id)
    leaving = frozenset(n.node_id for n in by_id[want_c:])
    want_b = len(existing.brokers) if brokers is None else brokers
    if want_b < 0:
        raise DevClusterError("--brokers must be at least 0")
    kept = [*existing.controllers, *sorted(existing.brokers, key=lambda n: n.node_id)[:want_b]]
    # Keep every port that is still free; give new ones to the others, never a port
    # another node of this cluster uses.
    taken = {p for n in kept for p in (n.port, n.metrics_port) if p is not None}
    nodes: list[NodeSpec] = []
    for node in kept:
        port = node.port if is_free(node.port) else pick_free_ports(1, avoid=taken)[0]
        taken.add(port)
        metrics_port = node.metrics_port
        if metrics_port is None or not is_free(metrics_port):
            # Also a broker of a cluster made before brokers served metrics.
            metrics_port = pick_free_ports(1, avoid=taken)[0]
            taken.add(metrics_port)
        nodes.append(attrs.evolve(node, port=port, metrics_port=metrics_port))
    next_id = max((n.node_id for n in existing.brokers), default=FIRST_BROKER_ID - 1) + 1
    extra = want_b - sum(1 for n in nodes if n.role == "broker")
    ports = iter(pick_free_ports(2 * extra, avoid=taken))
    for _ in range(extra):
        nodes.append(NodeSpec("broker", next_id, next(ports), next(ports)))
        next_id += 1
    next_controller = max(n.node_id for n in existing.controllers) + 1
    new_controllers = max(0, want_c - have_c)
    ports = iter(pick_free_ports(2 * new_controllers, avoid=taken))
    for i in range(new_controllers):
        nodes.insert(have_c + i, NodeSpec("controller", next_controller + i, next(ports),
                                          next(ports)))
    return ClusterSpec(root, existing.cluster_id, tuple(nodes), leaving=leaving), True


def is_dynamic(spec: ClusterSpec) -> bool:
    """Were the cluster's controllers formatted for a dynamic quorum? (Clusters made
    before dynamic quorums existed have a static voter set.)"""
    for node in spec.controllers:
        try:
            return read_meta_properties(spec.paths(node).data_dir).kraft_version >= 1
        except StorageError:
            continue
    return True  # nothing formatted yet: it will be dynamic


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
