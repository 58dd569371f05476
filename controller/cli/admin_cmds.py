"""`metakraft topics|configs|reassign|elect-leaders|cluster|quorum|features|brokers`:
the admin commands, each one call of ``AdminClient`` (controller/api/client.py).

Output, exit codes and connection options are shared (``admin_output``). Every
command takes ``--bootstrap HOST:PORT,...`` (env METAKRAFT_BOOTSTRAP) and
``--output table|json``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import click

from controller.api.client import AdminClient
from controller.cli.admin_cluster_cmds import brokers, cluster, features, quorum
from controller.cli.admin_output import (
    EXIT_ITEM_FAILED,
    EXIT_OK,
    AdminOptions,
    admin_options,
    broker_ids,
    console,
    emit_json,
    ids,
    key_value,
    report,
    run_admin,
    status,
    table,
)
from controller.cli.reassign_cmds import elect_leaders, reassign
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsTopic,
    OpType,
    ResourceType,
)
from controller.records.domain import PartitionRegistration

F = TypeVar("F", bound=Callable[..., Any])


def _op(text: str, option: str, op: OpType) -> AlterConfigOp:
    key, value = key_value(text, option)
    return AlterConfigOp(key, op, value)


def _name_option(*, multiple: bool, required: bool) -> Callable[[F], F]:
    return click.option(
        "--name",
        "--topic",
        "names",
        multiple=multiple,
        required=required,
        help="Topic name (alias --topic)" + ("; repeat for several." if multiple else "."),
    )


# -- topics ----------------------------------------------------------------------------


@click.group()
def topics() -> None:
    """Create, delete, list and describe topics; add partitions."""


@topics.command("create")
@_name_option(multiple=True, required=True)
@click.option(
    "--partitions", type=int, default=-1, help="Partition count (default: num.partitions)."
)
@click.option(
    "--replication-factor",
    type=int,
    default=-1,
    help="Replicas per partition (default: default.replication.factor).",
)
@click.option(
    "--replica-assignment",
    help="Explicit replicas, Kafka's format: partitions separated by commas, each "
    "partition's brokers by colons, preferred leader first (1:2:3,2:3:1). Instead of "
    "--partitions and --replication-factor.",
)
@click.option("--config", "configs", multiple=True, help="Topic config KEY=VALUE; repeatable.")
@click.option("--validate-only", is_flag=True, help="Check everything, create nothing.")
@admin_options
def topics_create(
    opts: AdminOptions,
    names: tuple[str, ...],
    partitions: int,
    replication_factor: int,
    replica_assignment: str | None,
    configs: tuple[str, ...],
    validate_only: bool,
) -> None:
    """Create topics (each answered on its own: one bad name does not stop the others)."""
    pairs = tuple(key_value(c, "--config") for c in configs)
    assignments: tuple[tuple[int, ...], ...] = ()
    if replica_assignment is not None:
        if partitions != -1 or replication_factor != -1:
            raise click.UsageError("give --replica-assignment or --partitions and "
                                   "--replication-factor, not both")
        assignments = tuple(broker_ids(part.replace(":", ","), "--replica-assignment")
                            for part in replica_assignment.split(","))
    wanted = [CreatableTopic(n, partitions, replication_factor, configs=pairs,
                             assignments=assignments) for n in names]

    def action(client: AdminClient) -> int:
        results = client.create_topics(wanted, validate_only=validate_only)
        title = "Topics (validate only: nothing created)" if validate_only else "Topics created"
        return report(
            opts,
            results,
            title=title,
            columns=("topic", "topic id", "partitions", "replication factor", "status"),
            row=lambda r: (
                r.name,
                r.topic_id,
                # A failed item has no counts (the wire says -1).
                r.num_partitions if r.error.ok else "",
                r.replication_factor if r.error.ok else "",
                status(r.error),
            ),
            name=lambda r: r.name,
        )

    run_admin(opts, action)


@topics.command("delete")
@_name_option(multiple=True, required=True)
@click.option("--if-mod-offset", type=click.IntRange(min=-1), default=None,
              help="Only if the topic's mod offset (shown by describe) is still this: a "
                   "write conditional on what you read (CONDITION_FAILED, exit 1, nothing "
                   "written otherwise).")
@admin_options
def topics_delete(opts: AdminOptions, names: tuple[str, ...], if_mod_offset: int | None) -> None:
    """Delete topics (their partitions and configs go with them)."""
    if if_mod_offset is not None and len(names) != 1:
        raise click.UsageError("--if-mod-offset needs exactly one --name")

    def action(client: AdminClient) -> int:
        results = client.delete_topics(
            list(names), None if if_mod_offset is None else {names[0]: if_mod_offset})
        return report(
            opts,
            results,
            title="Topics deleted",
            columns=("topic", "topic id", "status"),
            row=lambda r: (r.name, r.topic_id, status(r.error)),
            name=lambda r: r.name,
        )

    run_admin(opts, action)


@topics.command("list")
@admin_options
def topics_list(opts: AdminOptions) -> None:
    """List every topic with its id."""

    def action(client: AdminClient) -> int:
        found = client.list_topics()
        if opts.json:
            emit_json(list(found))
        else:
            console().print(
                table("Topics", ("topic", "topic id"), [(t.name, t.topic_id) for t in found])
            )
        return EXIT_OK

    run_admin(opts, action)


def _min_insync_replicas(client: AdminClient, topics: list[str]) -> dict[str, int]:
    """Each topic's effective min.insync.replicas (its config, else the default)."""
    if not topics:
        return {}
    out: dict[str, int] = {}
    for result in client.describe_configs(
            [ConfigResource(ResourceType.TOPIC, name) for name in topics]):
        for entry in result.entries:
            if entry.key == "min.insync.replicas" and entry.value.isdigit():
                out[result.resource.name] = int(entry.value)
    return out


