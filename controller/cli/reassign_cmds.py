"""`metakraft reassign start|cancel|list|verify` and `metakraft elect-leaders`: moving
partition replicas and leaderships (Kafka's kafka-reassign-partitions and
kafka-leader-election)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click

from controller.api.client import AdminClient
from controller.cli.admin_output import (
    EXIT_ITEM_FAILED,
    EXIT_OK,
    AdminOptions,
    admin_options,
    broker_ids,
    console,
    emit_json,
    ids,
    report,
    run_admin,
    status,
    table,
)
from controller.metadata import ElectionType, ErrorCode, ReassignmentRequest, TopicPartition


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


def _targets(file: str | None, topic: str | None, partition: int | None,
             replicas: str | None) -> list[tuple[str, int, tuple[int, ...]]]:
    """(topic, partition, target replicas) from a JSON file or --topic --partition
    --replicas (start and verify take the same)."""
    entries = _partition_args(file, topic, partition)
    if file is None:
        if replicas is None:
            raise click.UsageError("--replicas is required with --topic/--partition")
        return [(entries[0][0], entries[0][1], broker_ids(replicas, "--replicas"))]
    if replicas is not None:
        raise click.UsageError("--replicas goes with --topic/--partition, not --file")
    return entries


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
@click.option("--if-partition-epoch", type=click.IntRange(min=0), default=None,
              help="Only if the partition's partition epoch (topics describe) is still this "
                   "(CONDITION_FAILED, exit 1, otherwise); with --topic --partition.")
@admin_options
def reassign_start(
    opts: AdminOptions,
    file: str | None,
    topic: str | None,
    partition: int | None,
    replicas: str | None,
    if_partition_epoch: int | None,
) -> None:
    """Start reassignments (a JSON file, or --topic --partition --replicas)."""
    if if_partition_epoch is not None and file is not None:
        raise click.UsageError("--if-partition-epoch goes with --topic --partition, not --file")
    entries = _targets(file, topic, partition, replicas)
    items = [ReassignmentRequest(t, p, r, if_partition_epoch) for t, p, r in entries]
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


@reassign.command("verify")
@click.option("--file", "file", type=click.Path(dir_okay=False),
              help="The reassignment JSON given to `reassign start`.")
@click.option("--topic", help="One partition's topic.")
@click.option("--partition", type=int, help="One partition's index.")
@click.option("--replicas", help="The target broker ids given to `reassign start`: 1,2,3.")
@admin_options
def reassign_verify(opts: AdminOptions, file: str | None, topic: str | None,
                    partition: int | None, replicas: str | None) -> None:
    """Check reassignments against their targets (Kafka's --verify): for each
    partition, "complete" (its replicas are the target, in order, and nothing moves),
    "in progress", or "not the target" (never started, cancelled, or replaced by
    another reassignment). Exit 0 when every one is complete, else 1: a script can
    repeat it until done."""
    entries = _targets(file, topic, partition, replicas)

    def action(client: AdminClient) -> int:
        topics = {d.name: d for d in client.describe_topics(sorted({t for t, _, _ in entries}))}
        rows = []
        for t, p, target in entries:
            desc = topics.get(t)
            parts = {} if desc is None else {x.partition_id: x.registration
                                             for x in desc.partitions}
            reg = parts.get(p)
            if reg is None:
                state, current = "unknown partition", ""
            elif reg.adding_replicas or reg.removing_replicas:
                state, current = "in progress", ids(reg.replicas)
            elif tuple(reg.replicas) == tuple(target):
                state, current = "complete", ids(reg.replicas)
            else:
                state, current = "not the target", ids(reg.replicas)
            rows.append({"topic": t, "partition": p, "target": ids(target),
                         "replicas": current, "state": state})
        if opts.json:
            emit_json(rows)
        else:
            console().print(table("Reassignments", ("topic", "partition", "target", "replicas",
                                                    "state"),
                                  [tuple(r.values()) for r in rows]))
        done = all(r["state"] == "complete" for r in rows)
        return EXIT_OK if done else EXIT_ITEM_FAILED

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
                    if opts.json:
                        emit_json([{"topic": topic, "partition": None, "error": desc.error}])
                    click.echo(f"error: {topic}: {desc.error}", err=True)
                    return EXIT_ITEM_FAILED
                wanted = [TopicPartition(topic, p.partition_id) for p in desc.partitions]
        results = client.elect_leaders(wanted, kind)
        # Kafka's ELECTION_NOT_NEEDED (the preferred leader already leads) is the
        # outcome asked for: a script may repeat the command safely.
        return report(
            opts,
            results,
            title=f"{kind.value.capitalize()} leader elections",
            columns=("topic", "partition", "status"),
            row=lambda r: (r.topic, r.partition, status(r.error)),
            name=lambda r: f"{r.topic}-{r.partition}",
            ok=lambda r: r.error.ok or r.error.code is ErrorCode.ELECTION_NOT_NEEDED,
        )

    run_admin(opts, action)
