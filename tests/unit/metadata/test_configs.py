"""Config manager: validation, incremental alter ops, describe with sources."""

from __future__ import annotations

import pytest

from controller.metadata import (
    CONFIG_KEYS,
    AlterConfigOp,
    AlterConfigsResource,
    ApiError,
    ConfigResource,
    ConfigSource,
    ErrorCode,
    OpType,
    ResourceType,
)
from controller.metadata.configs import ConfigurationControlManager
from controller.records import record_type
from tests.unit.metadata.support import Harness

TOPIC = ConfigResource(ResourceType.TOPIC, "t")
BROKER_DEFAULT = ConfigResource(ResourceType.BROKER, "")
BROKER_1 = ConfigResource(ResourceType.BROKER, "1")
CLUSTER = ConfigResource(ResourceType.CLUSTER, "")


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.add_brokers([1])
    harness.create("t")
    return harness


def alter(h: Harness, resource: ConfigResource, *ops: AlterConfigOp, validate_only: bool = False):
    result = h.state.configs.incremental_alter_configs(
        [AlterConfigsResource(resource, ops)], validate_only=validate_only
    )
    return result


def test_at_least_eight_known_keys() -> None:
    topic_keys = [k for k, s in CONFIG_KEYS.items() if ResourceType.TOPIC in s.applies_to]
    assert len(topic_keys) >= 8
    for key in (
        "retention.ms",
        "segment.bytes",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "cleanup.policy",
    ):
        assert key in topic_keys


def test_set_and_delete(h: Harness) -> None:
    result = alter(h, TOPIC, AlterConfigOp("retention.ms", OpType.SET, " 1000 "))
    assert result.response[0].error.ok and [record_type(r) for r in result.records] == ["config"]
    h.apply(result)
    assert h.state.configs.get(TOPIC, "retention.ms") == "1000"
    # Setting the same value again writes nothing.
    assert alter(h, TOPIC, AlterConfigOp("retention.ms", OpType.SET, "1000")).records == ()
    h.apply(alter(h, TOPIC, AlterConfigOp("retention.ms", OpType.DELETE)))
    assert h.state.configs.get(TOPIC, "retention.ms") is None
    h.check()


def test_append_and_subtract_on_lists(h: Harness) -> None:
    h.apply(alter(h, TOPIC, AlterConfigOp("cleanup.policy", OpType.APPEND, "compact")))
    assert h.state.configs.get(TOPIC, "cleanup.policy") == "delete,compact"
    h.apply(alter(h, TOPIC, AlterConfigOp("cleanup.policy", OpType.SUBTRACT, "delete")))
    assert h.state.configs.get(TOPIC, "cleanup.policy") == "compact"
    empty = alter(h, TOPIC, AlterConfigOp("cleanup.policy", OpType.SUBTRACT, "compact"))
    assert empty.records == () and empty.response[0].error.code is ErrorCode.INVALID_CONFIG
    h.check()


