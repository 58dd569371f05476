"""The bare node's command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.quorum.driver_config import DriverConfig, parse_voters
from tests.support.quorum_harness.node_main import build_config, parse_args


def test_parse_voters() -> None:
    assert parse_voters("1=127.0.0.1:9001, 2=h:9002") == {1: "127.0.0.1:9001", 2: "h:9002"}
    for bad in ("", "1=127.0.0.1", "x=h:1", "1=h:1,1=h:2"):
        with pytest.raises(ValueError):
            parse_voters(bad)


def test_arguments_make_a_config(tmp_path: Path) -> None:
    args = parse_args(["--node-id", "4", "--voters", "1=h:1,2=h:2,3=h:3", "--data-dir",
                       str(tmp_path), "--cluster-id", "c" * 22, "--election-timeout-ms", "800"])
    config = build_config(args)
    assert not config.is_voter  # node 4 observes
    assert config.election_timeout_ms == 800
    assert config.fetch_max_wait_ms == DriverConfig.__attrs_attrs__.fetch_max_wait_ms.default
    assert config.raft_config().voters == frozenset({1, 2, 3})


def test_inconsistent_timeouts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        DriverConfig(node_id=1, cluster_id="c", voter_addresses={1: "h:1"}, data_dir=tmp_path,
                     election_timeout_ms=100, fetch_max_wait_ms=200)
    with pytest.raises(ValueError):
        DriverConfig(node_id=1, cluster_id="c", voter_addresses={1: "h:1"}, data_dir=tmp_path,
                     max_inbox_events=0)
