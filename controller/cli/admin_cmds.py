"""`metakraft topics|configs|reassign|elect-leaders|cluster|quorum|features|brokers`:
the admin commands, each one call of ``AdminClient`` (controller/api/client.py).

Output, exit codes and connection options are shared (``admin_output``). Every
command takes ``--bootstrap HOST:PORT,...`` (env METAKRAFT_BOOTSTRAP) and
``--output table|json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from controller.api.client import AdminClient
from controller.cli.admin_cluster_cmds import brokers, cluster, features, quorum
from controller.cli.admin_output import (
    EXIT_ITEM_FAILED,
    EXIT_OK,
    AdminOptions,
    admin_options,
    console,
    emit_json,
    ids,
    key_value,
    report,
    run_admin,
    status,
    table,
)
from controller.metadata import (
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
    OpType,
    ReassignmentRequest,
    ResourceType,
    TopicPartition,
)

F = TypeVar("F", bound=Callable[..., Any])


def _op(text: str, option: str, op: OpType) -> AlterConfigOp:
    key, value = key_value(text, option)
    return AlterConfigOp(key, op, value)


def _broker_ids(text: str, option: str) -> tuple[int, ...]:
    try:
        found = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a list of broker ids like 1,2,3", param_hint=option
        ) from None
    if not found:
        raise click.BadParameter("give at least one broker id", param_hint=option)
    return found


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
@click.option("--config", "configs", multiple=True, help="Topic config KEY=VALUE; repeatable.")
@click.option("--validate-only", is_flag=True, help="Check everything, create nothing.")
@admin_options
def topics_create(
    opts: AdminOptions,
    names: tuple[str, ...],
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
    validate_only: bool,
) -> None:
    """Create topics (each answered on its own: one bad name does not stop the others)."""
    pairs = tuple(key_value(c, "--config") for c in configs)
    wanted = [CreatableTopic(n, partitions, replication_factor, configs=pairs) for n in names]

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
@admin_options
def topics_delete(opts: AdminOptions, names: tuple[str, ...]) -> None:
    """Delete topics (their partitions and configs go with them)."""

    def action(client: AdminClient) -> int:
        results = client.delete_topics(list(names))
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


@topics.command("describe")
@_name_option(multiple=True, required=False)
@admin_options
def topics_describe(opts: AdminOptions, names: tuple[str, ...]) -> None:
    """Describe topics' partitions (every topic without --name)."""

    def action(client: AdminClient) -> int:
        found = client.describe_topics(list(names) or None)
        failed = [d for d in found if not d.error.ok]
        if opts.json:
            emit_json(list(found))
        else:
            rows: list[tuple[object, ...]] = []
            for desc in found:
                if not desc.error.ok:
                    rows.append((desc.name, "", "", "", "", "", "", status(desc.error)))
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
                            p.partition_id,
                            leader,
                            reg.leader_epoch,
                            ids(reg.replicas),
                            ids(reg.isr),
                            moving,
                            "OK",
                        )
                    )
            columns = (
                "topic",
                "partition",
                "leader",
                "leader epoch",
                "replicas",
                "isr",
                "reassigning",
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
@admin_options
def topics_add_partitions(
    opts: AdminOptions, names: str, partitions: int, validate_only: bool
) -> None:
    """Raise a topic's partition count to --partitions (it can only grow)."""

    def action(client: AdminClient) -> int:
        results = client.create_partitions(
            [CreatePartitionsTopic(names, partitions)], validate_only=validate_only
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
                    f"Configs of {entity_type} {entity_name!r}",
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
            [AlterConfigsResource(resource, tuple(ops))], validate_only=validate_only
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


# -- reassignments and elections -------------------------------------------------------


def _reassignment_file(path: str) -> list[tuple[str, int, tuple[int, ...]]]:
    """Kafka's reassignment JSON: {"partitions": [{"topic", "partition", "replicas"}]}."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        entries = data["partitions"]
        return [
            (str(e["topic"]), int(e["partition"]), tuple(int(r) for r in e.get("replicas", ())))
            for e in entries
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.BadParameter(
            f'cannot read {path}: {exc}; expected {{"partitions": [{{"topic": T, "partition": P, "replicas": [1, 2]}}]}}',
            param_hint="--file",
        ) from exc


def _partition_args(
    file: str | None, topic: str | None, partition: int | None
) -> list[tuple[str, int, tuple[int, ...]]]:
    if file is not None:
        if topic is not None or partition is not None:
            raise click.UsageError("give either --file or --topic/--partition, not both")
        return _reassignment_file(file)
    if topic is None or partition is None:
        raise click.UsageError("give --file, or --topic and --partition")
    return [(topic, partition, ())]


def _report_reassignments(
    opts: AdminOptions, client: AdminClient, items: Sequence[ReassignmentRequest]
) -> int:
    results = client.alter_partition_reassignments(items)
    return report(
        opts,
        results,
        title="Reassignments",
        columns=("topic", "partition", "status"),
        row=lambda r: (r.topic, r.partition, status(r.error)),
        name=lambda r: f"{r.topic}-{r.partition}",
    )


@click.group()
def reassign() -> None:
    """Move partition replicas between brokers."""


@reassign.command("start")
@click.option(
    "--file", "file", type=click.Path(dir_okay=False), help="Reassignment JSON (Kafka's format)."
)
@click.option("--topic", help="One partition's topic.")
@click.option("--partition", type=int, help="One partition's index.")
@click.option("--replicas", help="Target broker ids, preferred leader first: 1,2,3.")
@admin_options
def reassign_start(
    opts: AdminOptions,
    file: str | None,
    topic: str | None,
    partition: int | None,
    replicas: str | None,
) -> None:
    """Start reassignments (a JSON file, or --topic --partition --replicas)."""
    entries = _partition_args(file, topic, partition)
    if file is None:
        if replicas is None:
            raise click.UsageError("--replicas is required with --topic/--partition")
        entries = [(entries[0][0], entries[0][1], _broker_ids(replicas, "--replicas"))]
    elif replicas is not None:
        raise click.UsageError("--replicas goes with --topic/--partition, not --file")
    items = [ReassignmentRequest(t, p, r) for t, p, r in entries]
    run_admin(opts, lambda client: _report_reassignments(opts, client, items))


@reassign.command("cancel")
@click.option("--file", "file", type=click.Path(dir_okay=False), help="JSON naming the partitions.")
@click.option("--topic", help="One partition's topic.")
@click.option("--partition", type=int, help="One partition's index.")
@admin_options
def reassign_cancel(
    opts: AdminOptions, file: str | None, topic: str | None, partition: int | None
) -> None:
    """Cancel reassignments: the partitions go back to their original replicas."""
    items = [ReassignmentRequest(t, p, None) for t, p, _ in _partition_args(file, topic, partition)]
    run_admin(opts, lambda client: _report_reassignments(opts, client, items))


@reassign.command("list")
@admin_options
def reassign_list(opts: AdminOptions) -> None:
    """List ongoing reassignments."""

    def action(client: AdminClient) -> int:
        found = client.list_partition_reassignments()
        if opts.json:
            emit_json(list(found))
        else:
            rows = [
                (r.topic, r.partition, ids(r.replicas), ids(r.adding), ids(r.removing))
                for r in found
            ]
            console().print(
                table(
                    "Ongoing reassignments",
                    ("topic", "partition", "replicas", "adding", "removing"),
                    rows,
                )
            )
        return EXIT_OK

    run_admin(opts, action)


@click.command("elect-leaders")
@click.option(
    "--election-type",
    type=click.Choice(["preferred", "unclean"]),
    default="preferred",
    show_default=True,
)
@click.option("--topic", help="Elect for this topic (all its partitions unless --partition).")
@click.option("--partition", type=int, help="Only this partition of --topic.")
@click.option(
    "--all-topic-partitions", is_flag=True, help="Every partition that needs an election."
)
@admin_options
def elect_leaders(
    opts: AdminOptions,
    election_type: str,
    topic: str | None,
    partition: int | None,
    all_topic_partitions: bool,
) -> None:
    """Elect preferred (or, unclean, any live) leaders."""
    if all_topic_partitions == (topic is not None):
        raise click.UsageError("give either --topic or --all-topic-partitions")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    kind = ElectionType(election_type.upper())

    def action(client: AdminClient) -> int:
        wanted: list[TopicPartition] | None = None
        if topic is not None:
            if partition is not None:
                wanted = [TopicPartition(topic, partition)]
            else:
                (desc,) = client.describe_topics([topic])
                if not desc.error.ok:
                    click.echo(f"error: {topic}: {desc.error}", err=True)
                    return EXIT_ITEM_FAILED
                wanted = [TopicPartition(topic, p.partition_id) for p in desc.partitions]
        results = client.elect_leaders(wanted, kind)
        return report(
            opts,
            results,
            title=f"{kind.value.capitalize()} leader elections",
            columns=("topic", "partition", "status"),
            row=lambda r: (r.topic, r.partition, status(r.error)),
            name=lambda r: f"{r.topic}-{r.partition}",
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
