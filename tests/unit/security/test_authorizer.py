"""The authorizer against Kafka's StandardAuthorizer rules, case by case, and its
index against a brute-force reading of the same rules on random ACL sets."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.security.acl import (
    CLUSTER_RESOURCE_NAME,
    IMPLIED_BY,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from controller.security.authorizer import (
    Action,
    AuthorizerConfig,
    StandardAuthorizer,
)

ALICE = "User:alice"
BOB = "User:bob"


class Acls:
    """An AclSource over a list the test changes (the version counts changes)."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self.items = list(bindings)
        self.version = 0
        self.builds = 0

    def add(self, *bindings: AclBinding) -> None:
        self.items += bindings
        self.version += 1

    def acl_version(self) -> int:
        return self.version

    def acl_bindings(self) -> Iterable[AclBinding]:
        self.builds += 1
        return list(self.items)


def topic_acl(name: str, op: Operation, permission: Permission = Permission.ALLOW, *,
              principal: str = ALICE, pattern: PatternType = PatternType.LITERAL,
              host: str = "*") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, host, op, permission)


def authorizer(*bindings: AclBinding, super_users: frozenset[str] = frozenset(),
               allow_everyone: bool = False) -> StandardAuthorizer:
    return StandardAuthorizer(AuthorizerConfig(super_users, allow_everyone), Acls(bindings))


def may(auth: StandardAuthorizer, op: Operation, topic: str, principal: str = ALICE,
        host: str = "10.0.0.1") -> bool:
    return auth.authorize(principal, host, Action(op, ResourceType.TOPIC, topic))


def test_no_acl_denies_unless_everyone_is_allowed_when_none_is_found() -> None:
    assert not may(authorizer(), Operation.READ, "orders")
    assert may(authorizer(allow_everyone=True), Operation.READ, "orders")
    # An ACL for someone else on the resource: "found", so the default no longer applies.
    other = authorizer(topic_acl("orders", Operation.READ, principal=BOB), allow_everyone=True)
    assert not may(other, Operation.READ, "orders")
    assert may(other, Operation.READ, "orders", principal=BOB)


def test_super_users_bypass_every_acl_even_a_deny() -> None:
    auth = authorizer(topic_acl("orders", Operation.ALL, Permission.DENY),
                      super_users=frozenset({ALICE}))
    assert may(auth, Operation.DELETE, "orders")
    assert not may(auth, Operation.DELETE, "orders", principal=BOB)


def test_literal_prefixed_and_wildcard_patterns() -> None:
    auth = authorizer(topic_acl("orders", Operation.READ),
                      topic_acl("team-", Operation.WRITE, pattern=PatternType.PREFIXED),
                      topic_acl("*", Operation.CREATE))
    assert may(auth, Operation.READ, "orders")
    assert not may(auth, Operation.READ, "orders2")  # literal is exact
    assert may(auth, Operation.WRITE, "team-a") and may(auth, Operation.WRITE, "team-")
    assert not may(auth, Operation.WRITE, "team")  # shorter than the prefix
    assert may(auth, Operation.CREATE, "anything")  # literal * is every topic
    # A PREFIXED "*"-named binding cannot exist, and a prefix "te" is not "*".
    assert not may(auth, Operation.WRITE, "other")


def test_deny_wins_over_any_allow() -> None:
    auth = authorizer(topic_acl("*", Operation.ALL),
                      topic_acl("secret-", Operation.READ, Permission.DENY,
                                pattern=PatternType.PREFIXED))
    assert may(auth, Operation.READ, "public")
    assert not may(auth, Operation.READ, "secret-plans")
    assert may(auth, Operation.WRITE, "secret-plans")  # the deny names READ only
    deny_all = authorizer(topic_acl("orders", Operation.READ),
                          topic_acl("orders", Operation.ALL, Permission.DENY))
    assert not may(deny_all, Operation.READ, "orders")


@pytest.mark.parametrize("granted", [Operation.READ, Operation.WRITE, Operation.DELETE,
                                     Operation.ALTER])
