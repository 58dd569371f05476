"""The Raft core does no I/O: no module of controller/raft (other than the I/O
driver modules named below) imports asyncio, grpc, socket, time, random or
threading. Time and randomness come in as parameters, which is what lets the
simulation run the real core deterministically."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

RAFT_DIR = Path(__file__).resolve().parents[3] / "controller" / "raft"
FORBIDDEN = {"asyncio", "grpc", "socket", "time", "random", "threading", "selectors", "subprocess"}
# Modules that are the I/O side (the asyncio/grpc driver and service). Every other
# module in controller/raft is core and must stay pure.
IO_MODULES = {"driver", "service", "transport", "grpc_service"}

CORE_MODULES = sorted(p for p in RAFT_DIR.glob("*.py") if p.stem not in IO_MODULES)


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_modules_exist() -> None:
    names = {p.stem for p in CORE_MODULES}
    assert {"node", "log", "messages", "roles", "ready"} <= names


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: p.stem)
def test_core_module_imports_no_io(path: Path) -> None:
    bad = _imported_roots(path) & FORBIDDEN
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_importing_the_core_loads_no_io_package() -> None:
    """Transitively too, for the event loop and the RPC stack. (threading and
    socket are left out here: attrs and the standard library load them without
    the core ever using them.)"""
    code = (
        "import sys, controller.raft, controller.raft.node;"
        "print(','.join(m for m in ('asyncio','grpc') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", out.stdout
