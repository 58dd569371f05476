"""Runs every data-driven Raft script in testdata/ (see harness.py for the language)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.raft.harness import run_script

SCRIPTS = sorted((Path(__file__).parent / "testdata").glob("*.txt"))


def test_there_are_scripts() -> None:
    assert len(SCRIPTS) >= 8


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_script(path: Path) -> None:
    text = path.read_text()
    assert "§" in text.split("\n", 3)[0] + text.split("\n", 3)[1], "cite the paper section first"
    run_script(text)
