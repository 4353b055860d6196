"""llmcli's plain value conversion (cli/coercion.py) gives Typer's own answers, without pydantic.

Every case converts one value twice: through the parameter conversion llmcli installs, and through
Typer's own (its pydantic adapter). The two must return the same value of the same type, or raise
the same error with the same message. A Typer release that changes its conversion fails here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmcli.cli import coercion

typer_core = pytest.importorskip("typer.core")
if not coercion.install():
    pytest.skip("this Typer converts values without the private names llmcli uses", allow_module_level=True)

from typer import _coercion  # noqa: E402
from typer.models import OptionInfo  # noqa: E402

WHOLE = ["12", "+5", "-3", "007", " 12", "12 ", "1_000", "12.0", "1e3", "0x10", "abc", "", "\u0663", 5, 0]
DECIMAL = ["1.5", "1.", ".5", "-.5", "+2", "3", "1e-3", "inf", "nan", "abc", "", "1_0.5", " 2", 2, 2.5, -1]


def answers(annotation, value, **info):
    """(llmcli's answer, Typer's answer): each ("ok", value, type) or ("error", class, message)."""
    descriptor = _coercion.resolve_type_descriptor(annotation, OptionInfo(**info))
    fake = SimpleNamespace(_runtime_param=None, type_descriptor=descriptor)
    ours = typer_core._TyperParameter.get_runtime_param(fake)
    theirs = _coercion.build_runtime_param(descriptor)

    def run(runtime):
        try:
            got = runtime._coerce_value(value, param=None, ctx=None)
        except Exception as exc:  # noqa: BLE001 - the error itself is compared
            return ("error", type(exc).__name__, str(exc))
        kinds = [type(item) for item in got] if isinstance(got, list) else type(got)
        return ("ok", repr(got), kinds)  # repr: nan equals itself

    return run(ours), run(theirs), type(ours).__name__


@pytest.mark.parametrize("value", WHOLE)
def test_whole_numbers(value):
    ours, theirs, _ = answers(int, value)
    assert ours == theirs


@pytest.mark.parametrize("value", ["0", "1", "5", "10", "11", "-1", 7, 12])
def test_whole_numbers_in_a_range(value):
    ours, theirs, _ = answers(int, value, min=1, max=10)
    assert ours == theirs


@pytest.mark.parametrize("value", DECIMAL)
def test_decimals(value):
    ours, theirs, _ = answers(float, value)
    assert ours == theirs


@pytest.mark.parametrize("value", ["2.5", "-0.1", "0", "2", "1.999", 3])
def test_decimals_in_a_range(value):
    ours, theirs, _ = answers(float, value, min=0.0, max=2.0)
    assert ours == theirs


@pytest.mark.parametrize("annotation,value", [
    (str, "hello"), (str, ""), (str, "--x"), (str, "\u00e9t\u00e9"), (bool, True), (bool, False),
    (bool, "true"), (bool, "no"), (list[str], ["a", "b"]), (list[str], ("a",)), (list[str], []),
    (list[int], ["1", "2"]), (list[int], ["1", "x"]),
])  # fmt: skip
def test_strings_flags_and_lists(annotation, value):
    ours, theirs, _ = answers(annotation, value)
    assert ours == theirs


def test_paths_and_their_checks(tmp_path: Path):
    present = tmp_path / "a.txt"
    present.write_text("x")
    missing = tmp_path / "nothing-here"
    cases = [
        (Path, str(present), {}), (Path, "", {}), (Path, "-", {}), (Path, present, {}),
        (Path, str(missing), {"exists": True}), (Path, str(present), {"exists": True}),
        (Path, str(tmp_path), {"exists": True, "dir_okay": False}),
        (Path, str(present), {"exists": True, "file_okay": False}),
        (Path, str(present), {"resolve_path": True}),
        (list[Path], [str(present), str(missing)], {}),
        (list[Path], [str(present), str(missing)], {"exists": True}),
    ]  # fmt: skip
    for annotation, value, info in cases:
        ours, theirs, _ = answers(annotation, value, **info)
        assert ours == theirs, (annotation, value, info)


def test_plain_values_are_answered_without_typer():
    """The common spellings never reach Typer's adapter (which would import pydantic)."""
    for annotation, value, info in [(int, "12", {}), (float, "0.7", {}), (str, "x", {}),
                                    (int, "4", {"min": 1, "max": 8}), (list[str], ["a"], {})]:  # fmt: skip
        descriptor = _coercion.resolve_type_descriptor(annotation, OptionInfo(**info))
        runtime = typer_core._TyperParameter.get_runtime_param(
            SimpleNamespace(_runtime_param=None, type_descriptor=descriptor)
        )
        assert type(runtime).__name__ == "PlainRuntimeParam"
        object.__setattr__(runtime, "_typer", None)  # any hand-off to Typer would now fail
        assert runtime._coerce_value(value, param=None, ctx=None) is not None


def test_a_command_line_starts_without_pydantic(tmp_path: Path):
    """`llmcli generate --help`-level parsing of every common option kind imports no pydantic."""
    args = ["-n", "8", "--temperature", "0.5", "--seed", "3", "-m", "x.gguf", "hi"]
    script = (
        "import sys\n"
        "from llmcli.cli.app import app\n"
        "import typer\n"
        "cmd = typer.main.get_command(app)\n"
        f"ctx = cmd.make_context('llmcli', {['generate', *args]!r})\n"
        "sub = cmd.get_command(ctx, 'generate')\n"
        f"sub.make_context('generate', {args!r}, parent=ctx)\n"
        "print('pydantic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
