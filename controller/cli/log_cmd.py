"""`metakraft log ...`: dump and verify segments and snapshots (filled in by the storage work)."""

from __future__ import annotations

import click


@click.group()
def log() -> None:
    """Dump and verify metadata log segments and snapshots."""
