"""The hub and bench report through callbacks; only the command line and llmcli.render write output."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "llmcli"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("package", ["hub", "bench"])
def test_hub_and_bench_never_import_the_output_layer(package):
    for path in sorted((SRC / package).glob("*.py")):
        rendering = {n for n in _imports(path) if n == "llmcli.render" or n.startswith("llmcli.render.")}
        assert not rendering, f"{path.name} imports {rendering}"


def test_the_runner_does_not_reach_into_the_repl():
    assert not {n for n in _imports(SRC / "generation.py") if n.startswith("llmcli.repl")}
