"""The cores do no I/O, transitively: every module a core module imports, and every
module those import, and so on (package `__init__`s included, as Python runs them),
stays clear of the event loop, the RPC stack, sockets, threads, clocks, randomness
and file I/O. Time, randomness and storage come in as parameters; that is what lets
a seeded simulation run the real cores deterministically.

The check is static (the import statements of our own modules, not `sys.modules`
after an import, which would also see what third-party libraries load for
themselves); imports under `if TYPE_CHECKING:` do not run and do not count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUR_PACKAGES = ("controller", "timeline", "broker_agent", "analytics")
FORBIDDEN = {"asyncio", "grpc", "socket", "time", "random", "threading", "selectors",
             "subprocess", "os", "shutil", "tempfile", "fcntl", "io", "mmap", "signal",
             "concurrent", "multiprocessing", "pathlib"}

# The pure cores: the Raft protocol, the timeline structures, the control managers
# (they generate records; replay is the only mutator), the controller's state
# machine, and the broker's image, delta, loader, reconciler and lifecycle machine.
def _every_module(package: str) -> list[str]:
    directory = ROOT.joinpath(*package.split("."))
    return [package] + [f"{package}.{p.stem}" for p in sorted(directory.glob("*.py"))
                        if p.stem != "__init__"]


CORES = {
    "raft core": _every_module("controller.raft"),
    "timeline": _every_module("timeline"),
    "control managers": ["controller.metadata"],
    "controller core": ["controller.quorum_controller.machine"],
    "broker image, loader, reconciler and lifecycle": [
        "broker_agent.image", "broker_agent.delta", "broker_agent.loader",
        "broker_agent.reconciler", "broker_agent.lifecycle_machine"],
}


def module_path(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _runtime_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run: not those under `if TYPE_CHECKING:`."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) \
                    and child.test.id == "TYPE_CHECKING":
                stack.extend(child.orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            stack.append(child)


def imports_of(name: str) -> tuple[set[str], set[str]]:
    """(our modules `name` imports, the other top-level packages it imports)."""
    path = module_path(name)
    assert path is not None, name
    ours: set[str] = set()
    others: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            module = node.module or ""
            if node.level:
                parts = package.split(".")
                module = ".".join(parts[:len(parts) - node.level + 1] + ([module] if module
                                                                          else []))
            targets = [module]
            # `from package import submodule` imports the submodule too.
            targets += [f"{module}.{alias.name}" for alias in node.names
                        if module_path(f"{module}.{alias.name}") is not None]
        for target in targets:
            if target.split(".")[0] in OUR_PACKAGES:
                if module_path(target) is not None:
                    ours.add(target)
            elif target != "__future__":
                others.add(target.split(".")[0])
    return ours, others


def closure(start: list[str]) -> dict[str, set[str]]:
    """Every module of ours that importing `start` runs, with its outside imports."""
    seen: dict[str, set[str]] = {}
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        # Importing a.b.c runs a/__init__ and a/b/__init__ first.
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        ours, others = imports_of(name)
        seen[name] = others
        todo += sorted(ours)
    return seen


@pytest.mark.parametrize("core", sorted(CORES))
def test_cores_import_no_io_transitively(core: str) -> None:
    reached = closure(CORES[core])
    bad = {name: sorted(others & FORBIDDEN) for name, others in reached.items()
           if others & FORBIDDEN}
    assert not bad, f"{core} reaches I/O through: {bad}"


def test_the_checker_sees_what_it_must() -> None:
    # It follows `from package import submodule` and package __init__s, and it
    # finds a forbidden import where there is one (the Raft driver's asyncio).
    reached = closure(["controller.quorum.driver"])
    assert "asyncio" in reached["controller.quorum.driver"]
    assert "controller" in reached and "controller.raft.node" in reached
    assert "controller.raft" in reached  # the package __init__ it runs
