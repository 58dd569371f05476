"""Each dev node's TOML config and formatted data dir.

The settings are the controller's defaults for Raft (they already allow for a
busy two-core laptop: elections after 400-800 ms of silence) with a short broker
session, so a killed broker is fenced within seconds while a broker starved of
CPU for a moment is not.
"""

from __future__ import annotations

import json

from controller.devcluster.layout import ClusterSpec, NodeSpec
from controller.devcluster.security import ensure_credentials, tls_table
from controller.quorum.bootstrap import format_controller
from controller.raft.voters import Voter, VoterSet
from controller.storage.fsutil import atomic_write_bytes
from controller.storage.meta_properties import check_meta_properties, random_directory_id

# A broker silent this long is fenced: about ten missed heartbeats.
SESSION_TIMEOUT_MS = 5_000
HEARTBEAT_INTERVAL_MS = 500
# A broker stopping (SIGTERM) waits at most this for its leaderships to move.
CONTROLLED_SHUTDOWN_TIMEOUT_MS = 5_000
_RAFT = {"election_timeout_ms": 400, "fetch_max_wait_ms": 150, "request_timeout_ms": 300,
         "check_quorum_timeout_ms": 1000}
# The remote tier (a directory beside the nodes): segments close after 20 s of
# activity (or the 8 MiB floor), so a minute of work puts objects in the tier;
# snapshots every 256 KiB of log and a minute of local retention let the local logs
# be trimmed while the tier keeps the whole history.
SEGMENT_MS = 20_000
SNAPSHOT_INTERVAL_BYTES = 256 * 1024
LOCAL_RETENTION_MS = 60_000
TIER_DIR_NAME = "tier"


def _quote(text: str) -> str:
    # A JSON string is a valid TOML basic string (same escapes for what we write).
    return json.dumps(text)


def _address_table(spec: ClusterSpec) -> str:
    return "".join(f"{node_id} = {_quote(address)}\n"
                   for node_id, address in sorted(spec.voters().items()))


def controller_config(spec: ClusterSpec, node: NodeSpec) -> str:
    paths = spec.paths(node)
    raft = "".join(f"{key} = {value}\n" for key, value in _RAFT.items())
    return (
        f"# Written by `metakraft dev` on every start; edits are overwritten.\n"
        f"node_id = {node.node_id}\n"
        f"cluster_id = {_quote(spec.cluster_id)}\n"
        f"data_dir = {_quote(str(paths.data_dir))}\n"
        f"listen = {_quote(node.address)}\n"
        f"\n[voters]\n{_address_table(spec)}"
        f"\n[raft]\n{raft}"
        f"\n[controller]\nsession_timeout_ms = {SESSION_TIMEOUT_MS}\n"
        f"snapshot_interval_bytes = {SNAPSHOT_INTERVAL_BYTES}\n"
        f"\n[log]\nsegment_ms = {SEGMENT_MS}\n"
        f"\n[tier]\nurl = {_quote(tier_url(spec))}\n"
        f"local_retention_ms = {LOCAL_RETENTION_MS}\n"
        f'\n[logging]\nlevel = "INFO"\nformat = "kv"\n'
        f"{_metrics_table(node)}"
        f"{tls_table(spec, node)}"
    )


def _metrics_table(node: NodeSpec) -> str:
    if node.metrics_port is None:
        return ""
    return f"\n[metrics]\naddress = {_quote(node.host)}\nport = {node.metrics_port}\n"


def tier_url(spec: ClusterSpec) -> str:
    """The dev cluster's remote tier: a directory under its data dir."""
    return (spec.root.resolve() / TIER_DIR_NAME).as_uri()


def broker_config(spec: ClusterSpec, node: NodeSpec) -> str:
    paths = spec.paths(node)
    return (
        f"# Written by `metakraft dev` on every start; edits are overwritten.\n"
        f"broker_id = {node.node_id}\n"
        f"cluster_id = {_quote(spec.cluster_id)}\n"
        f"data_dir = {_quote(str(paths.data_dir))}\n"
        f"listen = {_quote(node.address)}\n"
        f"\n[controllers]\n{_address_table(spec)}"
        f"\n[broker]\nheartbeat_interval_ms = {HEARTBEAT_INTERVAL_MS}\n"
        f"controlled_shutdown_timeout_ms = {CONTROLLED_SHUTDOWN_TIMEOUT_MS}\n"
        f'\n[logging]\nlevel = "INFO"\nformat = "kv"\n'
        f"{_metrics_table(node)}"
        f"{tls_table(spec, node)}"
    )


def node_config(spec: ClusterSpec, node: NodeSpec) -> str:
    return controller_config(spec, node) if node.role == "controller" else broker_config(spec, node)


def prepare_node(spec: ClusterSpec, node: NodeSpec,
                 initial_controllers: VoterSet | None = None) -> bool:
    """Format the node's data dir if new, check it belongs to this cluster and node,
    and (re)write its config. True if the data dir was formatted now.

    Controllers of a new cluster are the initial voters of a dynamic quorum
    (`initial_controllers`); a controller added later, and every broker, joins it
    (`--no-initial-controllers`: the voter set comes from the log)."""
    paths = spec.paths(node)
    paths.root.mkdir(parents=True, exist_ok=True)
    voters = initial_controllers if node.role == "controller" else None
    formatted = format_controller(paths.data_dir, spec.cluster_id, node.node_id,
                                  initial_controllers=voters, ignore_formatted=True)
    # Raises MetaPropertiesError (a clear message) if the dir is another cluster's.
    check_meta_properties(paths.data_dir, spec.cluster_id, node.node_id)
    atomic_write_bytes(paths.config, node_config(spec, node).encode("utf-8"))
    return formatted


def prepare_cluster(spec: ClusterSpec) -> list[NodeSpec]:
    """Prepare every node; returns the nodes whose data dir was formatted now."""
    spec.root.mkdir(parents=True, exist_ok=True)
    if spec.secure:
        ensure_credentials(spec)
    initial = None
    if not any(spec.paths(n).data_dir.exists() for n in spec.controllers):
        initial = VoterSet.of(Voter(n.node_id, random_directory_id(), n.address)
                              for n in spec.controllers)
    return [node for node in spec.nodes if prepare_node(spec, node, initial)]