def test_describe_is_implied_by_read_write_delete_alter(granted: Operation) -> None:
    auth = authorizer(topic_acl("orders", granted))
    assert may(auth, Operation.DESCRIBE, "orders")
    assert not may(auth, Operation.CREATE, "orders")


def test_alter_configs_implies_describe_configs_but_a_deny_implies_nothing() -> None:
    assert may(authorizer(topic_acl("t", Operation.ALTER_CONFIGS)), Operation.DESCRIBE_CONFIGS,
               "t")
    auth = authorizer(topic_acl("t", Operation.DESCRIBE),
                      topic_acl("t", Operation.READ, Permission.DENY))
    assert may(auth, Operation.DESCRIBE, "t")  # denying READ does not deny DESCRIBE


def test_principal_wildcard_and_host_match() -> None:
    auth = authorizer(topic_acl("t", Operation.READ, principal="User:*"),
                      topic_acl("t", Operation.WRITE, host="10.0.0.9"))
    assert may(auth, Operation.READ, "t", principal=BOB)
    assert may(auth, Operation.WRITE, "t", host="10.0.0.9")
    assert not may(auth, Operation.WRITE, "t", host="10.0.0.1")


def test_cluster_and_topic_resources_are_separate() -> None:
    auth = authorizer(topic_acl(CLUSTER_RESOURCE_NAME, Operation.ALTER))
    assert not auth.authorize(ALICE, "h", Action(Operation.ALTER, ResourceType.CLUSTER,
                                                 CLUSTER_RESOURCE_NAME))


def test_the_index_is_rebuilt_only_when_the_acls_change() -> None:
    source = Acls()
    auth = StandardAuthorizer(AuthorizerConfig(), source)
    assert not may(auth, Operation.READ, "t")
    assert not may(auth, Operation.READ, "t")
    assert source.builds == 1
    source.add(topic_acl("t", Operation.READ))
    assert may(auth, Operation.READ, "t")
    assert may(auth, Operation.READ, "t")
    assert source.builds == 2


# ---------------------------------------------------------------- against brute force

NAMES = st.sampled_from(["", "a", "ab", "abc", "b", "ba", "*"])
OPS = st.sampled_from([op for op in Operation if op is not Operation.ANY])


@st.composite
def bindings(draw: st.DrawFn) -> AclBinding:
    pattern = draw(st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]))
    name = draw(NAMES.filter(lambda n: n and not (pattern is PatternType.PREFIXED
                                                   and n == "*")))
    return AclBinding(ResourceType.TOPIC, name, pattern,
                      draw(st.sampled_from([ALICE, BOB, "User:*"])),
                      draw(st.sampled_from(["*", "h1", "h2"])), draw(OPS),
                      draw(st.sampled_from([Permission.ALLOW, Permission.DENY])))


def brute_force(acls: list[AclBinding], allow_everyone: bool, principal: str, host: str,
                op: Operation, name: str) -> bool:
    applies = [b for b in acls if (b.pattern_type is PatternType.LITERAL
                                   and b.resource_name in (name, "*"))
               or (b.pattern_type is PatternType.PREFIXED and name.startswith(b.resource_name))]
    if not applies:
        return allow_everyone
    mine = [b for b in applies if b.principal in (principal, "User:*") and b.host in (host, "*")]
    if any(b.permission is Permission.DENY and b.operation in (op, Operation.ALL)
           for b in mine):
        return False
    return any(b.permission is Permission.ALLOW
               and (b.operation in (op, Operation.ALL) or b.operation in IMPLIED_BY.get(op, ()))
               for b in mine)


@settings(max_examples=300, deadline=None)
@given(acls=st.lists(bindings(), max_size=12), allow_everyone=st.booleans(),
       principal=st.sampled_from([ALICE, BOB]), host=st.sampled_from(["h1", "h2"]), op=OPS,
       name=NAMES.filter(bool))
def test_index_agrees_with_a_brute_force_reading_of_the_rules(
        acls: list[AclBinding], allow_everyone: bool, principal: str, host: str,
        op: Operation, name: str) -> None:
    auth = authorizer(*acls, allow_everyone=allow_everyone)
    expected = brute_force(acls, allow_everyone, principal, host, op, name)
    assert may(auth, op, name, principal, host) is expected
