"""Real `metakraft controller --config FILE` processes on loopback, for integration
tests (tests/integration/test_controller_cluster.py).

`ControllerCluster(tmp_path, n)` formats n data dirs, writes n TOML configs and
starts the processes; `close()` stops whatever still runs (SIGTERM, then SIGKILL),
so a test's teardown always leaves no child behind. Brokers are faked with raw
BrokerLifecycle calls (`register_brokers`).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import grpc

from controller.api import broker_pb2_grpc as bpb_grpc
from controller.api.broker_convert import (
    heartbeat_request_to_pb,
    registration_request_to_pb,
)
from controller.logformat.batch import RecordBatch
from controller.metadata import BrokerHeartbeatRequest, BrokerRegistrationRequest
from controller.quorum.bootstrap import format_controller
from controller.raft.voters import Voter, VoterSet
from controller.records.domain import Listener
from controller.rpc import create_sync_channel
from controller.security.tls import TlsCredentials
from controller.storage.log import SegmentedLog
from controller.storage.meta_properties import (
    DataDir,
    format_data_dir,
    random_cluster_id,
    random_directory_id,
    read_meta_properties,
)
from tests.support.nemesis import Nemesis
from tests.support.pki import PLAINTEXT_TABLE, TestPki
from tests.support.polling import wait_until
from tests.support.ports import free_ports
from tests.support.processes import ChildProcess, metakraft_command

FIRST_CONTROLLER_ID = 3000


class ControllerProcess(ChildProcess):
    def __init__(self, node_id: int, address: str, config_path: Path, data_dir: Path,
                 env: dict[str, str] | None = None) -> None:
        super().__init__(config_path.with_suffix(".log"), env)
        self.node_id = node_id
        self.address = address
        self.config_path = config_path
        self.data_dir = data_dir

    def command(self) -> list[str]:
        return metakraft_command("controller", "--config", str(self.config_path))

    def read_log(self) -> list[RecordBatch]:
        """Every batch in this node's log (only while the process is stopped)."""
        assert not self.running, "the log is read from a stopped process only"
        with SegmentedLog.open(DataDir(self.data_dir).log_dir) as log:
            out: list[RecordBatch] = []
            offset = log.start_offset
            while offset < log.end_offset:
                batches = log.read_batches(offset)
                out.extend(batches)
                offset = batches[-1].next_offset
            return out


