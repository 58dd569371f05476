"""The broker agent's TOML config (`metakraft broker --config FILE`).

The shape is a contract shared with `metakraft dev` (see EXAMPLE_CONFIG). Every key
is type-checked, unknown keys are refused (a typo must not silently fall back to a
default), and the broker id must not be a controller voter id: the broker's Raft
observer uses its broker id as node id, and a voter id would make it vote.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

import attrs

from broker_agent.replica.config import DEFAULT_DATA_PLANE, DataPlaneConfig
from controller.logformat.batch import MAX_BATCH_BYTES
from controller.metadata.features import METADATA_VERSION, SUPPORTED_FEATURES
from controller.quorum.driver_config import DriverConfig
from controller.security.authorizer import AuthorizerConfig
from controller.security.config_tables import authorizer_table, identities_table
from controller.security.identity import UNBOUND, NodeIdentities
from controller.security.tls import PLAINTEXT, TlsConfig, parse_tls_table
from controller.storage.errors import MetaPropertiesError
from controller.storage.meta_properties import check_meta_properties
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

EXAMPLE_CONFIG = """\
# metakraft broker agent configuration (TOML). Start with:
#   metakraft broker --config broker.toml
# The data directory must be formatted first, with the broker id as node id:
#   metakraft storage format --cluster-id <id> --node-id <broker_id> --data-dir <data_dir>

broker_id = 1                       # this broker's id; must NOT be a controller voter id
cluster_id = "1XeTHGqDTB2wmsRK7Ib5Tg"
data_dir = "/var/lib/metakraft/broker-1"
listen = "127.0.0.1:0"              # gRPC server (status RPC, health); port 0 = free port
rack = "r1"                         # optional: failure domain for replica placement

# The controller quorum's voters: id = "host:port" (the controllers' gRPC servers).
[controllers]
3000 = "127.0.0.1:9001"
3001 = "127.0.0.1:9002"
3002 = "127.0.0.1:9003"

# Mutual TLS to the controllers and on this broker's status server (required; to run
# plaintext say `enabled = false`). The controllers must let this certificate's
# principal follow the log and heartbeat: CLUSTER_ACTION on the cluster, e.g.
#   metakraft acls add --allow-principal User:broker-1 --operation CLUSTER_ACTION --cluster
[tls]
ca_file = "/etc/metakraft/tls/ca.crt"
cert_file = "/etc/metakraft/tls/broker-1.crt"
key_file = "/etc/metakraft/tls/broker-1.key"

[broker]
heartbeat_interval_ms = 500             # heartbeat period (the controller's session
                                        # timeout must be several of these)
controlled_shutdown_timeout_ms = 10000  # on SIGTERM, wait at most this for the
                                        # controller to move our leaderships away

# The data plane: the partition logs this broker hosts (DATA_DIR/partition-logs).
[data]
backend = "log"                         # "log": replicated partition logs (Produce/Fetch);
                                        # "none": metadata only (the local state files)
segment_bytes = 67108864                # roll a partition log segment past this size
retention_ms = 604800000                # keep 7 days unless the topic sets retention.ms
retention_bytes = -1                    # no size limit unless the topic sets retention.bytes
min_insync_replicas = 1                 # unless the topic sets min.insync.replicas
replica_fetch_wait_ms = 500             # a follower's fetch waits this long for data
replica_lag_time_max_ms = 10000         # a follower behind this long leaves the ISR
# replication_listen = "127.0.0.1:9193"  # a second listener that followers fetch from
                                        # (Kafka's inter-broker listener); default: `listen`
# replication_advertised = "10.0.0.7:9193"  # the address registered for it, when others
                                        # reach it through a proxy or NAT (default: bound)

# Who may produce and consume (ACLs from the metadata: WRITE / READ / DESCRIBE on a
# topic; a follower's fetch needs CLUSTER_ACTION, and a certificate that names the
# fetching broker under tls.broker_id_pattern, 'User:broker-(\\d+)' by default).
# On by default when TLS is on.
[authorizer]
# enabled = true
super_users = ["User:admin"]
allow_everyone_if_no_acl_found = false

