"""Formatting a data directory and checking it on start."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.storage.errors import (
    ClusterIdMismatchError,
    NodeIdMismatchError,
    StorageNotFormattedError,
)
from controller.storage.meta_properties import (
    AlreadyFormattedError,
    DataDir,
    check_meta_properties,
    format_data_dir,
    random_cluster_id,
    read_meta_properties,
    validate_cluster_id,
)


def test_random_cluster_ids_are_kafka_style_and_distinct() -> None:
    ids = {random_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        validate_cluster_id(cluster_id)
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")


def test_format_writes_layout_and_properties(tmp_path: Path) -> None:
    cid = random_cluster_id()
    root = tmp_path / "node1"
    assert format_data_dir(root, cid, 1)
    layout = DataDir(root)
    assert layout.log_dir.is_dir() and layout.snapshot_dir.is_dir()
    text = layout.meta_properties.read_text()
    assert f"cluster.id={cid}" in text and "node.id=1" in text and "version=1" in text
    meta = check_meta_properties(root, cid, 1)
    assert (meta.cluster_id, meta.node_id, meta.version) == (cid, 1, 1)
    assert not list(root.glob("*.tmp"))


def test_reformat_is_refused_unless_ignore_formatted(tmp_path: Path) -> None:
    cid = random_cluster_id()
    format_data_dir(tmp_path / "d", cid, 1)
    before = (tmp_path / "d" / "meta.properties").read_bytes()
    with pytest.raises(AlreadyFormattedError, match="already formatted"):
        format_data_dir(tmp_path / "d", random_cluster_id(), 2)
    assert not format_data_dir(tmp_path / "d", random_cluster_id(), 2, ignore_formatted=True)
    assert (tmp_path / "d" / "meta.properties").read_bytes() == before


def test_non_empty_unformatted_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "stranger.txt").write_text("x")
    with pytest.raises(AlreadyFormattedError, match="not empty"):
        format_data_dir(tmp_path, random_cluster_id(), 1, ignore_formatted=True)


def test_bad_cluster_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="random-uuid"):
        format_data_dir(tmp_path / "d", "short", 1)


def test_not_formatted_error_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(StorageNotFormattedError, match="metakraft storage format"):
        check_meta_properties(tmp_path)


def test_cluster_id_mismatch(tmp_path: Path) -> None:
    cid = random_cluster_id()
    format_data_dir(tmp_path / "d", cid, 1)
    other = random_cluster_id()
    with pytest.raises(ClusterIdMismatchError, match=f"belongs to cluster {cid}, not {other}"):
        check_meta_properties(tmp_path / "d", expected_cluster_id=other)


def test_node_id_mismatch(tmp_path: Path) -> None:
    cid = random_cluster_id()
    format_data_dir(tmp_path / "d", cid, 1)
    with pytest.raises(NodeIdMismatchError, match="belongs to node 1, not node 2"):
        check_meta_properties(tmp_path / "d", cid, 2)


@pytest.mark.parametrize("text", [
    "cluster.id=abc\nnode.id=1\nversion=1\n",
    "node.id=1\nversion=1\n",
    "cluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=x\nversion=1\n",
    "cluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=1\nversion=9\n",
])
def test_damaged_meta_properties_is_a_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "meta.properties").write_text(text)
    with pytest.raises(StorageNotFormattedError, match=r"meta\.properties"):
        read_meta_properties(tmp_path)
