"""`metakraft notebooks`: open the audit notebooks in JupyterLab."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import click


def notebooks_dir() -> Path:
    import analytics

    return Path(analytics.__file__).resolve().parent / "notebooks"


@click.command("notebooks")
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path),
              help="The controller data directory the notebooks read (METAKRAFT_LOG_DIR).")
@click.option("--print-dir", is_flag=True, help="Print where the notebooks are and exit.")
def notebooks(log_dir: Path | None, print_dir: bool) -> None:
    """Open the audit notebooks (cluster overview, topic forensics, invariant check)
    in JupyterLab, on a controller's log. Needs the `notebooks` extra:
    pip install -e ".[notebooks]"."""
    where = notebooks_dir()
    if print_dir:
        click.echo(str(where))
        return
    if importlib.util.find_spec("jupyterlab") is None:
        click.echo("error: JupyterLab is not installed in this environment; install the "
                   "extra: pip install -e \".[notebooks]\" (or open the .ipynb files in "
                   f"{where} with any Jupyter)", err=True)
        sys.exit(1)
    env = dict(os.environ)
    if log_dir is not None:
        env["METAKRAFT_LOG_DIR"] = str(log_dir.resolve())
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(subprocess.call([sys.executable, "-m", "jupyterlab", f"--notebook-dir={where}"],
                             env=env))