class ControllerCluster:
    def __init__(self, root: Path, count: int = 3, *, session_timeout_ms: int = 600_000,
                 snapshot_interval_bytes: int = 16 << 20, extra_config: str = "",
                 controller_config: str = "",
                 env: dict[str, str] | None = None, secure: bool = False,
                 authorizer: str = "", nemesis: Nemesis | None = None,
                 dynamic: bool = False, spare: int = 0) -> None:
        """`secure`: mutual TLS with certificates from `self.pki` (controllers are
        `User:controller-<id>`, `User:admin` is a super user), and `authorizer` more
        lines of the [authorizer] table; else plaintext. `nemesis`: every controller
        reaches every other through its proxy for that link (named `c<id>`), so a
        test can partition them (`name(node_id)`, `via(client, node_id)`).
        `controller_config`: more lines of the [controller] table.
        `dynamic`: formatted with initial controllers (the voter set lives in the log;
        `metakraft quorum add-controller` etc. change it); `spare` more controllers
        formatted to join later (`--no-initial-controllers`), not started."""
        self._env = env
        self._session_timeout_ms = session_timeout_ms
        self._snapshot_interval_bytes = snapshot_interval_bytes
        self._extra_config = extra_config
        self._controller_config = controller_config
        self._authorizer = authorizer
        self.dynamic = dynamic
        self.root = root
        self.pki = TestPki(root / "tls") if secure else None
        self.cluster_id = random_cluster_id()
        ports = free_ports(count + spare)
        # Controller ids of their own (as `metakraft dev` gives them): brokers take
        # small ids, and a broker may not take a controller's.
        self.addresses = {FIRST_CONTROLLER_ID + i: f"127.0.0.1:{p}"
                          for i, p in enumerate(ports[:count])}
        self.spare_addresses = {FIRST_CONTROLLER_ID + count + i: f"127.0.0.1:{p}"
                                for i, p in enumerate(ports[count:])}
        self.nemesis = nemesis
        self.nodes: dict[int, ControllerProcess] = {}
        initial = None
        if dynamic:
            initial = VoterSet.of(Voter(i, random_directory_id(), a)
                                  for i, a in self.addresses.items())
        for node_id, address in self.addresses.items():
            data_dir = root / f"c{node_id}"
            if initial is None:
                format_data_dir(data_dir, self.cluster_id, node_id)
            else:
                format_controller(data_dir, self.cluster_id, node_id,
                                  initial_controllers=initial)
            self.nodes[node_id] = self._process(node_id, address, data_dir, listen=False)
        for node_id, address in self.spare_addresses.items():
            self.nodes[node_id] = self.format_joining(node_id, address)

    def _process(self, node_id: int, address: str, data_dir: Path, *,
                 listen: bool) -> ControllerProcess:
        """Write the node's config (the voters: the initial ones) and its process."""
        voters = "\n".join(f'{i} = "{a if i == node_id else self._dial(node_id, i)}"'
                           for i, a in self.addresses.items())
        config = self.root / f"c{node_id}.toml"
        config.write_text(
            f'node_id = {node_id}\ncluster_id = "{self.cluster_id}"\n'
            f'data_dir = "{data_dir}"\n' + (f'listen = "{address}"\n' if listen else "")
            + f"[voters]\n{voters}\n"
            f"[controller]\nsession_timeout_ms = {self._session_timeout_ms}\n"
            f"snapshot_interval_bytes = {self._snapshot_interval_bytes}\n"
            + (self._controller_config.strip() + "\n" if self._controller_config else "")
            +             '[logging]\nlevel = "INFO"\n' + self._security_tables(node_id, self._authorizer)
            + self._extra_config)
        return ControllerProcess(node_id, address, config, data_dir, self._env)

    def format_joining(self, node_id: int, address: str) -> ControllerProcess:
        """A controller that joins the dynamic quorum (`--no-initial-controllers`),
        at `address`; not started. Its data dir must not exist yet."""
        data_dir = self.root / f"c{node_id}"
        format_controller(data_dir, self.cluster_id, node_id, initial_controllers=None)
        return self._process(node_id, address, data_dir, listen=True)

    def replace_disk(self, node_id: int) -> str:
        """The node's disk is lost: move its data dir aside and format a new replica
        (new directory id, joining); returns the old directory id. Stopped nodes only."""
        node = self.nodes[node_id]
        assert not node.running
        old = read_meta_properties(node.data_dir).directory_id
        node.data_dir.rename(node.data_dir.with_name(node.data_dir.name + ".lost"))
        self.nodes[node_id] = self.format_joining(node_id, node.address)
        return old

    def directory_id(self, node_id: int) -> str:
        return read_meta_properties(self.nodes[node_id].data_dir).directory_id

    def _security_tables(self, node_id: int, authorizer: str) -> str:
        if self.pki is None:
            return PLAINTEXT_TABLE
        principals = ", ".join(f'"User:controller-{i}"' for i in self.addresses)
        return (self.pki.tls_table(f"controller-{node_id}",
                                   f"controller_principals = [{principals}]\n")
                + f'\n[authorizer]\nsuper_users = ["User:admin"]\n{authorizer}')

    @staticmethod
    def name(node_id: int) -> str:
        """The controller's name on the nemesis."""
        return f"c{node_id}"

    def _dial(self, src: int, dst: int) -> str:
        if self.nemesis is None:
            return self.addresses[dst]
        return self.nemesis.link(self.name(src), self.name(dst), self.addresses[dst])

    def via(self, client: str, node_id: int) -> str:
        """The address `client` dials to reach controller `node_id` through the
        nemesis (its own address without one)."""
        if self.nemesis is None:
            return self.addresses[node_id]
        return self.nemesis.link(client, self.name(node_id), self.addresses[node_id])

    def credentials(self, name: str) -> TlsCredentials | None:
        """`name`'s client credentials on a secure cluster (None: plaintext)."""
        return None if self.pki is None else self.pki.credentials(name)

    @property
    def bootstrap(self) -> list[str]:
        return list(self.addresses.values())

    def start(self) -> None:
        for node_id, node in self.nodes.items():
            if node_id not in self.spare_addresses:
                node.start()

    def close(self) -> None:
        for node in self.nodes.values():
            if node.running:
                node.terminate(timeout_s=5.0)

    def active_node(self) -> ControllerProcess | None:
        """The process whose log says it became active most recently (running only)."""
        return latest_active(self.nodes.values())

    def _broker_call(self, method: str, request: object) -> Any:
        """Ask every controller until one (the active one) answers; None if none did."""
        for address in self.bootstrap:
            channel = create_sync_channel(address, tls=self.credentials("admin"))
            try:
                return getattr(bpb_grpc.BrokerLifecycleStub(channel), method)(request, timeout=5)
            except grpc.RpcError:
                continue
            finally:
                channel.close()
        return None

    def register_brokers(self, broker_ids: list[int], timeout_s: float = 15.0) -> None:
        """Register and unfence brokers through BrokerLifecycle, as a broker would."""
        for broker_id in broker_ids:
            request = registration_request_to_pb(
                BrokerRegistrationRequest(broker_id, f"incarnation-{broker_id}", self.cluster_id,
                                      listeners=(Listener("PLAINTEXT", "localhost", 9092,
                                                          "PLAINTEXT"),)))
            reply = wait_until(partial(self._broker_call, "RegisterBroker", request),
                               timeout_s, "registration")
            assert reply.broker_epoch >= 0, reply
            beat = heartbeat_request_to_pb(
                BrokerHeartbeatRequest(broker_id, reply.broker_epoch, 1 << 40), self.cluster_id)
            answer = wait_until(partial(self._broker_call, "BrokerHeartbeat", beat),
                                timeout_s, "heartbeat")
            assert not answer.is_fenced, answer


def latest_active(nodes: Iterable[ControllerProcess]) -> ControllerProcess | None:
    """Of the running `nodes`, the one whose log says it became active in the newest epoch."""
    best: tuple[int, ControllerProcess] | None = None
    for node in nodes:
        if not node.running:
            continue
        for line in node.log_text().splitlines():
            if "event=controller_active" in line:
                epoch = int(line.split("epoch=")[1].split()[0])
                if best is None or epoch > best[0]:
                    best = (epoch, node)
    return None if best is None else best[1]