@pytest.mark.parametrize(
    ("resource", "op", "code", "needle"),
    [
        (
            TOPIC,
            AlterConfigOp("no.such.key", OpType.SET, "1"),
            ErrorCode.INVALID_CONFIG,
            "no.such.key",
        ),
        (TOPIC, AlterConfigOp("retention.ms", OpType.SET, "-2"), ErrorCode.INVALID_CONFIG, "[-1,"),
        (
            TOPIC,
            AlterConfigOp("retention.ms", OpType.SET, "soon"),
            ErrorCode.INVALID_CONFIG,
            "'soon'",
        ),
        # Found from outside: Python's int() takes these, a config must not.
        (TOPIC, AlterConfigOp("retention.ms", OpType.SET, "1_000"), ErrorCode.INVALID_CONFIG,
         "'1_000'"),
        (TOPIC, AlterConfigOp("retention.ms", OpType.SET, "\u0661\u0662"),
         ErrorCode.INVALID_CONFIG, "retention.ms"),
        (TOPIC, AlterConfigOp("retention.ms", OpType.SET, "+5"), ErrorCode.INVALID_CONFIG,
         "'+5'"),
        # More digits than CPython's int() takes (4,300): INVALID_CONFIG, not INTERNAL.
        (TOPIC, AlterConfigOp("retention.ms", OpType.SET, "9" * 5000), ErrorCode.INVALID_CONFIG,
         "retention.ms"),
        (TOPIC, AlterConfigOp("retention.ms", OpType.SET, "-" + "9" * 20),
         ErrorCode.INVALID_CONFIG, "retention.ms"),
        (TOPIC, AlterConfigOp("segment.bytes", OpType.SET, "13"), ErrorCode.INVALID_CONFIG, "[14,"),
        (
            TOPIC,
            AlterConfigOp("segment.bytes", OpType.SET, str(2**31)),
            ErrorCode.INVALID_CONFIG,
            "2147483647",
        ),
        (
            TOPIC,
            AlterConfigOp("min.insync.replicas", OpType.SET, "0"),
            ErrorCode.INVALID_CONFIG,
            "[1,",
        ),
        (
            TOPIC,
            AlterConfigOp("unclean.leader.election.enable", OpType.SET, "yes"),
            ErrorCode.INVALID_CONFIG,
            "true or false",
        ),
        (
            TOPIC,
            AlterConfigOp("cleanup.policy", OpType.SET, "delete,shred"),
            ErrorCode.INVALID_CONFIG,
            "compact",
        ),
        (
            TOPIC,
            AlterConfigOp("compression.type", OpType.SET, "brotli"),
            ErrorCode.INVALID_CONFIG,
            "zstd",
        ),
        (
            TOPIC,
            AlterConfigOp("retention.ms", OpType.APPEND, "5"),
            ErrorCode.INVALID_CONFIG,
            "list",
        ),
        (
            TOPIC,
            AlterConfigOp("retention.ms", OpType.SET, None),
            ErrorCode.INVALID_REQUEST,
            "value",
        ),
        (
            TOPIC,
            AlterConfigOp("num.partitions", OpType.SET, "3"),
            ErrorCode.INVALID_CONFIG,
            "topic",
        ),
        (
            ConfigResource(ResourceType.TOPIC, "missing"),
            AlterConfigOp("retention.ms", OpType.SET, "1"),
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "missing",
        ),
        (
            ConfigResource(ResourceType.BROKER, "x1"),
            AlterConfigOp("retention.ms", OpType.SET, "1"),
            ErrorCode.INVALID_REQUEST,
            "broker id",
        ),
        (
            ConfigResource(ResourceType.CLUSTER, "c"),
            AlterConfigOp("num.partitions", OpType.SET, "1"),
            ErrorCode.INVALID_REQUEST,
            "''",
        ),
        (
            CLUSTER,
            AlterConfigOp("background.threads", OpType.SET, "1"),
            ErrorCode.INVALID_CONFIG,
            "cluster",
        ),
    ],
)
def test_bad_input_gets_its_error_and_no_record(
    h: Harness, resource: ConfigResource, op: AlterConfigOp, code: ErrorCode, needle: str
) -> None:
    result = alter(h, resource, op)
    assert result.records == ()
    error = result.response[0].error
    assert error.code is code, error
    assert needle in error.message, error.message


def test_a_resource_applies_all_or_nothing_and_others_proceed(h: Harness) -> None:
    good = AlterConfigsResource(BROKER_1, (AlterConfigOp("background.threads", OpType.SET, "4"),))
    bad = AlterConfigsResource(
        TOPIC,
        (
            AlterConfigOp("retention.ms", OpType.SET, "5"),
            AlterConfigOp("segment.bytes", OpType.SET, "1"),
        ),
    )
    result = h.state.configs.incremental_alter_configs([good, bad])
    assert [r.error.code for r in result.response] == [ErrorCode.NONE, ErrorCode.INVALID_CONFIG]
    assert len(result.records) == 1
    h.apply(result)
    assert h.state.configs.get(TOPIC, "retention.ms") is None