@topics.command("describe")
@_name_option(multiple=True, required=False)
@click.option("--under-replicated-partitions", "under_replicated", is_flag=True,
              help="Only partitions with a replica out of the ISR.")
@click.option("--unavailable-partitions", "unavailable", is_flag=True,
              help="Only partitions without a leader.")
@click.option("--under-min-isr-partitions", "under_min_isr", is_flag=True,
              help="Only partitions whose ISR is smaller than the topic's "
              "min.insync.replicas (acks=all produces are refused).")
@click.option("--at-min-isr-partitions", "at_min_isr", is_flag=True,
              help="Only partitions whose ISR is exactly min.insync.replicas (one more "
              "loss refuses acks=all).")
@admin_options
def topics_describe(opts: AdminOptions, names: tuple[str, ...], under_replicated: bool,
                    unavailable: bool, under_min_isr: bool, at_min_isr: bool) -> None:
    """Describe topics' partitions (every topic without --name). With a filter, only
    the partitions it selects (and only topics that have some), as Kafka's
    kafka-topics --describe does."""

    def keep(topic: str, reg: PartitionRegistration, min_isr: dict[str, int]) -> bool:
        if under_replicated and len(reg.isr) >= len(reg.replicas):
            return False
        if under_min_isr and len(reg.isr) >= min_isr.get(topic, 1):
            return False
        if at_min_isr and len(reg.isr) != min_isr.get(topic, 1):
            return False
        return not (unavailable and reg.has_leader)

    def action(client: AdminClient) -> int:
        found = client.describe_topics(list(names) or None)
        failed = [d for d in found if not d.error.ok]
        if under_replicated or unavailable or under_min_isr or at_min_isr:
            min_isr = _min_insync_replicas(client, [d.name for d in found if d.error.ok]) \
                if under_min_isr or at_min_isr else {}
            found = tuple(
                attrs.evolve(d, partitions=tuple(p for p in d.partitions
                                                 if keep(d.name, p.registration, min_isr)))
                for d in found)
            found = tuple(d for d in found if d.partitions or not d.error.ok)
        if opts.json:
            emit_json(list(found))
        else:
            rows: list[tuple[object, ...]] = []
            for desc in found:
                if not desc.error.ok:
                    rows.append((desc.name, "", "", "", "", "", "", "", "", "",
                                 status(desc.error)))
                for p in desc.partitions:
                    reg = p.registration
                    moving = (
                        f"+{ids(reg.adding_replicas)} -{ids(reg.removing_replicas)}"
                        if (reg.adding_replicas or reg.removing_replicas)
                        else ""
                    )
                    leader = reg.leader if reg.has_leader else "none"
                    rows.append(
                        (
                            desc.name,
                            desc.mod_offset if p is desc.partitions[0] else "",
                            p.partition_id,
                            leader,
                            reg.leader_epoch,
                            ids(reg.replicas),
                            ids(reg.isr),
                            ids(reg.elr),
                            moving,
                            reg.partition_epoch,
                            "OK",
                        )
                    )
            columns = (
                "topic",
                "mod offset",
                "partition",
                "leader",
                "leader epoch",
                "replicas",
                "isr",
                "elr",
                "reassigning",
                "partition epoch",
                "status",
            )
            console().print(table("Partitions", columns, rows))
            for desc in failed:
                click.echo(f"error: {desc.name}: {desc.error}", err=True)
        return EXIT_ITEM_FAILED if failed else EXIT_OK

    run_admin(opts, action)


@topics.command("add-partitions")
@_name_option(multiple=False, required=True)
@click.option("--partitions", type=int, required=True, help="The new total partition count.")
@click.option("--validate-only", is_flag=True, help="Check, add nothing.")
@click.option("--if-mod-offset", type=click.IntRange(min=-1), default=None,
              help="Only if the topic's mod offset (shown by describe) is still this: a "
                   "write conditional on what you read (CONDITION_FAILED, exit 1, nothing "
                   "written otherwise).")
