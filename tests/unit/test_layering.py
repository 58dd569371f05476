"""The cores do no I/O, transitively: every module a core module imports, and every
module those import, and so on (package `__init__`s included, as Python runs them),
stays clear of the event loop, the RPC stack, sockets, threads, clocks, randomness
and file I/O. Time, randomness and storage come in as parameters; that is what lets
a seeded simulation run the real cores deterministically.

The check is static (the import statements of our own modules, not `sys.modules`
after an import, which would also see what third-party libraries load for
themselves); imports under `if TYPE_CHECKING:` do not run and do not count.

Two more rules hold for every module, with every import statement counted (lazy
ones inside functions and `TYPE_CHECKING` ones too, since they are dependencies all
the same):
- arrows point down: each package has a floor (`FLOORS`), and a module imports
  only from lower floors or its own package; `analytics` reads only the log's
  formats, storage and the tier (`ANALYTICS_READS`);
- no circles: no module reaches itself through its imports (`from package import
  submodule` counts as importing the submodule).
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


# Each package's floor: imports go to lower floors only. The composition root
# (cli, devcluster) is on top; it alone may import broker_agent and analytics.
FLOORS = {
    "timeline": 0, "controller": 0, "controller.log": 0, "controller.toml_config": 0,
    "controller.logformat": 0, "controller.records": 0, "controller.backoff": 0,
    "controller.gc_policy": 1, "controller.metrics_common": 1, "controller.storage": 1,
    "controller.security": 2, "controller.raft": 2,
    "controller.rpc": 3, "controller.metadata": 3,
    "controller.quorum": 4, "controller.tier": 4, "controller.api": 4,
    "controller.watch": 5, "broker_agent": 5, "analytics": 5,
    "controller.quorum_controller": 6,
    "controller.devcluster": 7,
    "controller.cli": 8,
}
ANALYTICS_READS = {"controller.logformat", "controller.records", "controller.storage",
                   "controller.tier"}


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


def every_module() -> list[str]:
    names = []
    for package in OUR_PACKAGES:
        for path in sorted(ROOT.joinpath(package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def dependencies_of(name: str) -> set[str]:
    """Our modules `name` imports anywhere in its text (lazy and TYPE_CHECKING imports
    included); `from package import submodule` is the submodule."""
    path = module_path(name)
    assert path is not None, name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")
                module = ".".join(parts[:len(parts) - node.level + 1] + ([module] if module
                                                                          else []))
            submodules = [f"{module}.{alias.name}" for alias in node.names
                          if module_path(f"{module}.{alias.name}") is not None]
            targets = submodules + ([module] if len(submodules) < len(node.names) else [])
        else:
            continue
        found.update(t for t in targets
                     if t.split(".")[0] in OUR_PACKAGES and module_path(t) is not None)
    return found


def package_of(name: str) -> str:
    """The `FLOORS` key a module belongs to (its longest prefix there)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in FLOORS:
            return prefix
    raise AssertionError(f"{name}: no floor in FLOORS (add its package)")


def test_arrows_point_down() -> None:
    upward = []
    for name in every_module():
        source = package_of(name)
        for target in dependencies_of(name):
            dest = package_of(target)
            if dest == source:
                continue
            if FLOORS[dest] >= FLOORS[source] or (source == "analytics"
                                                  and dest not in ANALYTICS_READS):
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that do not go down a floor:\n" + "\n".join(sorted(upward))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative: a recursive walk of a long import chain could hit the limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_no_import_circles() -> None:
    graph = {name: dependencies_of(name) for name in every_module()}
    assert not circles(graph)


def test_the_rules_see_what_they_must() -> None:
    # The circle finder finds one, and the floors rank the composition root on top.
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    assert package_of("controller.cli.main") == "controller.cli"
    assert FLOORS["controller.cli"] > FLOORS["broker_agent"] > FLOORS["controller.quorum"]
    assert "controller.quorum.contracts" in dependencies_of("controller.quorum.driver")
