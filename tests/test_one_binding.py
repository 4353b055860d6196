"""One binding: only `llmcli.engine` imports llama_cpp, and each llama.cpp fact is looked up once."""

from __future__ import annotations

import ast
from pathlib import Path

import llmcli

SRC = Path(llmcli.__file__).parent
ENGINE = SRC / "engine"


NAMED = ast.Constant | ast.JoinedStr  # a module named by a literal, or an f-string with a literal start


def llama_cpp_imports(path: Path) -> list[int]:
    """Line numbers of `import llama_cpp...`, `from llama_cpp... import ...` and
    `importlib.import_module("llama_cpp...")` / `__import__("llama_cpp...")` in one source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], NAMED):
            func, arg = node.func, node.args[0]
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if isinstance(arg, ast.JoinedStr):  # f"llama_cpp.{name}": its literal start
                first = arg.values[0] if arg.values else None
                arg = first if isinstance(first, ast.Constant) else ast.Constant("")
            names = [str(arg.value)] if called in ("import_module", "__import__", "find_spec") else []
        else:
            continue
        if any(name == "llama_cpp" or name.startswith("llama_cpp.") for name in names):
            lines.append(node.lineno)
    return lines


def test_only_the_engine_imports_llama_cpp():
    outside = {
        f"{path.relative_to(SRC)}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if ENGINE not in path.parents
        for line in llama_cpp_imports(path)
    }
    assert outside == set(), "llama_cpp imported outside src/llmcli/engine/"


def test_the_scan_sees_every_import_form(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\nimport llama_cpp\nimport llama_cpp.llama_cpp as L\n"
        "def f():\n    from llama_cpp.llama_grammar import json_schema_to_gbnf\n"
        "    from llama_cpp import llama_backend_init\n"
        "    import importlib\n    importlib.import_module('llama_cpp')\n"
        "    from . import llama_cpp_like\n    import llama_cpp_python_docs\n"
        "    importlib.import_module(f'llama_cpp.{name}')\n    importlib.util.find_spec('llama_cpp')\n"
    )
    assert llama_cpp_imports(sample) == [2, 3, 5, 6, 8, 11, 12]


def test_the_engine_does_import_it():
    assert any(llama_cpp_imports(path) for path in ENGINE.glob("*.py"))  # the scan is not blind


def _has_file_type_table(path: Path) -> bool:
    """Whether a dict literal maps llama_ftype 15 to "Q4_K_M" (a copy of the file-type table)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            pairs = zip(node.keys, node.values, strict=True)
            if any(isinstance(k, ast.Constant) and k.value == 15 and getattr(v, "value", None) == "Q4_K_M"
                   for k, v in pairs):  # fmt: skip
                return True
    return False


def test_each_lookup_exists_once():
    """The llama-cpp-python version, the file-type table and the ggml probes have one home each."""
    sources = {path: path.read_text(encoding="utf-8") for path in SRC.rglob("*.py")}
    version_lookups = {p for p, text in sources.items() if 'version("llama_cpp_python")' in text}
    assert version_lookups == {ENGINE / "backend.py"}
    assert [p for p, text in sources.items() if "llama_cpp.__version__" in text] == []
    assert [p for p in sources if _has_file_type_table(p)] == [SRC / "gguf_file.py"]
    assert [p for p, text in sources.items() if "ggml_backend_dev_count" in text] == [ENGINE / "backend.py"]
    private = [p for p, text in sources.items() if "._lib" in text or "llama_cpp._" in text]
    assert private == [ENGINE / "backend.py"]  # the one documented reach into llama-cpp-python
