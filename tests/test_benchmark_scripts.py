"""The benchmark scripts stay runnable as the code moves: each answers --help, and every llmcli name
it imports exists (they import lazily, so --help alone would not notice a moved one)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_llmcli_import_resolves(script):
    missing = []
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("llmcli"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{node.module}.{alias.name}")
    assert missing == []


WITH_FLAGS = [p for p in SCRIPTS if "argparse" in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("script", WITH_FLAGS, ids=lambda p: p.name)
def test_help(script):
    result = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout
