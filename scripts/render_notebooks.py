"""Run the audit notebooks on a real cluster's log and save them with their outputs.

    .venv/bin/python scripts/render_notebooks.py [--data-dir DIR]

Without --data-dir it first runs `metakraft dev --scenario` (3 controllers and 3
brokers on loopback: a broker killed and restarted, a reassignment, a controller
replaced) in a temporary directory. Each notebook in analytics/notebooks then runs
top to bottom on controller 3000's log (the other controllers' logs as the replicas
to compare) and is written back in place, outputs included, so that a reader of the
repository sees the tables and charts without running anything.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "analytics" / "notebooks"
# What the JVM prints on the kernel's stderr while starting: noise in a saved notebook.
JVM_NOISE = re.compile(r"^(WARNING: Using incubator|Using Spark's default log4j|Setting "
                       r"default log level|To adjust logging level|\d\d/\d\d/\d\d .* WARN |"
                       r"\s*$)")


def quiet(nb: Any) -> None:
    """Drop stderr outputs made only of the JVM's start-up lines."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            cell.pop("outputs", None)  # only code cells have outputs (nbformat's schema)
            continue
        cell.outputs = [o for o in cell.get("outputs", [])
                        if not (o.get("name") == "stderr"
                                and all(JVM_NOISE.match(line)
                                        for line in o.get("text", "").splitlines()))]


def scenario(root: Path) -> Path:
    data_dir = root / "dev"
    done = subprocess.run([str(Path(sys.executable).parent / "metakraft"), "dev", "--scenario",
                           "--data-dir", str(data_dir)], cwd=REPO, check=False)
    if done.returncode != 0:
        sys.exit(f"metakraft dev --scenario failed (exit {done.returncode})")
    return data_dir


def main() -> int:
    import nbformat
    from nbclient import NotebookClient

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, help="a `metakraft dev` data directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or scenario(Path(tmp))
        logs = sorted(p / "data" for p in data_dir.glob("controller-*"))
        if not logs:
            sys.exit(f"no controller-*/data under {data_dir}")
        os.environ.update({
            "METAKRAFT_LOG_DIR": str(logs[0]),
            "METAKRAFT_REPLICA_DIRS": ",".join(map(str, logs[1:])),
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                          if p)})
        for path in sorted(NOTEBOOKS.glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            NotebookClient(nb, timeout=600, kernel_name="python3",
                           resources={"metadata": {"path": tmp}}).execute()
            quiet(nb)
            nbformat.write(nb, path)
            print(f"rendered {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