[logging]
level = "INFO"                  # DEBUG, INFO, WARNING, ERROR
format = "kv"                   # "kv" (key=value) or "json", one line per event, stderr
"""


# One error type for every config file (controller.toml_config raises it too).
BrokerConfigError = ConfigError


_TOP_KEYS = ("broker_id", "cluster_id", "data_dir", "listen", "rack", "controllers", "broker",
             "logging", "metrics", "tls", "data", "authorizer")
_BROKER_KEYS = ("heartbeat_interval_ms", "controlled_shutdown_timeout_ms")
DATA_BACKENDS = ("log", "none")
_REPLICATION_KEYS = ("replication_listen", "replication_advertised")
_DATA_INT_KEYS = {"segment_bytes": MAX_BATCH_BYTES, "retention_ms": -1, "retention_bytes": -1,
                  "min_insync_replicas": 1, "replica_fetch_wait_ms": 1,
                  "retention_check_interval_ms": 1, "replica_lag_time_max_ms": 1,
                  "isr_check_interval_ms": 1}


@attrs.frozen(kw_only=True)
class BrokerConfig:
    path: Path
    broker_id: int
    cluster_id: str
    data_dir: Path
    listen: str
    rack: str | None
    controllers: Mapping[int, str]
    heartbeat_interval_ms: int = 500
    controlled_shutdown_timeout_ms: int = 10_000
    log_level: str = "INFO"
    log_format: str = "kv"
    # [metrics]: Prometheus exporter; None serves none, 0 picks a free port.
    metrics_address: str = "127.0.0.1"
    metrics_port: int | None = None
    # Mutual TLS to the controllers and on the status server.
    tls: TlsConfig = PLAINTEXT
    # [data]: "log" hosts replicated partition logs, "none" only the local state.
    data_backend: str = "log"
    data: DataPlaneConfig = DEFAULT_DATA_PLANE
    # [authorizer] for the data service (None: every authenticated caller may
    # produce and consume); on by default when TLS is.
    authorizer: AuthorizerConfig | None = None
    # [data] replication_listen / replication_advertised: a listener of its own for
    # follower fetches (None: followers fetch from `listen`), and the address
    # registered for it (None: the bound one).
    replication_listen: str | None = None
    replication_advertised: str | None = None
    # Which broker id a certificate may fetch as a follower for ([tls]
    # broker_id_pattern, as the controllers'); UNBOUND on plaintext.
    identities: NodeIdentities = UNBOUND

    def driver_config(self) -> DriverConfig:
        """The Raft observer: node id = broker id, not among the voters."""
        config = DriverConfig(node_id=self.broker_id, cluster_id=self.cluster_id,
                              voter_addresses=self.controllers, data_dir=self.data_dir,
                              tls=self.tls.credentials,
                              supported_versions=SUPPORTED_FEATURES[METADATA_VERSION])
        assert not config.is_voter
        return config


def parse_config(text: str, path: Path) -> BrokerConfig:
    """Validate a config document (no file system checks)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BrokerConfigError(f"not valid TOML: {exc}") from None
    reject_unknown(doc, _TOP_KEYS, "")
    for key in ("broker_id", "cluster_id", "data_dir", "listen"):
        if key not in doc:
            raise BrokerConfigError(f"missing required key {key!r} (see --print-example)")
    broker_id = require_int(doc, "broker_id", "", minimum=0)
    cluster_id = require_str(doc, "cluster_id")
    data_dir = Path(require_str(doc, "data_dir"))
    if not data_dir.is_absolute():
        data_dir = (path.parent / data_dir).resolve()
    listen = host_port(require_str(doc, "listen"), "listen")
    rack = require_str(doc, "rack") if "rack" in doc else None
    controllers = id_address_table(doc, "controllers", "controller")
    if broker_id in controllers:
        raise BrokerConfigError(
            f"broker_id {broker_id} is also a controller voter id ({sorted(controllers)}): "
            "the broker's metadata observer uses its broker id as Raft node id, so the ids "
            "must differ (e.g. controllers 3000+, brokers 1, 2, 3)")
    broker = sub_table(doc, "broker")
    reject_unknown(broker, _BROKER_KEYS, "broker.")
    values = {k: require_int(broker, k, "broker.", minimum=1) for k in _BROKER_KEYS if k in broker}
    level, log_format = logging_table(doc)
    metrics_address, metrics_port = metrics_table(doc)
    tls = parse_tls_table(doc, path.parent, required=True, extra_keys=("broker_id_pattern",))
    # A broker binds only broker ids (its followers' fetches).
    identities = attrs.evolve(identities_table(doc, tls), controller_pattern=None)
    data_backend, data = _data_table(doc)
    replication_listen, replication_advertised = (
        host_port(require_str(sub_table(doc, "data"), key), f"data.{key}")
        if key in sub_table(doc, "data") else None for key in _REPLICATION_KEYS)
    if replication_advertised is not None and replication_listen is None:
        raise BrokerConfigError("data.replication_advertised needs data.replication_listen "
                                "(the listener it advertises)")
    authorizer = authorizer_table(doc, tls)
    config = BrokerConfig(data_backend=data_backend, data=data, authorizer=authorizer,
                          replication_listen=replication_listen,
                          replication_advertised=replication_advertised,
                          identities=identities, path=path, broker_id=broker_id, cluster_id=cluster_id,
                          data_dir=data_dir, listen=listen, rack=rack, controllers=controllers,
                          log_level=level, log_format=log_format, tls=tls,
                          metrics_address=metrics_address, metrics_port=metrics_port, **values)
    try:
        config.driver_config()
    except ValueError as exc:
        raise BrokerConfigError(f"inconsistent settings: {exc}") from None
    return config


def _data_table(doc: Mapping[str, object]) -> tuple[str, DataPlaneConfig]:
    table = sub_table(doc, "data")
    reject_unknown(table, ("backend", *_DATA_INT_KEYS, *_REPLICATION_KEYS), "data.")
    backend = require_str(table, "backend") if "backend" in table else "log"
    if backend not in DATA_BACKENDS:
        raise BrokerConfigError(f"data.backend must be one of {', '.join(DATA_BACKENDS)}, "
                                f"not {backend!r}")
    values = {key: require_int(table, key, "data.", minimum=low)
              for key, low in _DATA_INT_KEYS.items() if key in table}
    if values.get("segment_bytes", MAX_BATCH_BYTES) >= 2**31:
        raise BrokerConfigError("data.segment_bytes must be below 2147483648")
    return backend, DataPlaneConfig(**values)


def load_config(path: Path) -> BrokerConfig:
    """Read, validate, and check the data directory belongs to this cluster and broker."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise BrokerConfigError(f"cannot read config file {path}: {exc.strerror or exc}") \
            from None
    except UnicodeDecodeError:
        raise BrokerConfigError(f"config file {path} is not UTF-8 text") from None
    config = parse_config(text, path)
    try:
        check_meta_properties(config.data_dir, config.cluster_id, config.broker_id)
    except MetaPropertiesError as exc:
        raise BrokerConfigError(str(exc)) from None
    return attrs.evolve(config, tls=config.tls.load())
