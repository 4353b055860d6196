"""The layers of src/llmcli hold: no module imports from a layer above its own, and no two modules
import each other, directly or through others; imports inside functions count. In particular the
hub and bench report through callbacks, and only the command line and llmcli.render write output.

The layers are written down once, as import-linter contracts in pyproject.toml's
`[tool.importlinter]` (docs/ARCHITECTURE.md explains them); this runs `lint-imports` on them, and
shows on a copy of the package that one import up, inside a function, breaks them."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "llmcli"
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(src: Path, cwd: Path) -> subprocess.CompletedProcess:
    """`lint-imports` with pyproject.toml's contracts, on the `llmcli` package under `src`."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [sys.executable, "-c", LINT, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_layers_hold():
    result = lint_imports(ROOT / "src", ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_up_inside_a_function_breaks_them(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "llmcli", src / "llmcli", ignore=shutil.ignore_patterns("__pycache__"))
    core = src / "llmcli" / "names.py"
    core.write_text(core.read_text() + "\n\ndef _up():\n    from llmcli.repl import loop  # noqa: F401\n")
    result = lint_imports(src, tmp_path)
    assert result.returncode != 0
    assert "llmcli.names is not allowed to import llmcli.repl" in result.stdout, result.stdout


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
    for path in sorted((SRC / "request").glob("*.py")):
        assert not {n for n in _imports(path) if n.startswith("llmcli.repl")}, path.name


def _asks_what_an_engine_is(node: ast.AST) -> bool:
    """`x.served`, or `getattr(engine, ...)` / `getattr(self.engine, ...)`: a probe of which engine."""
    if isinstance(node, ast.Attribute) and node.attr == "served":
        return True
    calls_getattr = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr"
    if calls_getattr and node.args:
        target = node.args[0]
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        return name == "engine"
    return False


def test_the_layers_above_the_loader_never_ask_which_engine():
    """The loader decides local or served, once; above it the command line, the REPL, the output
    layer and the request ask the engine what it can do (`engine.can`, `engine.describe()`)."""
    paths = [*sorted((SRC / "cli").glob("*.py")), *sorted((SRC / "repl").glob("*.py")),
             *sorted((SRC / "render").glob("*.py")), *sorted((SRC / "request").glob("*.py"))]  # fmt: skip
    found = [
        f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _asks_what_an_engine_is(node)
    ]
    assert len(paths) > 20 and not found, "\n".join(found)


def test_the_probe_finds_what_it_forbids():
    probes = ["loaded.served", "s.engine.options if s.served else None", "getattr(engine, 'options', None)",
              "getattr(self.engine, 'costs_pending', False)"]  # fmt: skip
    for text in probes:
        assert any(_asks_what_an_engine_is(n) for n in ast.walk(ast.parse(text))), text
    for text in ["engine.can.kv_state", "getattr(options, 'type_k')", "from llmcli.served import engine"]:
        assert not any(_asks_what_an_engine_is(n) for n in ast.walk(ast.parse(text))), text


def test_the_endpoint_syntax_imports_only_the_core_it_needs():
    """settings checks the config file's [endpoints] tables with `served.endpoints`, and served/'s
    config reads the settings: the two packages reach each other (pyproject's acyclic contract
    ignores that one import), so the syntax must import nothing that leads back to settings."""
    mine = {n for n in _imports(SRC / "served" / "endpoints.py") if n.startswith("llmcli")}
    assert mine and all(n.split(".")[:2] in (["llmcli", "errors"], ["llmcli", "names"]) for n in mine), mine
