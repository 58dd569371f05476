"""The dev cluster's plan, ports, configs and cluster.json, without processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_agent.config import parse_config as parse_broker_config
from controller.devcluster.configs import prepare_cluster
from controller.devcluster.layout import (
    ClusterSpec,
    DevClusterError,
    NodeSpec,
    ProcessStatus,
    plan_cluster,
    read_cluster_json,
    write_cluster_json,
)
from controller.devcluster.ports import pick_free_ports, port_is_free
from controller.devcluster.session import DevSession, leftover_processes
from controller.quorum_controller.config_file import load_config as load_controller_config
from controller.storage.errors import MetaPropertiesError
from controller.storage.meta_properties import (
    check_meta_properties,
    format_data_dir,
    random_cluster_id,
)


def all_ports(spec: ClusterSpec) -> list[int]:
    return [p for n in spec.nodes for p in (n.port, n.metrics_port) if p is not None]


# -- ports ---------------------------------------------------------------------------------


def test_picked_ports_are_distinct_free_and_avoid_given_ones() -> None:
    first = pick_free_ports(5)
    assert len(set(first)) == 5 and all(port_is_free(p) for p in first)
    again = pick_free_ports(5, avoid=first)
    assert not set(again) & set(first)


def test_a_listening_port_is_not_free() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not port_is_free(port)
        assert port not in pick_free_ports(3)
    assert port_is_free(port)
    assert not port_is_free(0) and not port_is_free(70000)


# -- planning ------------------------------------------------------------------------------


def test_first_run_plans_ids_and_distinct_ports(tmp_path: Path) -> None:
    spec, resumed = plan_cluster(tmp_path, None, None)
    assert not resumed
    assert [n.node_id for n in spec.controllers] == [3000, 3001, 3002]
    assert [n.node_id for n in spec.brokers] == [1, 2, 3]
    assert all(n.metrics_port is not None for n in spec.nodes)
    ports = all_ports(spec)
    assert len(ports) == len(set(ports)) == 12
    assert spec.bootstrap == ",".join(n.address for n in spec.controllers)

    spec2, _ = plan_cluster(tmp_path / "other", 1, 0)
    assert [n.name for n in spec2.nodes] == ["controller-3000"]
    with pytest.raises(DevClusterError, match="at least 1"):
        plan_cluster(tmp_path / "x", 0, 1)


def test_resume_keeps_cluster_id_ids_and_free_ports(tmp_path: Path) -> None:
    spec, _ = plan_cluster(tmp_path, 3, 2)
    write_cluster_json(spec, {})
    again, resumed = plan_cluster(tmp_path, None, None, is_free=lambda _p: True)
    assert resumed
    assert again == spec


def test_resume_moves_only_a_taken_port_and_keeps_voters_consistent(tmp_path: Path) -> None:
    spec, _ = plan_cluster(tmp_path, 3, 3)
    write_cluster_json(spec, {})
    taken = spec.controllers[1].port
    again, _ = plan_cluster(tmp_path, None, None, is_free=lambda p: p != taken)
    moved = again.node("controller-3001")
    assert moved.port != taken
    assert moved.port not in {p for n in again.nodes if n is not moved
                              for p in (n.port, n.metrics_port)}
    unchanged = [n for n in again.nodes if n.name != "controller-3001"]
    assert unchanged == [n for n in spec.nodes if n.name != "controller-3001"]
    # Every controller's and broker's config names the new address.
    prepare_cluster(again)
    for node in again.controllers:
        config = load_controller_config(again.paths(node).config)
        assert config.driver.voter_addresses == again.voters()
    for node in again.brokers:
        path = again.paths(node).config
        assert parse_broker_config(path.read_text(), path).controllers == again.voters()


def test_resume_of_a_static_cluster_refuses_another_controller_count(tmp_path: Path) -> None:
    spec, _ = plan_cluster(tmp_path, 3, 2)
    write_cluster_json(spec, {})
    for node in spec.controllers:  # formatted before dynamic quorums existed
        format_data_dir(spec.paths(node).data_dir, spec.cluster_id, node.node_id)
    with pytest.raises(DevClusterError, match=r"static voter set.*--controllers 3"):
        plan_cluster(tmp_path, 5, None)


def test_resume_changes_a_dynamic_quorum_and_the_brokers(tmp_path: Path) -> None:
    spec, _ = plan_cluster(tmp_path, 3, 2)
    write_cluster_json(spec, {})
    grown, _ = plan_cluster(tmp_path, 5, None, is_free=lambda _p: True)
    assert [n.node_id for n in grown.controllers] == [3000, 3001, 3002, 3003, 3004]
    assert grown.controllers[:3] == spec.controllers and not grown.leaving
    ports = all_ports(grown)
    assert len(ports) == len(set(ports))
    shrunk, _ = plan_cluster(tmp_path, 1, None, is_free=lambda _p: True)
    # The leaving controllers run until they are out of the voter set.
    assert shrunk.controllers == spec.controllers and shrunk.leaving == {3001, 3002}
    with pytest.raises(DevClusterError, match="at least 1"):
        plan_cluster(tmp_path, 0, None)
    more, _ = plan_cluster(tmp_path, 3, 4, is_free=lambda _p: True)
    assert [n.node_id for n in more.brokers] == [1, 2, 3, 4]
    assert more.brokers[:2] == spec.brokers
    ports = all_ports(more)
    assert len(ports) == len(set(ports))
    fewer, _ = plan_cluster(tmp_path, None, 1, is_free=lambda _p: True)
    assert [n.node_id for n in fewer.brokers] == [1]


def test_damaged_cluster_json_is_refused_with_advice(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(DevClusterError, match="delete"):
        plan_cluster(tmp_path, None, None)
    (tmp_path / "cluster.json").write_text(json.dumps({"cluster_id": "short", "processes": []}))
    with pytest.raises(DevClusterError, match="damaged"):
        read_cluster_json(tmp_path)


# -- cluster.json --------------------------------------------------------------------------


def test_cluster_json_lists_every_process(tmp_path: Path) -> None:
    spec, _ = plan_cluster(tmp_path, 1, 1)
    statuses = {"controller-3000": ProcessStatus(pid=42, state="running"),
                "broker-1": ProcessStatus(pid=43, state="exited", exit_code=-9)}
    path = write_cluster_json(spec, statuses, supervisor_pid=7)
    doc = json.loads(path.read_text())
    assert doc["cluster_id"] == spec.cluster_id and doc["supervisor_pid"] == 7
    controller, broker = doc["processes"]
    assert controller == {
        "name": "controller-3000", "role": "controller", "node_id": 3000,
        "address": spec.controllers[0].address, "pid": 42, "state": "running",
        "exit_code": None, "data_dir": str(tmp_path / "controller-3000" / "data"),
        "config_path": str(tmp_path / "controller-3000" / "config.toml"),
        "log_path": str(tmp_path / "controller-3000" / "process.log"),
        "metrics_address": spec.controllers[0].metrics_address,
    }
    assert broker["role"] == "broker" and broker["exit_code"] == -9
    assert broker["metrics_address"] == spec.brokers[0].metrics_address
    assert read_cluster_json(tmp_path) == spec
    # Prometheus' file-based service discovery: one target file per scrape job.
    assert json.loads((tmp_path / "prometheus-controllers.json").read_text()) == [
        {"targets": [spec.controllers[0].metrics_address],
         "labels": {"cluster_id": spec.cluster_id}}]
    assert json.loads((tmp_path / "prometheus-brokers.json").read_text())[0]["targets"] == [
        spec.brokers[0].metrics_address]
    assert not list(tmp_path.glob("*.tmp*")), "written atomically, no leftovers"


# -- configs and data dirs -----------------------------------------------------------------


def test_configs_load_and_data_dirs_are_formatted_once(tmp_path: Path) -> None:
    spec, _ = plan_cluster(tmp_path, 3, 2)
    assert len(prepare_cluster(spec)) == 5
    for node in spec.controllers:
        config = load_controller_config(spec.paths(node).config)
        assert config.driver.node_id == node.node_id
        assert config.listen == node.address
        assert config.metrics_port == node.metrics_port
        assert config.controller.session_timeout_ms <= 10_000
    for node in spec.brokers:
        path = spec.paths(node).config
        config = parse_broker_config(path.read_text(), path)
        assert config.broker_id == node.node_id and config.listen == node.address
        assert config.data_dir == spec.paths(node).data_dir
        check_meta_properties(config.data_dir, spec.cluster_id, node.node_id)
    assert prepare_cluster(spec) == [], "a resume formats nothing"


def test_a_data_dir_of_another_cluster_is_refused(tmp_path: Path) -> None:
    spec, _ = plan_cluster(tmp_path, 1, 0)
    prepare_cluster(spec)
    other = ClusterSpec(tmp_path, random_cluster_id(), spec.nodes)
    with pytest.raises(MetaPropertiesError, match="belongs to cluster"):
        prepare_cluster(other)


def test_node_names_and_addresses() -> None:
    node = NodeSpec("broker", 2, 9000)
    assert node.name == "broker-2" and node.address == "127.0.0.1:9000"
    assert node.metrics_address is None


# -- the session's guards ------------------------------------------------------------------


def test_a_second_session_on_the_same_dir_is_refused(tmp_path: Path) -> None:
    from rich.console import Console

    first = DevSession(tmp_path, 1, 0, Console())
    try:
        with pytest.raises(DevClusterError, match="another `metakraft dev`"):
            DevSession(tmp_path, 1, 0, Console())
    finally:
        first.close()
    DevSession(tmp_path, 1, 0, Console()).close()


def test_leftover_processes_of_a_killed_run_are_found(tmp_path: Path) -> None:
    spec, _ = plan_cluster(tmp_path, 1, 0)
    config = spec.paths(spec.controllers[0]).config
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", str(config)])
    try:
        write_cluster_json(spec, {"controller-3000": ProcessStatus(pid=proc.pid,
                                                                   state="running")})
        time.sleep(0.1)
        assert leftover_processes(tmp_path, spec) == [f"controller-3000 (pid {proc.pid})"]
    finally:
        proc.kill()
        proc.wait()
    assert leftover_processes(tmp_path, spec) == []
