"""The house stays one a reader can hold: no module of src/llmcli over 600 lines (the hardened GGUF
parser aside) and no function over 80; a command parses, hands one options object down, renders."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "llmcli"


def test_no_module_over_600_lines():
    big = [f"{p.relative_to(SRC)}: {n}" for p in sorted(SRC.rglob("*.py")) if p.name != "gguf_file.py"
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600]  # fmt: skip
    assert not big, big


def test_no_function_over_80_lines():
    long = [
        f"{p.relative_to(SRC)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}"
        for p in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long, long
