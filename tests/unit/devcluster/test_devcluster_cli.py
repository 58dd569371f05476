"""`metakraft dev` refuses what it cannot do before starting any process, and says
what to try next once running."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from controller.cli.dev_cmd import dev
from controller.devcluster.layout import plan_cluster, write_cluster_json
from controller.devcluster.runner import next_steps
from controller.devcluster.session import DevSession
from controller.storage.meta_properties import format_data_dir


def test_scenario_needs_three_brokers(tmp_path: Path) -> None:
    result = CliRunner().invoke(dev, ["--data-dir", str(tmp_path), "--scenario", "--brokers", "2"])
    assert result.exit_code == 2, result.output
    assert "needs at least 3 brokers" in result.output
    assert not (tmp_path / "cluster.json").exists()


def test_resume_of_a_static_cluster_with_another_controller_count_is_refused(
        tmp_path: Path) -> None:
    spec, _ = plan_cluster(tmp_path, 3, 0)
    write_cluster_json(spec, {})
    for node in spec.controllers:  # formatted before dynamic quorums existed
        format_data_dir(spec.paths(node).data_dir, spec.cluster_id, node.node_id)
    result = CliRunner().invoke(dev, ["--data-dir", str(tmp_path), "--controllers", "5"])
    assert result.exit_code == 2, result.output
    assert "has 3 controllers" in result.output


def test_next_steps_name_the_cluster(tmp_path: Path) -> None:
    session = DevSession(tmp_path, 3, 2, Console())
    try:
        lines = "\n".join(next_steps(session, leader=None))
    finally:
        session.close()
    spec = session.spec
    assert f"export METAKRAFT_BOOTSTRAP={spec.bootstrap}" in lines
    for command in ("topics list", "topics describe --name demo", "cluster describe",
                    "quorum describe", f"broker-status --address {spec.brokers[0].address}",
                    "log dump", "cluster.json"):
        assert command in lines, command
