"""The controller daemon's TOML config: parse, validate, explain what is wrong.

Every key is checked for presence and type, unknown keys are refused (a typo must
not silently fall back to a default), and the node must be one of the voters: a
controller is never an observer. `load_config` also checks the data directory's
meta.properties, so a wrong cluster or node id fails at start with the storage
layer's message and the command that fixes it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from controller.metadata.features import METADATA_VERSION, SUPPORTED_FEATURES
from controller.metadata.levels import LATEST_METADATA_VERSION
from controller.quorum.driver_config import DriverConfig
from controller.quorum_controller.ports import ControllerSettings
from controller.security.authorizer import AuthorizerConfig
from controller.security.config_tables import (
    authorizer_table,
    identities_table,
    principal_list,
)
from controller.security.identity import IDENTITY_KEYS, UNBOUND, NodeIdentities
from controller.security.tls import PLAINTEXT, TlsConfig, parse_tls_table
from controller.storage.errors import MetaPropertiesError
from controller.storage.log_config import LOG_DAMAGE_POLICIES, LogConfig
from controller.storage.meta_properties import check_meta_properties
from controller.tier.config import TierConfig
from controller.tier.remote import parse_tier_url, require_s3_client
from controller.toml_config import (
    ConfigError,
    host_port,
    id_address_table,
    logging_table,
    metrics_table,
    reject_unknown,
    require_int,
    require_str,
    sub_table,
)
from controller.watch.service import WatchSettings

EXAMPLE_CONFIG = """\
# metakraft controller configuration (TOML). Start with:
#   metakraft controller --config controller.toml
# The data directory must be formatted first:
#   metakraft storage format --cluster-id <id> --node-id <node_id> --data-dir <data_dir>

node_id = 1                                # this controller's id; must be a voter
cluster_id = "1XeTHGqDTB2wmsRK7Ib5Tg"      # from `metakraft storage random-uuid`
data_dir = "/var/lib/metakraft/controller-1"
# host:port this process serves gRPC on (Raft, Admin, broker, health, reflection).
# Default: this node's address in [voters]. Port 0 picks a free port.
# listen = "0.0.0.0:9001"

# Every voter of the quorum: id = "host:port" of its gRPC server.
[voters]
1 = "127.0.0.1:9001"
2 = "127.0.0.1:9002"
3 = "127.0.0.1:9003"

[raft]
election_timeout_ms = 400       # a follower waits 1-2x this without a leader, then runs
fetch_max_wait_ms = 150         # long-poll wait of a fetch with nothing new
request_timeout_ms = 300        # a peer call not answered within this is retried
check_quorum_timeout_ms = 1000  # a leader cut off from a majority this long resigns

[controller]
session_timeout_ms = 9000       # a broker silent this long is fenced
max_queued_events = 10000       # more requests waiting than this: "busy"
max_items_per_request = 10000   # topics/resources/partitions in one request
request_timeout_ms = 30000      # the longest a request waits for its answer
orphan_timeout_ms = 5000        # after losing leadership, wait this for a write's fate
snapshot_interval_bytes = 16777216  # snapshot after this many bytes of new committed log
snapshot_interval_image_multiple = 2  # ... and at least this many times the last snapshot's size (0: off)
snapshot_max_interval_ms = 60000  # ... or this long after the last one, once the interval's bytes came (0: off)
snapshot_busy_percent = 25      # share of the controller's time a snapshot being written may take
# bootstrap_metadata_version = 6  # the level a new cluster starts at (default: the latest)
metadata_max_idle_interval_ms = 500  # an idle log gets a no-op record this often (0: never)

[log]
segment_bytes = 67108864        # a log segment is closed past this size ...
segment_ms = 604800000          # ... or this age (only closed segments are tiered)
# Records this controller had fsynced found damaged or missing on start (a flipped
# byte, deleted segments): "repair" cuts them, takes no part in elections until it
# fetched them again from the leader, then votes again; "refuse" exits naming the
# file and offset. Either way, it never votes as if it still had them.
on_log_damage = "repair"

