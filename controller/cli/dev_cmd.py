"""`metakraft dev`: the README's main job (for now a timeline demo).

Later issues turn `metakraft dev` into a local cluster; until then it runs
`timeline_demo`, which a later change can drop or move behind a flag.
"""

from __future__ import annotations

import click

from timeline import SnapshotNotFoundError, SnapshotRegistry, TimelineHashMap, TimelineInteger


def _table(topics: TimelineHashMap[str, int], epochs: list[int | None]) -> list[str]:
    """Partition counts per topic, one column per epoch (None = latest)."""
    names: set[str] = set()
    for epoch in epochs:
        names.update(topics.keys(epoch=epoch))
    headers = ["topic"] + [f"@{e}" if e is not None else "latest" for e in epochs]
    rows = [
        [name]
        + [str(topics.get(name, epoch=e)) if topics.contains(name, e) else "-" for e in epochs]
        for name in sorted(names)
    ]
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    ]


def timeline_demo() -> None:
    """Change a topic map across snapshots at offsets 10, 20, 30; read the past; revert to 20."""
    registry = SnapshotRegistry()
    topics: TimelineHashMap[str, int] = TimelineHashMap(registry)  # topic -> partitions
    records = TimelineInteger(registry)  # records applied

    def apply(changes: dict[str, int | None]) -> None:
        for name, partitions in changes.items():
            if partitions is None:
                del topics[name]
            else:
                topics[name] = partitions
            records.increment()

    apply({"orders": 3, "payments": 6})
    registry.create_snapshot(10)
    apply({"audit": 1, "orders": 12})
    registry.create_snapshot(20)
    apply({"payments": None, "clicks": 24})
    registry.create_snapshot(30)
    apply({"scratch": 1})  # not yet in any snapshot

    click.echo("timeline demo: topics (partition counts) at each snapshot epoch")
    for line in _table(topics, [10, 20, 30, None]):
        click.echo(f"  {line}")
    click.echo(
        f"records applied: @10={records.get(10)} @20={records.get(20)} "
        f"@30={records.get(30)} latest={records.get()}"
    )

    click.echo("revert_to_snapshot(20)")
    registry.revert_to_snapshot(20)
    state = " ".join(f"{name}={topics[name]}" for name in sorted(topics))
    click.echo(f"reverted to epoch 20: {state}")
    click.echo(f"records applied: {records.get()}")
    click.echo(f"live epochs: {registry.epochs()}")
    try:
        topics.get("clicks", epoch=30)
    except SnapshotNotFoundError as err:
        click.echo(f"read at 30: {err}")


@click.command()
def dev() -> None:
    """Run the local demo (for now: the timeline demo)."""
    timeline_demo()
