"""Broker config validation and the on-disk local partition state."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_agent.config import EXAMPLE_CONFIG, BrokerConfigError, load_config, parse_config
from broker_agent.local_state import LocalPartitionStore
from broker_agent.reconciler import (
    BecomeFollower,
    BecomeLeader,
    DeleteReplica,
    Instruction,
    LocalReplica,
    ReplicaRole,
)
from controller.storage.meta_properties import format_data_dir, random_cluster_id

GOOD = """
broker_id = 1
cluster_id = "abc"
data_dir = "data"
listen = "127.0.0.1:0"
[controllers]
3000 = "127.0.0.1:9001"
3001 = "127.0.0.1:9002"
[broker]
heartbeat_interval_ms = 250
[tls]
enabled = false
"""


def test_example_parses_and_defaults(tmp_path: Path) -> None:
    example = parse_config(EXAMPLE_CONFIG, tmp_path / "b.toml")
    assert example.broker_id == 1 and example.rack == "r1"
    assert sorted(example.controllers) == [3000, 3001, 3002]
    config = parse_config(GOOD, tmp_path / "b.toml")
    assert config.data_dir == (tmp_path / "data").resolve()
    assert config.heartbeat_interval_ms == 250
    assert config.controlled_shutdown_timeout_ms == 10_000
    assert config.rack is None
    assert not config.driver_config().is_voter
    # Plaintext: no authorizer, no identities; the data plane's defaults.
    assert config.authorizer is None and config.data_backend == "log"
    assert config.data.min_insync_replicas == 1 and config.data.replica_lag_time_max_ms == 10_000
    assert example.data.segment_bytes == 64 * 1024 * 1024
    assert config.replication_listen is None and config.replication_advertised is None
    replicating = parse_config(GOOD + '[data]\nreplication_listen = "127.0.0.1:9093"\n'
                               'replication_advertised = "10.0.0.7:19093"\n',
                               tmp_path / "b.toml")
    assert (replicating.replication_listen, replicating.replication_advertised) == (
        "127.0.0.1:9093", "10.0.0.7:19093")


@pytest.mark.parametrize(("text", "message"), [
    (GOOD.replace("broker_id = 1", "broker_id = 3000"), "also a controller voter id"),
    (GOOD.replace("listen = ", "lisen = "), "unknown key"),
    (GOOD.replace('listen = "127.0.0.1:0"', 'listen = "nowhere"'), "HOST:PORT"),
    (GOOD.replace("[controllers]\n3000 = \"127.0.0.1:9001\"\n3001 = \"127.0.0.1:9002\"", ""),
     "missing [controllers]"),
    (GOOD.replace("heartbeat_interval_ms = 250", "heartbeat_interval_ms = 0"), ">= 1"),
    (GOOD.replace("heartbeat_interval_ms = 250", "heartbat = 1"), "unknown key"),
    (GOOD + '[logging]\nlevel = "LOUD"\n', "logging.level"),
    (GOOD.replace("[tls]\nenabled = false\n", ""), "missing [tls]"),
    (GOOD.replace("enabled = false", "enabled = true"), "tls.ca_file is required"),
    (GOOD.replace("enabled = false", 'enabled = false\ncert_file = "x"'),
     "tls.enabled is false but cert_file"),
    (GOOD.replace("enabled = false", "enabled = false\nbroker_id_pattern = 'x(\\d+)'"),
     "broker_id_pattern needs TLS"),
    (GOOD + '[data]\nbackend = "kafka"\n', "data.backend must be one of"),
    (GOOD + "[data]\nsegment_bytes = 10\n", "data.segment_bytes"),
    (GOOD + "[data]\nreplica_lag_time_max_ms = 0\n", ">= 1"),
    (GOOD + '[data]\nreplication_listen = "9093"\n', "data.replication_listen: expected HOST"),
    (GOOD + '[data]\nreplication_advertised = "10.0.0.1:9093"\n',
     "replication_advertised needs data.replication_listen"),
    (GOOD + "[authorizer]\nsuper_users = [\"alice\"]\n", "authorizer.super_users"),
    ("broker_id = ", "not valid TOML"),
])
def test_bad_configs_are_explained(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BrokerConfigError, match=message.replace("[", r"\[")):
        parse_config(text, tmp_path / "b.toml")


def test_load_checks_the_data_dir(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text(GOOD)
    with pytest.raises(BrokerConfigError):
        load_config(path)  # not formatted
    cluster = random_cluster_id()
    path.write_text(GOOD.replace('"abc"', f'"{cluster}"'))
    format_data_dir(tmp_path / "data", cluster, 2)
    with pytest.raises(BrokerConfigError):
        load_config(path)  # formatted for another node id


def test_store_writes_reads_and_deletes(tmp_path: Path) -> None:
    store = LocalPartitionStore(tmp_path)
    lead = LocalReplica("a", "A", 0, ReplicaRole.LEADER, 1, 3, 7)
    follow = LocalReplica("a", "A", 1, ReplicaRole.FOLLOWER, 2, 1, 2)
    store.apply(BecomeLeader(lead))
    store.apply(BecomeFollower(follow))
    assert LocalPartitionStore(tmp_path).load() == {"a-0": lead, "a-1": follow}
    store.apply(DeleteReplica("a-0", "A", 0))
    assert not (tmp_path / "partitions" / "a-0").exists()
    assert store.replicas == {"a-1": follow}
    # A directory left without its state file (crash after mkdir) reads as None.
    (tmp_path / "partitions" / "b-0").mkdir()
    assert LocalPartitionStore(tmp_path).load() == {"a-1": follow, "b-0": None}
    # No temp files are left behind by the atomic writes.
    assert not list((tmp_path / "partitions").rglob("*.tmp"))


def test_large_plans_use_grouped_durability_with_the_same_result(tmp_path: Path) -> None:
    store = LocalPartitionStore(tmp_path)
    store.apply(BecomeLeader(LocalReplica("old", "O", 0, ReplicaRole.LEADER, 1, 0, 0)))
    replicas = [LocalReplica("t", "T", i, ReplicaRole.FOLLOWER, 2, 1, i) for i in range(100)]
    plan: list[Instruction] = [DeleteReplica("old-0", "O", 0),
                               *(BecomeFollower(r) for r in replicas)]
    store.apply_all(plan)
    on_disk = LocalPartitionStore(tmp_path).load()
    assert on_disk == {r.dir_name: r for r in replicas}
    assert store.replicas == on_disk
    assert not list((tmp_path / "partitions").rglob("*.tmp"))


def test_reconciled_offset_round_trips(tmp_path: Path) -> None:
    store = LocalPartitionStore(tmp_path)
    assert store.read_offset() == -1
    store.write_offset(42)
    assert LocalPartitionStore(tmp_path).read_offset() == 42