# The remote tier: closed, committed log segments and snapshots are copied there,
# and the local log is trimmed once they are (leave out [tier] for none: then the
# log below the newest snapshot is deleted, and its history is gone).
# [tier]
# url = "file:///var/lib/metakraft/tier"     # or "s3://bucket/prefix?endpoint=http://host:9000&region=us-east-1"
# access_key_id = "..."                     # S3 only; default: the AWS environment
# secret_access_key = "..."
# copy_interval_ms = 1000                   # look for work this often when idle
# copy_timeout_ms = 30000                   # abandon a predecessor's copy after this
# local_retention_ms = 600000               # keep tiered local segments this long (-1: no limit)
# local_retention_bytes = -1                # ... or at most this many bytes of them (-1: no limit)
# retention_ms = -1                         # delete tier objects older than this (-1: keep forever)
# retention_bytes = -1                      # ... or beyond this many bytes (-1: keep forever)
# copy_max_bytes_per_second = -1            # upload at most this fast, averaged (-1: no limit)

# Watch (`metakraft watch`): programs that follow the metadata log.
[watch]
max_watchers = 1000             # open watches on this controller; more are refused
send_timeout_ms = 10000         # a watcher that takes no events this long is cut off (it resumes)

# Mutual TLS on every connection (peers, brokers, admin clients). Required: to run
# plaintext (no authentication at all) say so with `enabled = false`.
[tls]
ca_file = "/etc/metakraft/tls/ca.crt"       # the CA bundle every peer's certificate is checked against
cert_file = "/etc/metakraft/tls/controller-1.crt"   # must name this host (SAN) for its peers
key_file = "/etc/metakraft/tls/controller-1.key"
principal_mapping_rules = ["DEFAULT"]       # DEFAULT: User:<subject CN>; or RULE:regex/replacement/[LU]
# Only these may send Raft messages (votes, voter fetches); others may only observe.
controller_principals = ["User:controller-1", "User:controller-2", "User:controller-3"]
# Each principal speaks only for the node id it names (group 1 of the pattern): a
# controller certificate cannot claim another voter, a broker's another broker.
# "" turns a binding off (any allowed principal may then speak for any id).
controller_id_pattern = 'User:controller-(\\d+)'
broker_id_pattern = 'User:broker-(\\d+)'

# ACLs (metakraft acls ...). On by default when TLS is on.
[authorizer]
# enabled = true
super_users = ["User:admin"]                # may do anything, ACLs or not
allow_everyone_if_no_acl_found = false      # true: a resource without ACLs is open to all

[logging]
level = "INFO"                  # DEBUG, INFO, WARNING, ERROR
format = "kv"                   # "kv" (key=value) or "json", one line per event, stderr

