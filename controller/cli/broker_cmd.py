"""`metakraft broker --config FILE` (run a broker agent) and `metakraft broker-status`."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from controller.cli.admin_output import (
    EXIT_UNREACHABLE,
    command_config_option,
    console,
    emit_json,
    load_command_config,
    table,
)


@click.command("broker")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="TOML config file (see --print-example).")
@click.option("--print-example", is_flag=True, help="Print a commented example config and exit.")
def broker(config_path: Path | None, print_example: bool) -> None:
    """Run one broker agent: follow the metadata log and reconcile local partitions."""
    from broker_agent.config import EXAMPLE_CONFIG, BrokerConfigError, load_config

    if print_example:
        click.echo(EXAMPLE_CONFIG, nl=False)
        return
    if config_path is None:
        raise click.UsageError("--config FILE is required (or --print-example)")
    try:
        config = load_config(config_path)
    except BrokerConfigError as exc:
        click.echo(f"metakraft broker: bad config {config_path}: {exc}", err=True)
        sys.exit(2)
    from broker_agent.daemon import run_broker
    from controller.log import get_logger, setup_logging
    from controller.logformat.errors import StorageError

    setup_logging(config.log_level, config.log_format)
    try:
        sys.exit(asyncio.run(run_broker(config)))
    except StorageError as exc:
        # One line (file, offset, remedy in the message); the traceback at debug level.
        get_logger("metakraft.broker").debug("refused_to_start", exc_info=True)
        click.echo(f"metakraft broker: refusing to start: {exc}. A broker's metadata log "
                   "is a copy of the controllers': move its data directory aside and "
                   "format a new one (it reloads from the controllers).", err=True)
        sys.exit(1)


@click.command("broker-status")
@click.option("--address", required=True, help="HOST:PORT of the broker's gRPC server.")
@click.option("--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="table for people, json for scripts.")
@click.option("--timeout-ms", type=click.IntRange(min=1), default=5000, show_default=True)
@command_config_option
def broker_status(address: str, output: str, timeout_ms: int,
                  command_config: Path | None) -> None:
    """Show one broker agent's lifecycle state, metadata offset and local replicas.
    Exit codes as every admin command: 0 answered, 3 the broker is unreachable."""
    import grpc

    from broker_agent.status import get_status, status_to_dict

    tls = load_command_config(command_config)
    try:
        doc = status_to_dict(get_status(address, timeout_ms / 1e3, tls))
    except grpc.RpcError as exc:
        click.echo(f"error: broker {address}: {exc.code().name}: {exc.details()}", err=True)
        sys.exit(EXIT_UNREACHABLE)
    if output == "json":
        emit_json(doc)
        return
    console().print(table(
        f"Broker {doc['broker_id']}: {doc['state']}, epoch {doc['broker_epoch']}, metadata "
        f"offset {doc['metadata_offset']}, controller {doc['controller_id']}",
        ("topic", "partition", "role", "leader", "leader epoch", "partition epoch"),
        [(r["topic"], r["partition"], r["role"], r["leader"], r["leader_epoch"],
          r["partition_epoch"]) for r in doc["replicas"]]))
