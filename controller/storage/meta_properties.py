"""Data-directory formatting: `meta.properties` and the directory layout.

A node refuses to start on a directory that was not formatted for it: the
cluster id guards against pointing a controller at another cluster's data, the
node id against two nodes swapping directories. Both are fixed by `metakraft
storage format` and checked on every start (`check_meta_properties`).

Cluster ids are Kafka-style: the 16 bytes of a random UUID in URL-safe base64
without padding (22 characters, e.g. `MkU3OEVBNTcwNTJENDM2Qg`).

`meta.properties` is a Java-properties style text file::

    # metakraft meta.properties: written by `metakraft storage format`, do not edit
    cluster.id=MkU3OEVBNTcwNTJENDM2Qg
    node.id=1
    version=1
    directory.id=J8bZ0F3wRk-2Xh4Vv0a1Qg
    kraft.version=1

`directory.id` is this directory's own random id (same form as a cluster id): with
the node id it is the replica's identity in the quorum, so a wiped and reformatted
disk is a new replica, never the voter it replaces. `kraft.version=1` marks a
directory formatted for a dynamic quorum (the voter set lives in the log; see
controller/raft/voters.py); without it the quorum's voters are the configured ones.
Directories formatted before these keys existed read as "no directory id, static".
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from pathlib import Path

import attrs

from controller.storage.errors import (
    ClusterIdMismatchError,
    MetaPropertiesError,
    NodeIdMismatchError,
    StorageNotFormattedError,
)
from controller.storage.fsutil import atomic_write_bytes, fsync_dir

META_PROPERTIES = "meta.properties"
META_PROPERTIES_VERSION = 1
_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


@attrs.frozen
class DataDir:
    """Where everything lives under one node's data directory."""

    root: Path

    @property
    def meta_properties(self) -> Path:
        return self.root / META_PROPERTIES

    @property
    def log_dir(self) -> Path:
        return self.root / "metadata"

    @property
    def snapshot_dir(self) -> Path:
        return self.root / "snapshots"

    @property
    def quorum_state(self) -> Path:
        return self.root / "quorum-state"

    @property
    def leader_epoch_checkpoint(self) -> Path:
        return self.root / "leader-epoch-checkpoint"

    @property
    def recovery_point(self) -> Path:
        return self.root / "log-recovery-point"

    @property
    def log_repair(self) -> Path:
        return self.root / "log-repair-pending"


@attrs.frozen
class MetaProperties:
    cluster_id: str
    node_id: int
    version: int = META_PROPERTIES_VERSION
    # "" for directories formatted before directory ids existed.
    directory_id: str = ""
    # 1: formatted for a dynamic quorum (voters in the log); 0: static voters.
    kraft_version: int = 0