# Prometheus exporter at http://address:port/metrics; leave out [metrics] for none.
[metrics]
address = "127.0.0.1"
port = 9108                     # 0 picks a free port (logged at start)
"""


_RAFT_KEYS = ("election_timeout_ms", "fetch_max_wait_ms", "request_timeout_ms",
              "check_quorum_timeout_ms")
_CONTROLLER_KEYS = ("session_timeout_ms", "max_queued_events", "max_items_per_request",
                    "request_timeout_ms", "orphan_timeout_ms", "snapshot_interval_bytes",
                    "snapshot_interval_image_multiple", "snapshot_busy_percent",
                    "snapshot_max_interval_ms", "bootstrap_metadata_version",
                    "metadata_max_idle_interval_ms")
# Keys that may be 0 (everything else in [controller] is at least 1), and the upper
# bounds of those that have one.
_CONTROLLER_ZERO_OK = ("snapshot_interval_image_multiple", "snapshot_max_interval_ms",
                       "metadata_max_idle_interval_ms")
_CONTROLLER_MAXIMUM = {"snapshot_busy_percent": 100,
                       "bootstrap_metadata_version": LATEST_METADATA_VERSION}
_LOG_KEYS = ("segment_bytes", "segment_ms")
_LOG_STR_KEYS = ("on_log_damage",)
_TIER_INT_KEYS = ("copy_interval_ms", "copy_timeout_ms", "max_backoff_ms", "local_retention_ms",
                  "local_retention_bytes", "retention_ms", "retention_bytes",
                  "copy_max_bytes_per_second")
_TIER_STR_KEYS = ("url", "access_key_id", "secret_access_key")
_WATCH_KEYS = ("max_watchers", "send_timeout_ms")
_TOP_KEYS = {"node_id", "cluster_id", "data_dir", "listen", "voters", "raft", "controller",
             "logging", "metrics", "log", "tier", "tls", "authorizer", "watch"}


@attrs.frozen(kw_only=True)
class DaemonConfig:
    path: Path
    driver: DriverConfig
    controller: ControllerSettings
    listen: str
    log_level: str = "INFO"
    log_format: str = "kv"
    # Prometheus exporter; None: no exporter.
    metrics_address: str = "127.0.0.1"
    metrics_port: int | None = None
    # The remote tier; None: none.
    tier: TierConfig | None = None
    # Mutual TLS (PLAINTEXT only when the config says `[tls] enabled = false`).
    tls: TlsConfig = PLAINTEXT
    # Who may send Raft messages (with TLS; empty without).
    controller_principals: frozenset[str] = frozenset()
    # None: no authorizer (every authenticated caller may do everything).
    authorizer: AuthorizerConfig | None = None
    # Which node id each principal may speak for (with TLS; security/identity.py).
    identities: NodeIdentities = UNBOUND
    watch: WatchSettings = attrs.field(factory=WatchSettings)


def parse_config(text: str, path: Path) -> DaemonConfig:
    """Validate a config document (no file system checks)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}") from None
    reject_unknown(doc, _TOP_KEYS, "")
    for key in ("node_id", "cluster_id", "data_dir"):
        if key not in doc:
            raise ConfigError(f"missing required key {key!r} (see --print-example)")
    node_id = require_int(doc, "node_id", "", minimum=0)
    cluster_id = require_str(doc, "cluster_id")
    data_dir = Path(require_str(doc, "data_dir"))
    if not data_dir.is_absolute():
        data_dir = (path.parent / data_dir).resolve()
    voters = id_address_table(doc, "voters", "controller")
    if node_id not in voters and "listen" not in doc:
        raise ConfigError(
            f"node_id {node_id} is not among the voters {sorted(voters)}: list it in [voters], "
            "or, for a controller that joins a dynamic quorum (formatted with "
            "--no-initial-controllers), set listen = \"HOST:PORT\" and list the current "
            "voters in [voters]")
    listen = host_port(require_str(doc, "listen"), "listen") if "listen" in doc else voters[node_id]

    raft = sub_table(doc, "raft")
    reject_unknown(raft, _RAFT_KEYS, "raft.")
    raft_values: dict[str, Any] = {k: require_int(raft, k, "raft.") for k in _RAFT_KEYS if k in raft}
    ctl = sub_table(doc, "controller")
    reject_unknown(ctl, _CONTROLLER_KEYS, "controller.")
    ctl_values: dict[str, Any] = {
        k: require_int(ctl, k, "controller.", minimum=0 if k in _CONTROLLER_ZERO_OK else 1,
                       maximum=_CONTROLLER_MAXIMUM.get(k))
        for k in _CONTROLLER_KEYS if k in ctl}
    level, log_format = logging_table(doc)
    metrics_address, metrics_port = metrics_table(doc)
    log_table = sub_table(doc, "log")
    reject_unknown(log_table, _LOG_KEYS + _LOG_STR_KEYS, "log.")
    log_values: dict[str, Any] = {k: require_int(log_table, k, "log.", minimum=1)
                                  for k in _LOG_KEYS if k in log_table}
    on_log_damage = require_str(log_table, "on_log_damage", "log.") \
        if "on_log_damage" in log_table else "repair"
    if on_log_damage not in LOG_DAMAGE_POLICIES:
        raise ConfigError(f"log.on_log_damage: expected one of {list(LOG_DAMAGE_POLICIES)}, "
                          f"got {on_log_damage!r}")
    tier = _tier_config(doc, data_dir) if "tier" in doc else None
    watch_table = sub_table(doc, "watch")
    reject_unknown(watch_table, _WATCH_KEYS, "watch.")
    watch = WatchSettings(**{k: require_int(watch_table, k, "watch.")
                             for k in _WATCH_KEYS if k in watch_table})
    tls = parse_tls_table(doc, path.parent, required=True,
                          extra_keys=("controller_principals", *IDENTITY_KEYS))
    controller_principals = _controller_principals(doc, tls)
    identities = _identities(doc, tls, controller_principals)
    authorizer = authorizer_table(doc, tls)
    try:
        # evolve() re-runs the validators with the configured values.
        driver = attrs.evolve(DriverConfig(node_id=node_id, cluster_id=cluster_id,
                                           voter_addresses=voters, data_dir=data_dir),
                              log_config=LogConfig(**log_values), tiered=tier is not None,
                              on_log_damage=on_log_damage,
                              supported_versions=SUPPORTED_FEATURES[METADATA_VERSION],
                              **raft_values)
        settings = attrs.evolve(ControllerSettings(node_id=node_id, cluster_id=cluster_id,
                                                   voter_addresses=voters,
                                                   listen_address=listen), **ctl_values)
    except ValueError as exc:
        raise ConfigError(f"inconsistent settings: {exc}") from None
    return DaemonConfig(path=path, driver=driver, controller=settings, listen=listen,
                        log_level=level, log_format=log_format, metrics_address=metrics_address,
                        metrics_port=metrics_port, tier=tier, tls=tls,
                        controller_principals=controller_principals, authorizer=authorizer,
                        identities=identities, watch=watch)


