"""The notebooks run top to bottom against the test log (offline, this venv's kernel)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.analytics.history import Known

pytestmark = pytest.mark.spark

NOTEBOOKS = Path(__file__).resolve().parents[2] / "analytics" / "notebooks"


@pytest.mark.parametrize("name", ["cluster_overview", "topic_forensics", "invariant_check"])
def test_notebook_runs(name: str, log_dir: tuple[Path, Known], tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("METAKRAFT_LOG_DIR", str(log_dir[0]))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    # The kernel must be this venv's interpreter: ipykernel's built-in "python3" spec
    # runs sys.executable when no other python3 kernel is installed; the env var pins it.
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    env_path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(NOTEBOOKS.parents[1]), env_path) if p))
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