def random_cluster_id() -> str:
    """A new cluster id: URL-safe base64 (no padding) of a random UUID's 16 bytes.

    Ids starting with '-' are drawn again (as Kafka does): they read as options on
    a command line.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def random_directory_id() -> str:
    """A new directory id (the same form as a cluster id)."""
    return random_cluster_id()


def validate_directory_id(directory_id: str) -> None:
    if not _CLUSTER_ID.match(directory_id):
        raise ValueError(f"invalid directory id {directory_id!r}: expected 22 characters of "
                         "URL-safe base64 (as `metakraft storage random-uuid` prints)")


def validate_cluster_id(cluster_id: str) -> None:
    if not _CLUSTER_ID.match(cluster_id):
        raise ValueError(f"invalid cluster id {cluster_id!r}: expected 22 characters of URL-safe "
                         "base64, as printed by `metakraft storage random-uuid`")


def _fix_hint(data_dir: Path) -> str:
    return (f"run `metakraft storage format --cluster-id <ID> --node-id <N> "
            f"--data-dir {data_dir}` (get an id with `metakraft storage random-uuid`)")


def read_meta_properties(data_dir: str | os.PathLike[str]) -> MetaProperties:
    """Parse DIR/meta.properties; `StorageNotFormattedError` if missing or unreadable."""
    root = Path(data_dir)
    path = root / META_PROPERTIES
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise StorageNotFormattedError(
            f"{root} is not formatted (no {META_PROPERTIES}); {_fix_hint(root)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageNotFormattedError(f"cannot read {path}: {exc}") from None
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, sep, value = line.partition("=")
            if sep:
                props[key.strip()] = value.strip()
    try:
        meta = MetaProperties(props["cluster.id"], int(props["node.id"]), int(props["version"]),
                              props.get("directory.id", ""),
                              int(props.get("kraft.version", "0")))
        validate_cluster_id(meta.cluster_id)
        if meta.directory_id:
            validate_directory_id(meta.directory_id)
        if meta.kraft_version not in (0, 1):
            raise ValueError(f"unknown kraft.version {meta.kraft_version}")
    except (KeyError, ValueError) as exc:
        raise StorageNotFormattedError(
            f"{path} is damaged ({exc}); restore it or reformat an empty directory: "
            f"{_fix_hint(root)}") from None
    if meta.version != META_PROPERTIES_VERSION:
        raise StorageNotFormattedError(f"{path}: unsupported version {meta.version} "
                                       f"(this code reads version {META_PROPERTIES_VERSION})")
    return meta


def cluster_id_of(log_dir: str | os.PathLike[str]) -> str | None:
    """The cluster id of a data directory, or of the data directory holding a
    `metadata/` directory given; None when it is not formatted (a bare copy of
    segments). A damaged meta.properties is a `MetaPropertiesError`."""
    path = Path(log_dir)
    for root in (path, path.parent):
        if (root / META_PROPERTIES).is_file():
            return read_meta_properties(root).cluster_id
    return None


def check_meta_properties(data_dir: str | os.PathLike[str], expected_cluster_id: str | None = None,
                          expected_node_id: int | None = None) -> MetaProperties:
    """Check the directory was formatted for this cluster and node; returns what it holds."""
    meta = read_meta_properties(data_dir)
    if expected_cluster_id is not None and meta.cluster_id != expected_cluster_id:
        raise ClusterIdMismatchError(
            f"{data_dir} belongs to cluster {meta.cluster_id}, not {expected_cluster_id}: "
            "check the configured cluster id, or point --data-dir at this cluster's directory "
            f"(an empty directory can be formatted: {_fix_hint(Path(data_dir))})")
    if expected_node_id is not None and meta.node_id != expected_node_id:
        raise NodeIdMismatchError(
            f"{data_dir} belongs to node {meta.node_id}, not node {expected_node_id}: "
            "check --node-id, or point --data-dir at this node's own directory "
            f"(an empty directory can be formatted: {_fix_hint(Path(data_dir))})")
    return meta


class AlreadyFormattedError(MetaPropertiesError):
    """Formatting was refused; the message says why and what to do."""


def format_data_dir(data_dir: str | os.PathLike[str], cluster_id: str, node_id: int,
                    ignore_formatted: bool = False, *, directory_id: str | None = None,
                    kraft_version: int = 0) -> bool:
    """Write meta.properties and create the layout; True if formatted, False if skipped.

    `directory_id`: this directory's id (a new random one when None); `kraft_version`
    1 for a dynamic quorum (`controller.quorum.bootstrap` writes its first voter set).

    An already formatted directory is an error, or skipped untouched with
    `ignore_formatted`. A non-empty directory without meta.properties is always
    refused: it holds something we did not write.
    """
    validate_cluster_id(cluster_id)
    directory_id = random_directory_id() if directory_id is None else directory_id
    validate_directory_id(directory_id)
    if kraft_version not in (0, 1):
        raise ValueError(f"kraft version must be 0 or 1, got {kraft_version}")
    if node_id < 0:
        raise ValueError(f"node id must be >= 0, got {node_id}")
    layout = DataDir(Path(data_dir))
    root = layout.root
    if root.exists() and not root.is_dir():
        raise AlreadyFormattedError(f"{root} exists and is not a directory")
    if layout.meta_properties.exists():
        if ignore_formatted:
            return False
        raise AlreadyFormattedError(
            f"{root} is already formatted ({META_PROPERTIES} exists); refusing to reformat. "
            "Pass --ignore-formatted to leave it as it is, or delete the directory to start over")
    if root.exists() and any(root.iterdir()):
        raise AlreadyFormattedError(
            f"{root} is not empty and has no {META_PROPERTIES}; refusing to format a "
            "directory holding files we did not write. Use an empty or new directory")
    root.mkdir(parents=True, exist_ok=True)
    layout.log_dir.mkdir(exist_ok=True)
    layout.snapshot_dir.mkdir(exist_ok=True)
    text = (f"# metakraft meta.properties: written by `metakraft storage format`, do not edit\n"
            f"cluster.id={cluster_id}\nnode.id={node_id}\nversion={META_PROPERTIES_VERSION}\n"
            f"directory.id={directory_id}\n"
            + ("kraft.version=1\n" if kraft_version else ""))
    atomic_write_bytes(layout.meta_properties, text.encode("utf-8"))
    fsync_dir(root)
    if root.parent != root:
        fsync_dir(root.parent)
    return True
