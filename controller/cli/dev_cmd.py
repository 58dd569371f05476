"""`metakraft dev`: the README's main job (for now a timeline demo)."""

from __future__ import annotations

import click


@click.command()
def dev() -> None:
    """Run the local demo."""
    click.echo("timeline demo: pending")