def _controller_principals(doc: Mapping[str, Any], tls: TlsConfig) -> frozenset[str]:
    table = sub_table(doc, "tls")
    principals = principal_list(table, "controller_principals", "tls.")
    if tls.enabled and not principals:
        raise ConfigError("tls.controller_principals is required with TLS: the principals "
                          "of the controllers' certificates (only they may send Raft votes "
                          "and voter fetches), e.g. [\"User:controller-1\", ...]")
    if not tls.enabled and principals:
        raise ConfigError("tls.controller_principals needs TLS (a plaintext peer has no "
                          "identity to check)")
    return principals


def _identities(doc: Mapping[str, Any], tls: TlsConfig,
                controller_principals: frozenset[str]) -> NodeIdentities:
    identities = identities_table(doc, tls)
    pattern = identities.controller_pattern
    unbound = sorted(p for p in controller_principals
                     if pattern is not None and not pattern.fullmatch(p))
    if unbound:
        raise ConfigError(
            f"tls.controller_principals: {', '.join(unbound)} names no node id under "
            f"tls.controller_id_pattern {pattern.pattern if pattern else ''!r}: name the "
            "certificates controller-<id>, or set the pattern to match them (\"\" lets any "
            "controller certificate speak for any voter)")
    return identities


def _tier_config(doc: dict[str, Any], data_dir: Path) -> TierConfig:
    table = sub_table(doc, "tier")
    reject_unknown(table, _TIER_INT_KEYS + _TIER_STR_KEYS, "tier.")
    if "url" not in table:
        raise ConfigError("tier.url is required in [tier] (file:///path or s3://bucket/prefix)")
    values: dict[str, Any] = {k: require_str(table, k, "tier.") for k in _TIER_STR_KEYS
                              if k in table}
    values.update({k: require_int(table, k, "tier.", minimum=-1) for k in _TIER_INT_KEYS
                   if k in table})
    try:
        tier = TierConfig(**values)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    location = parse_tier_url(tier.url)
    if location.scheme == "s3":
        try:
            require_s3_client()
        except ValueError as exc:
            raise ConfigError(f"tier.url: {exc}") from None
    if location.scheme == "file" and Path(location.path).resolve().is_relative_to(
            data_dir.resolve() / "metadata"):
        raise ConfigError(f"tier.url {tier.url} is inside the log directory; put the tier "
                          "elsewhere (e.g. a sibling directory or a shared mount)")
    return tier


def load_config(path: Path) -> DaemonConfig:
    """Read, validate, and check the data directory belongs to this cluster and node."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    config = parse_config(text, path)
    try:
        check_meta_properties(config.driver.data_dir, config.driver.cluster_id,
                              config.driver.node_id)
    except MetaPropertiesError as exc:
        raise ConfigError(str(exc)) from None
    tls = config.tls.load()
    return attrs.evolve(config, tls=tls, driver=attrs.evolve(config.driver,
                                                             tls=tls.credentials))
