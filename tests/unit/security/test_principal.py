"""Principals from certificates: Kafka-style mapping rules, DEFAULT, ANONYMOUS."""

from __future__ import annotations

import pytest

from controller.security.principal import (
    ANONYMOUS,
    PrincipalMapper,
    PrincipalMappingError,
    host_of,
)


def context(subject: str = "", cn: str = "", sans: tuple[str, ...] = ()) -> dict[str, list[bytes]]:
    found: dict[str, list[bytes]] = {}
    if subject:
        found["x509_subject"] = [subject.encode()]
    if cn:
        found["x509_common_name"] = [cn.encode()]
    if sans:
        found["x509_subject_alternative_name"] = [s.encode() for s in sans]
    return found


def test_default_takes_the_common_name_else_the_first_alternative_name() -> None:
    mapper = PrincipalMapper.parse()
    assert mapper.principal_of(context("O=acme,CN=alice", "alice")) == "User:alice"
    assert mapper.principal_of(context("O=acme", sans=("svc.acme.test", "10.0.0.1"))) \
        == "User:svc.acme.test"


def test_no_certificate_is_anonymous() -> None:
    assert PrincipalMapper.parse().principal_of({"transport_security_type": [b"insecure"]}) \
        == ANONYMOUS


def test_rules_are_tried_in_order_with_groups_and_case() -> None:
    mapper = PrincipalMapper.parse([r"RULE:^O=ops,CN=(.*)$/$1-ops/U",
                                    r"RULE:^O=([a-z]+),CN=([a-z]+)$/$2@$1/L", "DEFAULT"])
    assert mapper.principal_of(context("O=ops,CN=carol", "carol")) == "User:CAROL-OPS"
    assert mapper.principal_of(context("O=acme,CN=dave", "dave")) == "User:dave@acme"
    assert mapper.principal_of(context("O=Acme Corp,CN=Eve", "Eve")) == "User:Eve"


def test_a_slash_in_a_rule_is_escaped() -> None:
    mapper = PrincipalMapper.parse([r"RULE:^CN=(.*)$/team\/$1/"])
    assert mapper.principal_of(context("CN=frank", "frank")) == "User:team/frank"


def test_a_certificate_no_rule_maps_is_refused_not_anonymous() -> None:
    mapper = PrincipalMapper.parse([r"RULE:^O=ops,CN=(.*)$/$1/"])
    with pytest.raises(PrincipalMappingError, match="no principal mapping rule matches"):
        mapper.principal_of(context("O=acme,CN=alice", "alice"))


@pytest.mark.parametrize(("rules", "message"), [
    ([], "must not be empty"),
    (["RULE:x"], "neither DEFAULT nor RULE"),
    (["RULE:(/$1/"], "bad regex"),
    (["DEFAULT"] * 65, "at most 64"),
    (["RULE:" + "a" * 1100 + "/b/"], "longer than"),
])
def test_bad_rules_are_explained(rules: list[str], message: str) -> None:
    with pytest.raises(PrincipalMappingError, match=message):
        PrincipalMapper.parse(rules)


@pytest.mark.parametrize(("peer", "host"), [
    ("ipv4:127.0.0.1:5433", "127.0.0.1"), ("ipv6:[::1]:5433", "::1"),
    ("unix:/tmp/sock", "/tmp/sock"),
])
def test_host_of_a_grpc_peer(peer: str, host: str) -> None:
    assert host_of(peer) == host
