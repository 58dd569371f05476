"""Shell completion as the README documents it: the installed `metakraft` answers
click's completion protocol with commands, options and an option's choices."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The console script `pip install` made, beside this interpreter.
METAKRAFT = str(Path(sys.executable).parent / "metakraft")


def _complete(words: str) -> list[str]:
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1),
           "_METAKRAFT_COMPLETE": "bash_complete"}
    done = subprocess.run([METAKRAFT], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines()]


def test_commands_options_and_choices_complete() -> None:
    assert "log" in _complete("metakraft lo")
    assert "--to-offset" in _complete("metakraft log dump --to")
    assert {"partition", "partition_change"} <= set(_complete("metakraft log dump --type par"))


def test_the_shell_script_names_the_program() -> None:
    env = {**os.environ, "_METAKRAFT_COMPLETE": "bash_source"}
    done = subprocess.run([METAKRAFT], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0 and "complete -o nosort -F _metakraft_completion metakraft" \
        in done.stdout, done.stdout[-500:]
