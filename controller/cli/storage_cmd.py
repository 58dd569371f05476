"""`metakraft storage ...`: formatting data directories (filled in by the storage work)."""

from __future__ import annotations

import click


@click.group()
def storage() -> None:
    """Format and inspect data directories."""
