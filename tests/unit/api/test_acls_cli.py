"""`metakraft acls add|list|remove` (click's CliRunner) against a real API server with
a InMemoryController: bindings made from the kafka-acls-style options, filters, JSON
output, usage errors, and the --command-config file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from controller.cli.main import cli
from controller.security.acl import Operation, PatternType, Permission, ResourceType
from tests.support.api_server import ApiServer, serving
from tests.support.in_memory_controller import InMemoryController


@pytest.fixture
def controller() -> InMemoryController:
    return InMemoryController()


@pytest.fixture
def server(controller: InMemoryController) -> Iterator[ApiServer]:
    with serving(controller) as srv:
        yield srv


def run(server: ApiServer, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, [*args, "--bootstrap", server.address], env=env,
                              catch_exceptions=False)


def listed(server: ApiServer, *args: str) -> list[dict[str, Any]]:
    result = run(server, "acls", "list", *args, "--output", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_add_makes_one_binding_per_principal_operation_and_resource(
        server: ApiServer, controller: InMemoryController) -> None:
    added = run(server, "acls", "add", "--allow-principal", "User:alice",
                "--allow-principal", "User:bob", "--operation", "read", "--operation", "WRITE",
                "--topic", "orders-", "--resource-pattern-type", "prefixed")
    assert added.exit_code == 0, added.output
    assert added.stdout.count("OK") == 4
    bindings = set(controller.state.access.bindings())
    assert len(bindings) == 4
    assert {(b.principal, b.operation, b.pattern_type, b.resource_name) for b in bindings} == {
        (p, op, PatternType.PREFIXED, "orders-") for p in ("User:alice", "User:bob")
        for op in (Operation.READ, Operation.WRITE)}
    denied = run(server, "acls", "add", "--deny-principal", "User:alice", "--operation",
                 "ALTER", "--cluster", "--deny-host", "10.0.0.9")
    assert denied.exit_code == 0, denied.output
    [cluster] = [b for b in controller.state.access.bindings()
                 if b.resource_type is ResourceType.CLUSTER]
    assert (cluster.permission, cluster.host) == (Permission.DENY, "10.0.0.9")
    assert len(listed(server)) == 5
    assert len(listed(server, "--principal", "User:bob")) == 2
    assert len(listed(server, "--cluster")) == 1
    # MATCH: what applies to one topic (the prefix matches orders-a).
    assert len(listed(server, "--topic", "orders-a", "--resource-pattern-type", "match")) == 4


def test_a_bad_binding_fails_its_item_with_exit_1(server: ApiServer) -> None:
    result = run(server, "acls", "add", "--allow-principal", "alice", "--operation", "READ",
                 "--topic", "t")
    assert result.exit_code == 1
    assert "must be User:<name>" in result.output


def test_remove_prints_what_it_removed(server: ApiServer, controller: InMemoryController) -> None:
    for topic in ("a", "b"):
        assert run(server, "acls", "add", "--allow-principal", "User:alice", "--operation",
                   "READ", "--topic", topic).exit_code == 0
    removed = run(server, "acls", "remove", "--allow-principal", "User:alice", "--topic", "a",
                  "--output", "json")
    assert removed.exit_code == 0, removed.output
    doc = json.loads(removed.stdout)
    assert [b["resource_name"] for b in doc["removed"]] == ["a"] and doc["errors"] == []
    nothing = run(server, "acls", "remove", "--allow-principal", "User:nobody")
    assert nothing.exit_code == 0 and "ACLs removed (0)" in nothing.stdout
    assert run(server, "acls", "remove", "--all").exit_code == 0
    assert list(controller.state.access.bindings()) == []


@pytest.mark.parametrize(("args", "message"), [
    (("acls", "add", "--operation", "READ", "--topic", "t"), "--allow-principal"),
    (("acls", "add", "--allow-principal", "User:a", "--topic", "t"), "--operation"),
    (("acls", "add", "--allow-principal", "User:a", "--operation", "READ"), "--topic"),
    (("acls", "add", "--allow-principal", "User:a", "--operation", "FLY", "--topic", "t"),
     "FLY"),
    (("acls", "remove",), "nothing selects"),
    (("acls", "remove", "--all", "--topic", "t"), "give it alone"),
])
def test_usage_errors_exit_2(server: ApiServer, args: tuple[str, ...], message: str) -> None:
    result = run(server, *args)
    assert result.exit_code == 2
    assert message in result.output


def test_a_bad_command_config_is_a_usage_error(server: ApiServer, tmp_path: Path) -> None:
    missing = run(server, "acls", "list", "--command-config", str(tmp_path / "nope.toml"))
    assert missing.exit_code == 2 and "cannot read" in missing.output
    bad = tmp_path / "bad.toml"
    bad.write_text('[tls]\nca_file = "ca.crt"\n')
    result = run(server, "acls", "list", env={"METAKRAFT_COMMAND_CONFIG": str(bad)})
    assert result.exit_code == 2 and "tls.cert_file is required" in result.output
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[tsl]\n")
    result = run(server, "acls", "list", "--command-config", str(unknown))
    assert result.exit_code == 2 and "unknown key(s) tsl" in result.output