@admin_options
def topics_add_partitions(
    opts: AdminOptions, names: str, partitions: int, validate_only: bool,
    if_mod_offset: int | None,
) -> None:
    """Raise a topic's partition count to --partitions (it can only grow)."""

    def action(client: AdminClient) -> int:
        results = client.create_partitions(
            [CreatePartitionsTopic(names, partitions, if_mod_offset=if_mod_offset)],
            validate_only=validate_only,
        )
        return report(
            opts,
            results,
            title="Partitions added" + (" (validate only)" if validate_only else ""),
            columns=("topic", "status"),
            row=lambda r: (r.name, status(r.error)),
            name=lambda r: r.name,
        )

    run_admin(opts, action)


# -- configs ---------------------------------------------------------------------------

_ENTITY_TYPES = {
    "topic": ResourceType.TOPIC,
    "broker": ResourceType.BROKER,
    "cluster": ResourceType.CLUSTER,
}


def _entity_options(command: Any) -> Any:
    command = click.option(
        "--entity-name",
        default="",
        help="Topic name, broker id, or empty (cluster; the cluster-wide broker default).",
    )(command)
    return click.option("--entity-type", type=click.Choice(sorted(_ENTITY_TYPES)), required=True)(
        command
    )


@click.group()
def configs() -> None:
    """Describe and alter dynamic configs of topics, brokers and the cluster."""


@configs.command("describe")
@_entity_options
@admin_options
def configs_describe(opts: AdminOptions, entity_type: str, entity_name: str) -> None:
    """Every config of one entity: value in force and where it comes from."""
    resource = ConfigResource(_ENTITY_TYPES[entity_type], entity_name)

    def action(client: AdminClient) -> int:
        (result,) = client.describe_configs([resource])
        if opts.json:
            emit_json(result)
        elif result.error.ok:
            rows = [(e.key, e.value, e.source.value, e.type.value) for e in result.entries]
            console().print(
                table(
                    f"Configs of {entity_type} {entity_name!r} (mod offset "
                    f"{result.mod_offset})",
                    ("key", "value", "source", "type"),
                    rows,
                )
            )
        if not result.error.ok:
            if not opts.json:
                click.echo(f"error: {entity_type} {entity_name!r}: {result.error}", err=True)
            return EXIT_ITEM_FAILED
        return EXIT_OK

    run_admin(opts, action)


@configs.command("alter")
@_entity_options
@click.option("--set", "sets", multiple=True, help="KEY=VALUE to set; repeatable.")
@click.option(
    "--delete", "deletes", multiple=True, help="KEY to reset to its inherited/default value."
)
@click.option("--append", "appends", multiple=True, help="KEY=ITEMS to add to a list config.")
@click.option(
    "--subtract", "subtracts", multiple=True, help="KEY=ITEMS to remove from a list config."
)
@click.option("--validate-only", is_flag=True, help="Check, change nothing.")
@click.option("--if-mod-offset", type=click.IntRange(min=-1), default=None,
              help="Only if the entity's configs's mod offset (shown by describe; -1: it has no dynamic config) is still this: a "
                   "write conditional on what you read (CONDITION_FAILED, exit 1, nothing "
                   "written otherwise).")
@admin_options
def configs_alter(
    opts: AdminOptions,
    entity_type: str,
    entity_name: str,
    sets: tuple[str, ...],
    deletes: tuple[str, ...],
    appends: tuple[str, ...],
    subtracts: tuple[str, ...],
    validate_only: bool,
    if_mod_offset: int | None,
) -> None:
    """Change configs of one entity; all operations apply together or not at all."""
    ops = [_op(s, "--set", OpType.SET) for s in sets]
    ops += [AlterConfigOp(k, OpType.DELETE) for k in deletes]
    ops += [_op(a, "--append", OpType.APPEND) for a in appends]
    ops += [_op(s, "--subtract", OpType.SUBTRACT) for s in subtracts]
    if not ops:
        raise click.UsageError("nothing to change: give --set, --delete, --append or --subtract")
    resource = ConfigResource(_ENTITY_TYPES[entity_type], entity_name)

    def action(client: AdminClient) -> int:
        results = client.incremental_alter_configs(
            [AlterConfigsResource(resource, tuple(ops), if_mod_offset)],
            validate_only=validate_only
        )
        return report(
            opts,
            results,
            title="Configs altered" + (" (validate only)" if validate_only else ""),
            columns=("entity type", "entity name", "status"),
            row=lambda r: (entity_type, r.resource.name, status(r.error)),
            name=lambda r: f"{entity_type} {r.resource.name!r}",
        )

    run_admin(opts, action)


ADMIN_COMMANDS: tuple[click.Command, ...] = (
    topics,
    configs,
    reassign,
    elect_leaders,
    cluster,
    quorum,
    features,
    brokers,
)
