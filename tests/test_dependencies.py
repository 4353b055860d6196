"""Every third-party package the code imports is declared where it is needed, and every declaration
is used: deptry reads the imports (inside functions too) and pyproject.toml's declarations.

Two readings, because deptry knows one project-wide split between runtime and development
dependencies:
- `src/` alone, with the `test` extra as development dependencies: what the tool imports must be a
  runtime dependency (or an optional extra it imports lazily), never a test-only package, and every
  runtime dependency must be used by the tool;
- `src/`, `tests/`, `benchmarks/` and `fuzz/` together, with every extra counted as declared: what
  the tests import must be declared somewhere (a package that happens to be installed on this
  machine does not count), and every entry of the `test` extra must be used.

pyproject.toml's `[tool.deptry]` names the few packages that are used without being imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def deptry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deptry", *args, "--no-ansi"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_tool_imports_only_its_runtime_dependencies_and_uses_each():
    result = deptry("src")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tests_import_only_declared_packages_and_the_test_extra_is_all_used():
    # No development group: the `test` extra counts as declared, and its unused entries are reported.
    result = deptry("src", "tests", "benchmarks", "fuzz", "--optional-dependencies-dev-groups", "none")
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_undeclared_import_is_caught(tmp_path):
    """The check can fail: a copy of the project whose tests import an undeclared package."""
    (tmp_path / "src" / "llmcli").mkdir(parents=True)
    (tmp_path / "src" / "llmcli" / "__init__.py").write_text("import typer\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("import typer\nimport scipy.stats\n")
    pyproject = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(pyproject.replace('"scipy>=1.10",', ""))
    result = subprocess.run(
        [sys.executable, "-m", "deptry", "src", "tests", "--optional-dependencies-dev-groups", "none",
         "--no-ansi"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    # DEP001 where scipy is not installed, DEP003 where it is (as here): undeclared either way
    report = result.stdout + result.stderr  # deptry reports on stderr
    assert "tests/test_x.py:2:8: DEP00" in report and "'scipy' imported but" in report
