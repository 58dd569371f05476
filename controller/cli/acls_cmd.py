"""`metakraft acls add|list|remove`: ACL bindings, shaped like Kafka's kafka-acls.sh.

    metakraft acls add --allow-principal User:alice --operation CREATE \\
        --topic orders- --resource-pattern-type prefixed
    metakraft acls list --principal User:alice
    metakraft acls remove --allow-principal User:alice --topic orders- \\
        --resource-pattern-type prefixed

`add` makes one binding per principal x host x operation x resource given. `list`
and `remove` take the same options as filters (an option left out matches
everything; `remove` needs at least one, or `--all`). Every command needs the caller
to hold ALTER (add, remove) or DESCRIBE (list) on the cluster, or be a super user.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
import click

from controller.api.client import AdminClient
from controller.cli.admin_output import (
    EXIT_OK,
    AdminOptions,
    admin_options,
    console,
    emit_json,
    report,
    run_admin,
    status,
    table,
)
from controller.metadata import ApiError
from controller.security.acl import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

F = TypeVar("F", bound=Callable[..., Any])
_OPERATIONS = [op.name for op in Operation if op is not Operation.ANY]


def _binding_options(command: F) -> F:
    options = [
        click.option("--allow-principal", multiple=True, help="User:NAME (User:* = everyone); "
                     "repeatable."),
        click.option("--deny-principal", multiple=True, help="User:NAME; repeatable."),
        click.option("--allow-host", multiple=True, help="Client IP the ALLOW applies to "
                     "(default *: any); repeatable."),
        click.option("--deny-host", multiple=True, help="Client IP the DENY applies to "
                     "(default *: any); repeatable."),
        click.option("--operation", "operations", multiple=True,
                     type=click.Choice(_OPERATIONS, case_sensitive=False),
                     help="Operation; repeatable."),
        click.option("--topic", "topics", multiple=True, help="Topic name, prefix (with "
                     "--resource-pattern-type prefixed) or *; repeatable."),
        click.option("--cluster", is_flag=True, help="The cluster resource."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _resources(topics: Sequence[str], cluster: bool) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, name) for name in topics]
    if cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME))
    return found


def _pattern(text: str) -> PatternType:
    return PatternType[text.upper()]


def _row(b: AclBinding) -> tuple[str, ...]:
    return (b.principal, b.host, b.permission.name, b.operation.name, b.resource_type.name,
            b.pattern_type.name, b.resource_name)


@attrs.frozen
class _Created:
    binding: AclBinding
    error: ApiError


_COLUMNS = ("principal", "host", "permission", "operation", "resource type", "pattern",
            "resource")


@click.group()
def acls() -> None:
    """Access control lists: who may do what on which topic or the cluster."""


@acls.command("add")
@_binding_options
@click.option("--resource-pattern-type", type=click.Choice(["literal", "prefixed"],
              case_sensitive=False), default="literal", show_default=True)
@admin_options
def acls_add(opts: AdminOptions, allow_principal: tuple[str, ...],
             deny_principal: tuple[str, ...], allow_host: tuple[str, ...],
             deny_host: tuple[str, ...], operations: tuple[str, ...], topics: tuple[str, ...],
             cluster: bool, resource_pattern_type: str) -> None:
    """Add ACL bindings (creating one that exists changes nothing)."""
    if not allow_principal and not deny_principal:
        raise click.UsageError("give --allow-principal or --deny-principal")
    if not operations:
        raise click.UsageError("give at least one --operation")
    resources = _resources(topics, cluster)
    if not resources:
        raise click.UsageError("give --topic NAME or --cluster")
    pattern = _pattern(resource_pattern_type)
    bindings: list[AclBinding] = []
    for permission, principals, hosts in ((Permission.ALLOW, allow_principal, allow_host),
                                          (Permission.DENY, deny_principal, deny_host)):
        for principal, host, op, (rtype, name) in itertools.product(
                principals, hosts or (WILDCARD,), operations, resources):
            rpattern = PatternType.LITERAL if rtype is ResourceType.CLUSTER else pattern
            bindings.append(AclBinding(rtype, name, rpattern, principal, host,
                                       Operation[op.upper()], permission))

    def action(client: AdminClient) -> int:
        errors = client.create_acls(bindings)
        results = [_Created(b, e) for b, e in zip(bindings, errors, strict=True)]
        return report(opts, results, title="ACLs added", columns=(*_COLUMNS, "status"),
                      row=lambda r: (*_row(r.binding), status(r.error)),
                      name=lambda r: r.binding.describe())

    run_admin(opts, action)


def _filters(principals: Sequence[str], hosts: Sequence[str], permission: Permission,
             operations: Sequence[str], resources: Sequence[tuple[ResourceType, str]],
             pattern: PatternType) -> list[AclFilter]:
    found = []
    for principal, host, op, resource in itertools.product(
            principals or (None,), hosts or (None,), operations or (None,),
            resources or (None,)):
        rtype, name = resource if resource is not None else (ResourceType.ANY, None)
        found.append(AclFilter(rtype, name, pattern if name is not None else PatternType.ANY,
                               principal, host,
                               Operation[op.upper()] if op else Operation.ANY, permission))
    return found


def _all_filters(allow_principal: Sequence[str], deny_principal: Sequence[str],
                 allow_host: Sequence[str], deny_host: Sequence[str],
                 operations: Sequence[str], topics: Sequence[str], cluster: bool,
                 pattern: str) -> list[AclFilter]:
    resources = _resources(topics, cluster)
    kind = _pattern(pattern)
    if not (allow_principal or deny_principal or allow_host or deny_host):
        return _filters((), (), Permission.ANY, operations, resources, kind)
    found: list[AclFilter] = []
    if allow_principal or allow_host:
        found += _filters(allow_principal, allow_host, Permission.ALLOW, operations,
                          resources, kind)
    if deny_principal or deny_host:
        found += _filters(deny_principal, deny_host, Permission.DENY, operations, resources,
                          kind)
    return found


_PATTERN_CHOICE = click.Choice(["any", "match", "literal", "prefixed"], case_sensitive=False)


@acls.command("list")
@click.option("--principal", "principals", multiple=True, help="Only this principal's "
              "bindings; repeatable.")
@click.option("--topic", "topics", multiple=True, help="Only bindings on this topic name; "
              "repeatable.")
@click.option("--cluster", is_flag=True, help="Only bindings on the cluster.")
@click.option("--resource-pattern-type", type=_PATTERN_CHOICE, default="literal",
              show_default=True, help="With --topic: how the name selects bindings (match: "
              "every binding that applies to that topic, prefixes and * included).")
@admin_options
def acls_list(opts: AdminOptions, principals: tuple[str, ...], topics: tuple[str, ...],
              cluster: bool, resource_pattern_type: str) -> None:
    """List ACL bindings (all, or those the options select)."""
    filters = _filters(principals, (), Permission.ANY, (), _resources(topics, cluster),
                       _pattern(resource_pattern_type))

    def action(client: AdminClient) -> int:
        found: dict[AclBinding, None] = {}
        for acl_filter in filters:
            found.update(dict.fromkeys(client.describe_acls(acl_filter)))
        bindings = sorted(found, key=_row)
        if opts.json:
            emit_json(bindings)
        else:
            console().print(table(f"ACLs ({len(bindings)})", _COLUMNS,
                                  [_row(b) for b in bindings]))
        return EXIT_OK

    run_admin(opts, action)


@acls.command("remove")
@_binding_options
@click.option("--resource-pattern-type", type=_PATTERN_CHOICE, default="literal",
              show_default=True)
@click.option("--all", "remove_all", is_flag=True, help="Remove every ACL binding.")
@admin_options
def acls_remove(opts: AdminOptions, allow_principal: tuple[str, ...],
                deny_principal: tuple[str, ...], allow_host: tuple[str, ...],
                deny_host: tuple[str, ...], operations: tuple[str, ...],
                topics: tuple[str, ...], cluster: bool, resource_pattern_type: str,
                remove_all: bool) -> None:
    """Remove the ACL bindings the options match; prints what was removed."""
    given = (allow_principal or deny_principal or allow_host or deny_host or operations
             or topics or cluster)
    if not given and not remove_all:
        raise click.UsageError("nothing selects the bindings to remove: give a principal, "
                               "host, operation, --topic or --cluster (or --all)")
    if given and remove_all:
        raise click.UsageError("--all removes everything: give it alone")
    filters = _all_filters(allow_principal, deny_principal, allow_host, deny_host, operations,
                           topics, cluster, resource_pattern_type)

    def action(client: AdminClient) -> int:
        results = client.delete_acls(filters)
        failed = [(f, e) for f, (e, _) in zip(filters, results, strict=True) if not e.ok]
        removed = list(dict.fromkeys(b for _, deleted in results for b in deleted))
        if opts.json:
            emit_json({"removed": removed,
                       "errors": [{"filter": f, "error": e} for f, e in failed]})
        else:
            console().print(table(f"ACLs removed ({len(removed)})", _COLUMNS,
                                  [_row(b) for b in removed]))
            for acl_filter, error in failed:
                click.echo(f"error: {acl_filter}: {error}", err=True)
        return 1 if failed else EXIT_OK

    run_admin(opts, action)
