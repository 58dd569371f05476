"""`metakraft dev`: the README's main job, a local cluster of real processes.

The cluster itself lives in `controller.devcluster`; this module is the command
line. `--timeline-demo` keeps the first demo of the timeline library (a map
changed across snapshots, read at old epochs, reverted), which needs no process.
"""

from __future__ import annotations

import sys
from pathlib import Path

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
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".metakraft-dev"), show_default=True,
              help="Where the cluster lives (configs, data, logs, cluster.json). An existing "
                   "cluster there is resumed.")
@click.option("--controllers", type=click.IntRange(min=1), default=None,
              help="Controller processes (Raft voters, ids 3000, 3001, ...). Default: 3, or "
                   "the existing cluster's.")
@click.option("--brokers", type=click.IntRange(min=0), default=None,
              help="Broker processes (ids 1, 2, ...). Default: 3, or the existing cluster's.")
@click.option("--scenario", is_flag=True,
              help="Run a scripted tour (topics, a broker killed and restarted, a partition "
                   "moved), then stop everything; exit 0 if every step passed.")
@click.option("--insecure", is_flag=True,
              help="Plaintext, no authorizer: anyone who can reach a port may do anything. "
                   "Default: mutual TLS with certificates made under DATA_DIR/tls and ACLs.")
@click.option("--timeline-demo", "show_timeline_demo", is_flag=True,
              help="Only print the timeline library demo (no processes).")
def dev(data_dir: Path, controllers: int | None, brokers: int | None, scenario: bool,
        insecure: bool, show_timeline_demo: bool) -> None:
    """Run a local cluster (3 controllers, 3 brokers) on loopback until Ctrl-C."""
    if show_timeline_demo:
        timeline_demo()
        return
    from controller.devcluster.runner import run_dev

    sys.exit(run_dev(data_dir, controllers, brokers, scenario=scenario, secure=not insecure))
