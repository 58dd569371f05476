"""The notebooks run top to bottom against each test log (offline, this venv's kernel).

All three run in ONE kernel, one after another, each in a fresh namespace (`%reset
-f` before it): what they share is the process (imported modules, the JVM), not
their variables. A kernel and a JVM each cost several seconds to start, which is
most of what running a notebook on the test log costs. The JVM is started with
whole-stage code generation and adaptive execution off (the test session's
settings): compiling generated code costs more than running these tiny plans; and the
JVM compiles with C1 only (`SMALL_LOG_JAVA_OPTIONS`, what a small audit runs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.analytics.conftest import DevRun
from tests.analytics.plant import record_count

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

NOTEBOOKS = Path(__file__).resolve().parents[2] / "analytics" / "notebooks"
NAMES = ["cluster_overview", "topic_forensics", "invariant_check"]


def test_notebooks_run(dev_run: DevRun, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real cluster's log (`metakraft dev --scenario`: a broker killed, a
    reassignment, a controller replaced, ACLs), its other two controllers' logs given
    as the replicas to compare. (Once: every audit function the notebooks call is
    checked on the scripted history by test_audit.py; a second log here cost ~200 s
    of the suite for no path the first does not take.)"""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from analytics.report import SMALL_LOG_JAVA_OPTIONS

    target, *others = dev_run.controller_logs()
    monkeypatch.setenv("METAKRAFT_REPLICA_DIRS", ",".join(map(str, others)))
    records = record_count(target)
    monkeypatch.setenv("METAKRAFT_LOG_DIR", str(target))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", " ".join([
        "--conf spark.sql.codegen.wholeStage=false", "--conf spark.sql.adaptive.enabled=false",
        "--conf spark.ui.enabled=false", "--driver-memory 1g",
        f"--driver-java-options '{SMALL_LOG_JAVA_OPTIONS}'", "pyspark-shell"]))
    # The kernel must be this venv's interpreter: ipykernel's built-in "python3" spec
    # runs sys.executable when no other python3 kernel is installed; the env var pins it.
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    env_path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(NOTEBOOKS.parents[1]), env_path) if p))
    combined = nbformat.v4.new_notebook()
    owner: list[str] = []
    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        cells = [nbformat.v4.new_code_cell("%reset -f"), *nb.cells]
        combined.cells.extend(cells)
        owner.extend([name] * len(cells))
    client = NotebookClient(combined, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        done = [i for i, c in enumerate(combined.cells)
                if c.cell_type == "code" and c.get("execution_count")]
        name = owner[done[-1]] if done else NAMES[0]
        pytest.fail(f"notebook {name} failed: {exc}")
    executed = {owner[i] for i, c in enumerate(combined.cells)
                if c.cell_type == "code" and c.get("execution_count")}
    assert executed == set(NAMES)
    outputs = [o for c in combined.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # Each notebook read the whole log it was given.
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert printed.count(f"{records} records\n") == len(NAMES)


def test_the_committed_notebooks_show_their_outputs() -> None:
    """Rendered by scripts/render_notebooks.py from a `metakraft dev --scenario` log: a
    reader sees the tables and the charts (inline PNGs) without running anything."""
    import nbformat

    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.get("execution_count") for c in code), name
        outputs = [o for c in code for o in c.get("outputs", [])]
        assert not [o for o in outputs if o.get("output_type") == "error"], name
        assert any("records\n" in o.get("text", "") for o in outputs), name
    overview = nbformat.read(NOTEBOOKS / "cluster_overview.ipynb", as_version=4)
    images = [o for c in overview.cells for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) == 3  # records per minute, fencing timeline, leader changes


def test_metakraft_notebooks_finds_them_and_says_what_to_install() -> None:
    import importlib.util

    from click.testing import CliRunner

    from controller.cli.main import cli

    where = CliRunner().invoke(cli, ["notebooks", "--print-dir"])
    assert where.exit_code == 0 and Path(where.stdout.strip()) == NOTEBOOKS
    if importlib.util.find_spec("jupyterlab") is None:
        missing = CliRunner().invoke(cli, ["notebooks"])
        assert missing.exit_code == 1 and '.[notebooks]' in missing.stderr


def test_metakraft_notebooks_opens_copies_and_never_writes_the_installed_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run writes outputs into the notebook it runs: `metakraft notebooks` copies
    them to --workdir and opens JupyterLab there; an edited copy is kept."""
    import importlib.util
    import subprocess

    from click.testing import CliRunner

    from controller.cli import notebooks_cmd
    from controller.cli.main import cli

    before = {p.name: p.read_bytes() for p in NOTEBOOKS.glob("*.ipynb")}
    work = tmp_path / "work"
    (work).mkdir()
    (work / "topic_forensics.ipynb").write_text("{}")  # the user's own edits
    launched: list[list[str]] = []
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object()
                        if name == "jupyterlab" else real_find_spec(name, *a))
    monkeypatch.setattr(subprocess, "call",
                        lambda args, env=None: launched.append(list(args)) or 0)
    result = CliRunner().invoke(cli, ["notebooks", "--workdir", str(work)])
    assert result.exit_code == 0, result.output
    assert launched == [[sys.executable, "-m", "jupyterlab", f"--notebook-dir={work.resolve()}"]]
    assert sorted(p.name for p in work.glob("*.ipynb")) == sorted(before)
    assert (work / "topic_forensics.ipynb").read_text() == "{}"
    assert (work / "cluster_overview.ipynb").read_bytes() == before["cluster_overview.ipynb"]
    assert {p.name: p.read_bytes() for p in NOTEBOOKS.glob("*.ipynb")} == before
    assert notebooks_cmd.copy_notebooks(NOTEBOOKS, work) == []  # nothing left to copy
