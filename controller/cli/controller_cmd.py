"""`metakraft controller --config FILE`: run a controller (see controller/quorum_controller)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from controller.quorum_controller.config_file import EXAMPLE_CONFIG, load_config
from controller.storage.errors import LogCorruptionError, StorageError
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
    from controller.log import get_logger, setup_logging
    from controller.quorum_controller.daemon import run_controller

    setup_logging(config.log_level, config.log_format)
    try:
        sys.exit(asyncio.run(run_controller(config)))
    except LogCorruptionError as exc:
        get_logger("metakraft.daemon").debug("refused_to_start", exc_info=True)
        data_dir = config.driver.data_dir
        click.echo(
            f"metakraft controller: refusing to start: the metadata log is damaged: {exc}. "
            "Records behind the damage may include writes this controller acknowledged, so "
            "it must not vote or serve as it is. Replace its disk (docs/operations.md, "
            "\"Replacing a controller's disk\"): `metakraft storage reformat-replica "
            f"--data-dir {data_dir}`, start it, then `metakraft quorum remove-controller "
            f"--id {config.driver.node_id} --directory-id <old id>` and `metakraft quorum "
            "add-controller --controller HOST:PORT`.", err=True)
        sys.exit(1)
    except StorageError as exc:
        get_logger("metakraft.daemon").debug("refused_to_start", exc_info=True)
        click.echo(f"metakraft controller: refusing to start: {exc}", err=True)
        sys.exit(1)
