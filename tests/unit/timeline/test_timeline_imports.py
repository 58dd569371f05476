"""The timeline package imports no I/O, clock, randomness or threading (architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import timeline

FORBIDDEN = {"asyncio", "grpc", "socket", "time", "random", "threading"}


def test_timeline_imports_are_pure() -> None:
    package = Path(timeline.__file__).parent
    files = sorted(package.glob("*.py"))
    assert files
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"


def test_public_api_exported() -> None:
    for name in (
        "SnapshotRegistry",
        "TimelineHashMap",
        "TimelineHashSet",
        "TimelineInteger",
        "TimelineLong",
        "TimelineObject",
        "TimelineSortedMap",
        "SnapshotNotFoundError",
    ):
        assert name in timeline.__all__ and hasattr(timeline, name)
