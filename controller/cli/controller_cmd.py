"""`metakraft controller --config FILE`: run a controller (see controller/quorum_controller)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from controller.quorum_controller.config_file import EXAMPLE_CONFIG, load_config
from controller.toml_config import ConfigError


@click.command("controller")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="TOML config file (see --print-example).")
@click.option("--print-example", is_flag=True, help="Print a commented example config and exit.")
def controller(config_path: Path | None, print_example: bool) -> None:
    """Run one metadata controller of the quorum (Raft + Admin + broker services)."""
    if print_example:
        click.echo(EXAMPLE_CONFIG, nl=False)
        return
    if config_path is None:
        raise click.UsageError("--config FILE is required (or --print-example)")
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        click.echo(f"metakraft controller: bad config {config_path}: {exc}", err=True)
        sys.exit(2)
    from controller.quorum_controller.daemon import run_controller
    from controller.quorum_controller.logs import setup_logging

    setup_logging(config.log_level, config.log_format)
    sys.exit(asyncio.run(run_controller(config)))
