"""`metakraft broker --config FILE` (run a broker agent) and `metakraft broker-status`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from controller.cli.admin_output import command_config_option, load_command_config


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
    from controller.log import setup_logging

    setup_logging(config.log_level, config.log_format)
    sys.exit(asyncio.run(run_broker(config)))


@click.command("broker-status")
@click.option("--address", required=True, help="HOST:PORT of the broker's gRPC server.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--timeout-ms", type=int, default=5000, show_default=True)
@command_config_option
def broker_status(address: str, output: str, timeout_ms: int,
                  command_config: Path | None) -> None:
    """Show one broker agent's lifecycle state, metadata offset and local replicas."""
    import grpc

    from broker_agent.status import get_status, status_to_dict

    tls = load_command_config(command_config)
    try:
        doc = status_to_dict(get_status(address, timeout_ms / 1e3, tls))
    except grpc.RpcError as exc:
        click.echo(f"metakraft broker-status: {address}: {exc.code().name}: {exc.details()}",
                   err=True)
        sys.exit(1)
    if output == "json":
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"broker {doc['broker_id']}: {doc['state']}  epoch {doc['broker_epoch']}  "
               f"metadata offset {doc['metadata_offset']}  controller {doc['controller_id']}")
    replicas = doc["replicas"]
    if not replicas:
        click.echo("no local replicas")
        return
    click.echo(f"{'TOPIC':<24} {'PART':>4} {'ROLE':<8} {'LEADER':>6} {'L.EPOCH':>7} "
               f"{'P.EPOCH':>7}")
    for r in replicas:
        click.echo(f"{r['topic']:<24} {r['partition']:>4} {r['role']:<8} {r['leader']:>6} "
                   f"{r['leader_epoch']:>7} {r['partition_epoch']:>7}")