def test_an_integer_padded_with_zeros_is_its_value(h: Harness) -> None:
    result = alter(h, TOPIC, AlterConfigOp("retention.ms", OpType.SET, "0" * 5000 + "42"))
    assert result.response[0].error.ok, result.response
    h.apply(result)
    assert h.state.configs.get(TOPIC, "retention.ms") == "42"
    h.check()


def test_duplicates(h: Harness) -> None:
    twice = AlterConfigsResource(TOPIC, (AlterConfigOp("retention.ms", OpType.SET, "5"),))
    result = h.state.configs.incremental_alter_configs([twice, twice])
    assert result.records == () and {r.error.code for r in result.response} == {
        ErrorCode.DUPLICATE_RESOURCE
    }
    same_key = alter(
        h,
        TOPIC,
        AlterConfigOp("retention.ms", OpType.SET, "5"),
        AlterConfigOp("retention.ms", OpType.DELETE),
    )
    assert same_key.records == () and same_key.response[0].error.code is ErrorCode.INVALID_REQUEST


def test_validate_only(h: Harness) -> None:
    result = alter(h, TOPIC, AlterConfigOp("retention.ms", OpType.SET, "5"), validate_only=True)
    assert result.records == () and result.response[0].error.ok


def test_describe_with_sources_and_inheritance(h: Harness) -> None:
    h.apply(alter(h, BROKER_DEFAULT, AlterConfigOp("retention.ms", OpType.SET, "77")))
    h.apply(alter(h, TOPIC, AlterConfigOp("segment.bytes", OpType.SET, "1000")))
    (described,) = h.state.configs.describe_configs([TOPIC])
    entries = {e.key: e for e in described.entries}
    assert entries["retention.ms"].value == "77"
    assert entries["retention.ms"].source is ConfigSource.DYNAMIC_DEFAULT_BROKER
    assert entries["segment.bytes"].value == "1000"
    assert entries["segment.bytes"].source is ConfigSource.DYNAMIC_TOPIC
    assert entries["min.insync.replicas"].source is ConfigSource.DEFAULT
    assert "num.partitions" not in entries
    (missing,) = h.state.configs.describe_configs([ConfigResource(ResourceType.TOPIC, "nope")])
    assert missing.error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (broker,) = h.state.configs.describe_configs([BROKER_1])
    assert {e.key: e.source for e in broker.entries}[
        "retention.ms"
    ] is ConfigSource.DYNAMIC_DEFAULT_BROKER
    h.check()


def test_unclean_falls_back_to_the_cluster_wide_broker_default(h: Harness) -> None:
    assert not h.state.configs.topic_flag("t", "unclean.leader.election.enable")
    h.apply(
        alter(
            h, BROKER_DEFAULT, AlterConfigOp("unclean.leader.election.enable", OpType.SET, "TRUE")
        )
    )
    assert h.state.configs.get(BROKER_DEFAULT, "unclean.leader.election.enable") == "true"
    assert h.state.configs.topic_flag("t", "unclean.leader.election.enable")


def test_reads_at_an_epoch(h: Harness) -> None:
    h.apply(alter(h, TOPIC, AlterConfigOp("retention.ms", OpType.SET, "5")))
    committed = h.committed
    h.apply(alter(h, TOPIC, AlterConfigOp("retention.ms", OpType.SET, "6")))
    assert h.state.configs.get(TOPIC, "retention.ms", committed) == "5"
    assert h.state.configs.dynamic_configs(TOPIC, committed) == {"retention.ms": "5"}


def test_describe_at_an_epoch_before_the_topic_existed(h: Harness) -> None:
    committed = h.committed
    h.create("later")
    resource = ConfigResource(ResourceType.TOPIC, "later")
    (then,) = h.state.configs.describe_configs([resource], committed)
    assert then.error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (now,) = h.state.configs.describe_configs([resource])
    assert now.error.ok


def test_a_key_of_another_resource_type_is_named_in_the_error() -> None:
    error = ConfigurationControlManager.check_key(ResourceType.CLUSTER, "min.insync.replicas")
    assert isinstance(error, ApiError) and error.code is ErrorCode.INVALID_CONFIG
    assert error.message.startswith(
        "config 'min.insync.replicas' cannot be set on a cluster; cluster configs are: "
    )
