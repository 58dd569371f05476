"""Real controller and `metakraft broker --config FILE` processes on loopback, for the
broker agent integration tests and bench/propagation_bench.py.

`BrokerCluster(root, controllers=3, brokers=[1, 2, 3])` formats data dirs, writes
TOML configs (controllers 3000+, brokers by id) and starts nothing until `start()`;
`close()` stops every child it started (SIGCONT first, in case a test left one
stopped, then SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from broker_agent.status import get_status, status_to_dict
from controller.api.client import AdminClient
from controller.storage.meta_properties import format_data_dir, random_cluster_id
from tests.support.controller_processes import (
    ControllerProcess,
    latest_active,
)
from tests.support.pki import PLAINTEXT_TABLE
from tests.support.polling import wait_until
from tests.support.ports import free_ports
from tests.support.processes import ChildProcess, metakraft_command

CONTROLLER_BASE_ID = 3000




class BrokerProcess(ChildProcess):
    def __init__(self, broker_id: int, cluster_id: str, root: Path,
                 controllers: dict[int, str], *, heartbeat_interval_ms: int = 200,
                 controlled_shutdown_timeout_ms: int = 10_000, log_format: str = "kv",
                 metrics: bool = False, data_config: str = "") -> None:
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.data_dir = root / f"b{broker_id}"
        self.config_path = root / f"b{broker_id}.toml"
        super().__init__(root / f"b{broker_id}.log")
        self.address: str | None = None
        port = free_ports(1)[0]
        self.listen = f"127.0.0.1:{port}"
        table = "\n".join(f'{i} = "{a}"' for i, a in sorted(controllers.items()))
        self.config_path.write_text(
            f'broker_id = {broker_id}\ncluster_id = "{cluster_id}"\n'
            f'data_dir = "{self.data_dir}"\nlisten = "{self.listen}"\nrack = "r{broker_id}"\n'
            f"[controllers]\n{table}\n[broker]\nheartbeat_interval_ms = {heartbeat_interval_ms}\n"
            f"controlled_shutdown_timeout_ms = {controlled_shutdown_timeout_ms}\n"
            f'[logging]\nlevel = "INFO"\nformat = "{log_format}"\n'
            + ('[metrics]\naddress = "127.0.0.1"\nport = 0\n' if metrics else "")
            + (f"[data]\n{data_config}\n" if data_config else "")
            + PLAINTEXT_TABLE)
        self.format()

    def format(self) -> None:
        format_data_dir(self.data_dir, self.cluster_id, self.broker_id, ignore_formatted=True)

    def wipe(self) -> None:
        """Remove the data dir and format it again (a replaced disk)."""
        assert not self.running
        shutil.rmtree(self.data_dir)
        self.format()

    def command(self) -> list[str]:
        return metakraft_command("broker", "--config", str(self.config_path))

    def start(self) -> None:
        super().start()
        self.address = self.listen

    def terminate(self, timeout_s: float = 15.0) -> int:
        return super().terminate(timeout_s)

    def status(self, timeout_s: float = 2.0) -> dict[str, Any]:
        assert self.address is not None
        return status_to_dict(get_status(self.address, timeout_s))

    def local_state(self) -> dict[str, dict[str, Any]]:
        """What the data dir holds: dir name -> state.json contents."""
        out: dict[str, dict[str, Any]] = {}
        root = self.data_dir / "partitions"
        if not root.exists():
            return out
        for entry in sorted(root.iterdir()):
            state = entry / "state.json"
            if state.exists():
                out[entry.name] = json.loads(state.read_text())
        return out



class BrokerCluster:
    def __init__(self, root: Path, *, controllers: int = 3, brokers: Iterable[int] = (1, 2, 3),
                 session_timeout_ms: int = 2_000, snapshot_interval_bytes: int = 16 << 20,
                 heartbeat_interval_ms: int = 200, log_format: str = "kv",
                 metrics: bool = False, controller_config: str = "",
                 broker_data: Mapping[int, str] | None = None) -> None:
        """`log_format`: every process's `[logging] format`; `metrics`: every process
        serves Prometheus metrics on a free port (logged as `metrics_serving`);
        `controller_config`: more lines of the controllers' `[controller]` table;
        `broker_data`: lines of a broker's `[data]` table, by broker id."""
        self.root = root
        self.cluster_id = random_cluster_id()
        ports = free_ports(controllers)
        self.controller_addresses = {CONTROLLER_BASE_ID + i: f"127.0.0.1:{p}"
                                     for i, p in enumerate(ports)}
        voters = "\n".join(f'{i} = "{a}"' for i, a in self.controller_addresses.items())
        self.controllers: dict[int, ControllerProcess] = {}
        for node_id, address in self.controller_addresses.items():
            data_dir = root / f"c{node_id}"
            format_data_dir(data_dir, self.cluster_id, node_id)
            config = root / f"c{node_id}.toml"
            config.write_text(
                f'node_id = {node_id}\ncluster_id = "{self.cluster_id}"\n'
                f'data_dir = "{data_dir}"\n[voters]\n{voters}\n'
                f"[controller]\nsession_timeout_ms = {session_timeout_ms}\n"
                f"snapshot_interval_bytes = {snapshot_interval_bytes}\n"
                + controller_config
                + f'[logging]\nlevel = "INFO"\nformat = "{log_format}"\n'
                + ('[metrics]\naddress = "127.0.0.1"\nport = 0\n' if metrics else "")
                + PLAINTEXT_TABLE)
            self.controllers[node_id] = ControllerProcess(node_id, address, config, data_dir)
        self.brokers: dict[int, BrokerProcess] = {
            b: BrokerProcess(b, self.cluster_id, root, self.controller_addresses,
                             heartbeat_interval_ms=heartbeat_interval_ms,
                             log_format=log_format, metrics=metrics,
                             data_config=(broker_data or {}).get(b, "")) for b in brokers}

    @property
    def bootstrap(self) -> list[str]:
        return list(self.controller_addresses.values())

    def admin(self, timeout_ms: int = 20_000) -> AdminClient:
        return AdminClient(self.bootstrap, timeout_ms=timeout_ms)

    def start(self) -> None:
        for node in self.controllers.values():
            node.start()
        for broker in self.brokers.values():
            broker.start()

    def close(self) -> None:
        children: list[BrokerProcess | ControllerProcess] = [*self.brokers.values(),
                                                             *self.controllers.values()]
        for child in children:
            if child.running:
                assert child.proc is not None
                child.proc.send_signal(signal.SIGCONT)
        for broker in self.brokers.values():
            if broker.running:
                broker.terminate(timeout_s=5.0)
        for node in self.controllers.values():
            if node.running:
                node.terminate(timeout_s=5.0)

    def active_controller(self) -> ControllerProcess | None:
        return latest_active(self.controllers.values())

    def wait_running(self, broker_ids: Iterable[int] | None = None,
                     timeout_s: float = 30.0) -> None:
        """Each broker says it is RUNNING and the controller lists it unfenced. Both:
        a broker learns it was fenced from its next heartbeat's answer, so one resumed
        after a pause (or cut off from a restored quorum) still says RUNNING while the
        controller has fenced it and places no replica on it."""
        ids = list(self.brokers) if broker_ids is None else list(broker_ids)
        for b in ids:
            wait_until(lambda b=b: self.brokers[b].status()["state"] == "RUNNING",  # type: ignore[misc]
                     timeout_s, f"broker {b} RUNNING")
        with self.admin() as admin:
            def unfenced() -> bool:
                listed = {r.broker_id: r for r in admin.describe_cluster().brokers}
                return all(b in listed and not listed[b].fenced for b in ids)
            wait_until(unfenced, timeout_s, f"brokers {ids} unfenced by the controller")


@contextlib.contextmanager
def running_cluster(root: Path, **kwargs: Any) -> Iterator[BrokerCluster]:
    """A started `BrokerCluster(root, **kwargs)` with every broker RUNNING, closed
    after (what the module fixtures of the real-process tests share)."""
    cluster = BrokerCluster(root, **kwargs)
    try:
        cluster.start()
        cluster.wait_running(timeout_s=40)
        yield cluster
    finally:
        cluster.close()
