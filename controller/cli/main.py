"""The `metakraft` command: one entry point for operators, tools and the dev cluster.

Each area lives in its own module and registers a click group here, so this file
stays a table of contents.
"""

from __future__ import annotations

import click

from controller import __version__
from controller.cli.acls_cmd import acls
from controller.cli.admin_cmds import ADMIN_COMMANDS
from controller.cli.audit_cmd import audit
from controller.cli.broker_cmd import broker, broker_status
from controller.cli.controller_cmd import controller
from controller.cli.data_cmds import consume, produce
from controller.cli.dev_cmd import dev
from controller.cli.endpoint_cmd import endpoint
from controller.cli.log_cmd import log
from controller.cli.notebooks_cmd import notebooks
from controller.cli.shell_cmd import shell
from controller.cli.storage_cmd import storage
from controller.cli.tier_cmd import tier
from controller.cli.watch_cmd import watch


def metakraft_version() -> str:
    # From the code, not the installed package's metadata: a source tree run with
    # another tree's virtualenv (an upgrade test) reports its own release.
    return __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="metakraft", message="%(prog)s %(version)s")
def cli() -> None:
    """metakraft: a KRaft-style metadata controller (Raft quorum, timeline state, broker agents)."""


@cli.command()
def version() -> None:
    """Print the metakraft version."""
    click.echo(f"metakraft {metakraft_version()}")


cli.add_command(controller)
cli.add_command(broker)
cli.add_command(broker_status)
cli.add_command(dev)
cli.add_command(storage)
cli.add_command(log)
cli.add_command(audit)
cli.add_command(notebooks)
cli.add_command(tier)
cli.add_command(acls)
cli.add_command(endpoint)
cli.add_command(shell)
cli.add_command(produce)
cli.add_command(consume)
cli.add_command(watch)
for _command in ADMIN_COMMANDS:
    cli.add_command(_command)


def main() -> None:
    cli()
