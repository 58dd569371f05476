"""`metakraft notebooks`: open the audit notebooks in JupyterLab."""

from __future__ import annotations

import importlib.util
import os
import shutil
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
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("metakraft-notebooks"), show_default=True,
              help="Where the notebooks are copied and opened: running them writes their "
                   "outputs there, never into the installed ones. A copy already there "
                   "(your edits) is kept.")
@click.option("--print-dir", is_flag=True,
              help="Print where the installed notebooks are and exit.")
def notebooks(log_dir: Path | None, workdir: Path, print_dir: bool) -> None:
    """Open the audit notebooks (cluster overview, topic forensics, invariant check)
    in JupyterLab, on a controller's log: copies of them, in --workdir. Needs the
    `notebooks` extra: pip install -e ".[notebooks]"."""
    where = notebooks_dir()
    if print_dir:
        click.echo(str(where))
        return
    if importlib.util.find_spec("jupyterlab") is None:
        click.echo("error: JupyterLab is not installed in this environment; install the "
                   "extra: pip install -e \".[notebooks]\" (or open copies of the .ipynb "
                   f"files in {where} with any Jupyter)", err=True)
        sys.exit(1)
    copied = copy_notebooks(where, workdir)
    click.echo(f"notebooks in {workdir.resolve()}" + (f" ({len(copied)} copied)" if copied
                                                      else " (your copies, kept)"), err=True)
    env = dict(os.environ)
    if log_dir is not None:
        env["METAKRAFT_LOG_DIR"] = str(log_dir.resolve())
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(subprocess.call([sys.executable, "-m", "jupyterlab",
                              f"--notebook-dir={workdir.resolve()}"], env=env))


def copy_notebooks(source: Path, workdir: Path) -> list[Path]:
    """Copy the installed notebooks into `workdir` (created); a notebook already there
    is left as it is. Returns the copies made."""
    workdir.mkdir(parents=True, exist_ok=True)
    made = []
    for notebook in sorted(source.glob("*.ipynb")):
        target = workdir / notebook.name
        if not target.exists():
            shutil.copyfile(notebook, target)
            made.append(target)
    return made
