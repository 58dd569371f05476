"""The ACL manager: generate-only writes, per-item validation, idempotent creates,
deletes that report what they matched, replay, snapshots and revert."""

from __future__ import annotations

import random

import pytest

from controller.metadata import ErrorCode, MetadataState
from controller.records import MetadataRecord
from controller.security.acl import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)


def state() -> MetadataState:
    return MetadataState(cluster_id="c", rng=random.Random(1))


def apply(s: MetadataState, records: tuple[MetadataRecord, ...]) -> None:
    end = s.replay_batch(records, s.last_applied_offset() + 1)
    s.registry.create_snapshot(end - 1)


def alice(name: str = "orders", op: Operation = Operation.READ,
          pattern: PatternType = PatternType.LITERAL,
          permission: Permission = Permission.ALLOW) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, "User:alice", "*", op, permission)


def test_create_is_per_item_and_idempotent() -> None:
    s = state()
    bad = alice(op=Operation.CLUSTER_ACTION)  # not a topic operation
    result = s.access.create_acls([alice(), bad, alice()])
    assert [r.error.code for r in result.response] == [ErrorCode.NONE,
                                                       ErrorCode.INVALID_REQUEST,
                                                       ErrorCode.NONE]
    assert "does not apply to TOPIC" in result.response[1].error.message
    assert len(result.records) == 1  # the duplicate in the same request writes nothing
    assert list(s.access.bindings()) == []  # generate changes nothing
    apply(s, result.records)
    again = s.access.create_acls([alice()])
    assert again.records == () and again.response[0].error.ok


@pytest.mark.parametrize(("binding", "message"), [
    (alice(name=""), "resource name must not be empty"),
    (AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "", "*", Operation.READ,
                Permission.ALLOW), "principal must not be empty"),
    (AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "alice", "*", Operation.READ,
                Permission.ALLOW), "must be User:<name>"),
    (alice(pattern=PatternType.MATCH), "is for filters"),
    (alice(name="*", pattern=PatternType.PREFIXED), "cannot use the name '*'"),
    (alice(op=Operation.ANY), "does not apply"),
    (alice(permission=Permission.ANY), "ALLOW or DENY"),
    (AclBinding(ResourceType.CLUSTER, "other", PatternType.LITERAL, "User:a", "*",
                Operation.ALTER, Permission.ALLOW), "CLUSTER resource is named"),
    (AclBinding(ResourceType.ANY, "t", PatternType.LITERAL, "User:a", "*", Operation.ALL,
                Permission.ALLOW), "cannot carry ACLs"),
    (alice(name="x" * 256), "longer than 255"),
    (AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:a", "", Operation.READ,
                Permission.ALLOW), "host must not be empty"),
])
def test_malformed_bindings_are_refused_with_a_reason(binding: AclBinding,
                                                      message: str) -> None:
    (result,) = state().access.create_acls([binding]).response
    assert result.error.code is ErrorCode.INVALID_REQUEST
    assert message in result.error.message


def test_delete_reports_matches_per_filter_and_each_entry_is_removed_once() -> None:
    s = state()
    cluster = AclBinding(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, PatternType.LITERAL,
                         "User:bob", "*", Operation.ALTER, Permission.ALLOW)
    apply(s, s.access.create_acls([alice(), alice("team-", pattern=PatternType.PREFIXED),
                                   cluster]).records)
    result = s.access.delete_acls([
        AclFilter(principal="User:alice"),
        AclFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL),
        AclFilter(principal="User:nobody"),  # matches nothing: not an error
    ])
    matched = [r.deleted for r in result.response]
    assert [len(m) for m in matched] == [2, 1, 0]
    assert all(r.error.ok for r in result.response)
    assert len(result.records) == 2  # "orders" is removed once though two filters match it
    apply(s, result.records)
    assert list(s.access.bindings()) == [cluster]


def test_match_filter_selects_what_applies_to_a_resource() -> None:
    s = state()
    wanted = [alice("team-a"), alice("*"), alice("team-", pattern=PatternType.PREFIXED)]
    apply(s, s.access.create_acls([*wanted, alice("team-b"),
                                   alice("teams", pattern=PatternType.PREFIXED)]).records)
    found = s.access.describe_acls(AclFilter(ResourceType.TOPIC, "team-a", PatternType.MATCH))
    assert found.error.ok and set(found.bindings) == set(wanted)
    bad = s.access.describe_acls(AclFilter(pattern_type=PatternType.MATCH))
    assert bad.error.code is ErrorCode.INVALID_REQUEST


def test_acls_survive_a_snapshot_and_revert_with_the_timeline() -> None:
    s = state()
    apply(s, s.access.create_acls([alice()]).records)
    committed = s.last_applied_offset()
    version = s.access.version()
    apply(s, s.access.create_acls([alice("other")]).records)
    assert s.access.version() == version + 1
    copy = state()
    for record in s.snapshot_records():
        copy.replay(record, 100)
    assert copy.to_image().acls == s.to_image().acls
    s.registry.revert_to_snapshot(committed)
    assert list(s.access.bindings()) == [alice()] and s.access.version() == version
