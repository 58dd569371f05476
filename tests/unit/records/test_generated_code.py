"""The committed generated protobuf code must be what scripts/gen_proto.py produces."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
STALE = "generated code is stale: run .venv/bin/python scripts/gen_proto.py"


def _load_gen_proto() -> ModuleType:
    # scripts/ is not a package; load the script as a module.
    path = REPO_ROOT / "scripts" / "gen_proto.py"
    spec = importlib.util.spec_from_file_location("gen_proto_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, Path]:
    gen_proto = _load_gen_proto()
    out = tmp_path_factory.mktemp("generated")
    gen_proto.generate(out)
    return gen_proto, out


def test_committed_generated_code_is_fresh(regenerated: tuple[ModuleType, Path]) -> None:
    gen_proto, out = regenerated
    stale = []
    for name in gen_proto.generated_files():
        committed = REPO_ROOT / name
        fresh = (out / name).read_bytes()
        if not committed.is_file():
            stale.append(f"{name} (missing)")
        elif committed.read_bytes() != fresh:
            stale.append(name)
    assert not stale, f"{STALE} (differs: {', '.join(stale)})"


def test_generated_code_names_no_local_paths(regenerated: tuple[ModuleType, Path]) -> None:
    gen_proto, out = regenerated
    for name in gen_proto.generated_files():
        text = (out / name).read_text(encoding="utf-8")
        assert str(REPO_ROOT) not in text, f"{name} embeds the checkout path"
        assert str(out) not in text, f"{name} embeds the output path"
