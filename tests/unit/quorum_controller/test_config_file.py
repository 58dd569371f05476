"""The daemon's TOML config: a good one parses; each kind of mistake gets a message
naming the key and what to do; the CLI exits 2 with that message."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.quorum_controller.config_file import EXAMPLE_CONFIG, load_config, parse_config
from controller.storage.meta_properties import format_data_dir, random_cluster_id
from controller.tier.remote import open_store
from controller.toml_config import ConfigError

CID = random_cluster_id()
GOOD = f"""
node_id = 2
cluster_id = "{CID}"
data_dir = "data"
[voters]
1 = "127.0.0.1:9001"
2 = "127.0.0.1:9002"
3 = "127.0.0.1:9003"
[raft]
election_timeout_ms = 500
[controller]
session_timeout_ms = 4000
[logging]
format = "json"
[tls]
enabled = false
"""


def test_good_config_parses_with_defaults_and_relative_data_dir(tmp_path: Path) -> None:
    config = parse_config(GOOD, tmp_path / "c.toml")
    assert config.driver.node_id == 2 and config.driver.election_timeout_ms == 500
    assert config.driver.data_dir == (tmp_path / "data").resolve()
    assert config.listen == "127.0.0.1:9002"
    assert config.controller.session_timeout_ms == 4000
    assert config.controller.voter_addresses[3] == "127.0.0.1:9003"
    assert config.log_format == "json" and config.log_level == "INFO"
    assert config.controller.snapshot_busy_percent == 25
    busy = parse_config(GOOD.replace("session_timeout_ms = 4000", "snapshot_busy_percent = 100"),
                        tmp_path / "c.toml")
    assert busy.controller.snapshot_busy_percent == 100
    assert config.controller.snapshot_max_interval_ms == 60_000
    untimed = parse_config(GOOD.replace("session_timeout_ms = 4000",
                                        "snapshot_max_interval_ms = 0"), tmp_path / "c.toml")
    assert untimed.controller.snapshot_max_interval_ms == 0


def test_example_config_is_valid(tmp_path: Path) -> None:
    config = parse_config(EXAMPLE_CONFIG, tmp_path / "example.toml")
    assert config.driver.node_id == 1 and len(config.driver.voter_addresses) == 3


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("node_id = 2\n", ""), "missing required key 'node_id'"),
    (lambda t: t.replace("node_id = 2", 'node_id = "two"'), "node_id: expected an integer"),
    (lambda t: t.replace("node_id = 2", "node_id = 7"), "not among the voters"),
    (lambda t: t.replace('1 = "127.0.0.1:9001"', '1 = "nowhere"'), "voters.1: expected HOST:PORT"),
    (lambda t: t.replace("session_timeout_ms", "session_timeout"), "unknown key(s) session_timeout"),
    (lambda t: t.replace("election_timeout_ms = 500", "election_timeout_ms = 100"),
     "election_timeout_ms must exceed fetch_max_wait_ms"),
    (lambda t: t.replace("session_timeout_ms = 4000", "session_timeout_ms = 0"), "must be >= 1"),
    (lambda t: t.replace("session_timeout_ms = 4000", "snapshot_busy_percent = 101"),
     "controller.snapshot_busy_percent: must be <= 100, got 101"),
    (lambda t: t.replace("session_timeout_ms = 4000", "snapshot_busy_percent = 0"),
     "controller.snapshot_busy_percent: must be >= 1"),
    (lambda t: t.replace("session_timeout_ms = 4000", "snapshot_max_interval_ms = -1"),
     "controller.snapshot_max_interval_ms: must be >= 0"),
    (lambda t: t.replace('format = "json"', 'format = "xml"'), "logging.format"),
    (lambda t: t + "\n[[oops", "not valid TOML"),
    (lambda t: t.replace("[tls]\nenabled = false\n", ""), "missing [tls]"),
    (lambda t: t.replace("enabled = false", "enabled = maybe"), "not valid TOML"),
    (lambda t: t.replace("enabled = false", 'enabled = "no"'), "tls.enabled: expected true"),
    (lambda t: t.replace("enabled = false", 'enabled = false\ncontroller_principals = '
                         '["User:c1"]'), "controller_principals needs TLS"),
    (lambda t: t.replace("enabled = false", 'enabled = false\nprincipal_mapping_rules = '
                         '["RULE:(/x/"]'), "principal_mapping_rules"),
    (lambda t: t.replace("enabled = false", 'enabled = false\nprincipal_mapping_rules = '
                         '["NOPE"]'), "neither DEFAULT nor RULE"),
    (lambda t: t + '[authorizer]\nsuper_users = ["alice"]\n', "must be User:<name>"),
    (lambda t: t + '[authorizer]\nsuper_users = [""]\n', "must not be empty"),
    (lambda t: t + "[authorizer]\nenabled = 1\n", "authorizer.enabled: expected true"),
    (lambda t: t + "[authorizer]\nsuperusers = []\n", "unknown key(s) superusers"),
    (lambda t: t.split("[voters]")[0], "missing [voters]"),
    (lambda t: t.replace("enabled = false", "enabled = false\ncontroller_id_pattern = ''"),
     "controller_id_pattern needs TLS"),
    (lambda t: t + '[log]\non_log_damage = "ignore"\n', "log.on_log_damage: expected one of"),
])
def test_bad_configs_say_what_is_wrong(tmp_path: Path, edit: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(edit(GOOD), tmp_path / "c.toml")  # type: ignore[operator]
    assert message in str(info.value)


def test_data_dir_must_be_formatted_for_this_cluster_and_node(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    with pytest.raises(ConfigError, match="not formatted"):
        load_config(path)
    format_data_dir(tmp_path / "data", CID, 3)
    with pytest.raises(ConfigError, match="belongs to node 3, not node 2"):
        load_config(path)


def test_cli_bad_config_exits_2_with_the_message(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace("node_id = 2", "node_id = 9"))
    result = CliRunner().invoke(cli, ["controller", "--config", str(path)])
    assert result.exit_code == 2
    assert "bad config" in result.output and "not among the voters" in result.output
    missing = CliRunner().invoke(cli, ["controller", "--config", str(tmp_path / "none.toml")])
    assert missing.exit_code == 2 and "cannot read config file" in missing.output


def test_cli_prints_the_example() -> None:
    result = CliRunner().invoke(cli, ["controller", "--print-example"])
    assert result.exit_code == 0 and result.output == EXAMPLE_CONFIG


TIER = GOOD + """
[log]
segment_ms = 30000
[tier]
url = "file:///var/tier"
local_retention_bytes = 1048576
retention_ms = -1
copy_max_bytes_per_second = 5000000
"""


def test_log_and_tier_sections_parse_and_gate_local_deletion(tmp_path: Path) -> None:
    config = parse_config(TIER, tmp_path / "c.toml")
    assert config.driver.log_config.segment_ms == 30000
    assert config.driver.tiered
    assert config.tier is not None and config.tier.url == "file:///var/tier"
    assert (config.tier.local_retention_bytes, config.tier.local_retention_ms) == (1048576,
                                                                                 600_000)
    assert config.tier.copy_max_bytes_per_second == 5_000_000
    plain = parse_config(GOOD, tmp_path / "c.toml")
    assert plain.tier is None and not plain.driver.tiered


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace('url = "file:///var/tier"', ""), "tier.url is required"),
    (lambda t: t.replace("file:///var/tier", "file://var/tier"), "file:///absolute/path"),
    (lambda t: t.replace("file:///var/tier", "ftp://host/x"), "expected file:///path or s3://"),
    (lambda t: t.replace("file:///var/tier", "s3://b/p?endpont=http://x"), "unknown option"),
    (lambda t: t.replace("retention_ms = -1", "retention_ms = -2"), "tier.retention_ms: must be >= -1"),
    (lambda t: t.replace("per_second = 5000000", "per_second = -3"),
     "tier.copy_max_bytes_per_second: must be >= -1"),
    (lambda t: t.replace("retention_ms = -1", "retention_ms = \"1h\""), "expected an integer"),
    (lambda t: t.replace("retention_ms = -1", "retension_ms = 5"), "unknown key(s) retension_ms"),
    (lambda t: t.replace("retention_ms = -1", 'access_key_id = "a"'), "go together"),
    (lambda t: t.replace("retention_ms = -1", 'access_key_id = "a"\nsecret_access_key = "b"'),
     "for an s3:// tier"),
    (lambda t: t.replace("segment_ms = 30000", "segment_ms = 0"), "log.segment_ms: must be >= 1"),
    (lambda t: t.replace("segment_ms = 30000", "segment_bytes = 1024"),
     "segment_bytes must be in"),
    (lambda t: t.replace("file:///var/tier", "file:///TMP/data/metadata/tier"),
     "inside the log directory"),
])
def test_bad_tier_configs_say_what_is_wrong(tmp_path: Path, edit: object, message: str) -> None:
    text = edit(TIER).replace("/TMP", str(tmp_path))  # type: ignore[operator]
    with pytest.raises(ConfigError) as info:
        parse_config(text, tmp_path / "c.toml")
    assert message in str(info.value)


def test_identity_patterns_bind_each_principal_to_one_node(tmp_path: Path) -> None:
    example = parse_config(EXAMPLE_CONFIG, tmp_path / "example.toml")
    identities = example.identities
    assert identities.controller_refusal("User:controller-2", 2) is None
    assert identities.controller_refusal("User:controller-2", 1) == (
        "User:controller-2 is controller 2, not node 1")
    assert identities.broker_refusal("User:broker-7", 7, is_super_user=False) is None
    assert "is broker 7, not broker 3" in str(
        identities.broker_refusal("User:broker-7", 3, is_super_user=True))
    assert identities.broker_refusal("User:admin", 3, is_super_user=True) is None
    assert "names no broker" in str(
        identities.broker_refusal("User:tool", 3, is_super_user=False))
    # A listed controller principal the pattern cannot bind is a config error ...
    renamed = EXAMPLE_CONFIG.replace('"User:controller-3"]', '"User:cc3"]')
    with pytest.raises(ConfigError, match="User:cc3 names no node id"):
        parse_config(renamed, tmp_path / "c.toml")
    # ... unless the pattern says how it does, or the binding is turned off.
    custom = renamed.replace("controller_id_pattern = 'User:controller-(\\d+)'",
                             "controller_id_pattern = 'User:c(?:ontroller-|c)(\\d+)'")
    assert parse_config(custom, tmp_path / "c.toml").identities.controller_refusal(
        "User:cc3", 3) is None
    off = renamed.replace("controller_id_pattern = 'User:controller-(\\d+)'",
                          "controller_id_pattern = ''")
    assert parse_config(off, tmp_path / "c.toml").identities.controller_refusal(
        "User:cc3", 1) is None
    with pytest.raises(ConfigError, match="exactly one group"):
        parse_config(EXAMPLE_CONFIG.replace("broker_id_pattern = 'User:broker-(\\d+)'",
                                            "broker_id_pattern = 'User:broker-'"),
                     tmp_path / "c.toml")


def test_an_s3_tier_without_boto3_says_which_extra_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The core install leaves boto3 out: a None in sys.modules makes its import fail.
    monkeypatch.setitem(sys.modules, "boto3", None)
    text = TIER.replace("file:///var/tier", "s3://bucket/prefix?endpoint=http://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"pip install 'metakraft\[s3\]'"):
        parse_config(text, tmp_path / "c.toml")
    with pytest.raises(ValueError, match=r"an s3:// tier needs boto3"):
        open_store("s3://bucket/prefix?endpoint=http://127.0.0.1:9")
    # A directory tier needs nothing more.
    assert parse_config(TIER, tmp_path / "c.toml").tier is not None
