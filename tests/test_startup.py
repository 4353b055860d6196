"""What a short command loads: llama.cpp's binding without llama-cpp-python's high-level layer,
greedy picks without numpy until it pays, no pydantic for plain flags; and the same answers."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

from llmcli.engine import backend

RUN = """
import json, sys
from llmcli.engine import sampler
sampler._chain_picks_left[0] = int(sys.argv[1])
from llmcli.cli.app import main
sys.argv = ["llmcli", *sys.argv[2:]]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
loaded = [m for m in ("numpy", "pydantic", "jinja2", "llama_cpp.llama", "llama_cpp.llama_chat_format")
          if m in sys.modules]
sys.stderr.write("\\nLOADED " + json.dumps({"code": code, "loaded": loaded}) + "\\n")
"""

GENERATE = ["generate", "-m", "smollm2-135m", "--temperature", "0", "--repeat-penalty", "1", "-n", "40",
            "--seed", "1", "List three colours of the rainbow."]  # fmt: skip


def run(chain_picks: int, args: list[str]) -> tuple[str, dict]:
    done = subprocess.run([sys.executable, "-c", RUN, str(chain_picks), *args],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    marker = [line for line in done.stderr.splitlines() if line.startswith("LOADED ")]
    assert marker, done.stderr
    report = json.loads(marker[-1].removeprefix("LOADED "))
    assert report["code"] in (0, None), done.stderr
    return done.stdout, report


def test_a_short_answer_loads_no_numpy_and_no_high_level_layer():
    text, report = run(10_000, GENERATE)
    assert text.strip()
    assert "numpy" not in report["loaded"]
    assert "pydantic" not in report["loaded"]
    assert "llama_cpp.llama" not in report["loaded"]
    assert "llama_cpp.llama_chat_format" not in report["loaded"]
    assert "jinja2" in report["loaded"]  # the chat template's renderer: the scan sees imports


def test_greedy_picks_by_the_chain_and_by_the_argmax_are_the_same_answer():
    """All 40 tokens by llama.cpp's greedy chain; the first 5 by it and the rest by numpy's argmax
    (the switch mid-answer); all by the argmax: one text."""
    by_chain, chain_report = run(10_000, GENERATE)
    switched, switched_report = run(6, GENERATE)
    by_argmax, _ = run(1, GENERATE)
    assert "numpy" not in chain_report["loaded"]
    assert "numpy" in switched_report["loaded"]
    assert len(by_chain.split()) >= 5
    assert by_chain == switched == by_argmax


def test_the_deferred_package_becomes_the_whole_package_on_demand():
    code = (
        "import sys\n"
        "from llmcli.engine import backend\n"
        "L = backend.library(); M = backend.binding('mtmd_cpp')\n"
        "assert 'numpy' not in sys.modules and 'llama_cpp.llama' not in sys.modules\n"
        "assert L.llama_supports_mmap() in (True, False)\n"
        "import llama_cpp\n"
        "assert llama_cpp.llama_cpp is L and llama_cpp.mtmd_cpp is M\n"
        "assert 'llama_cpp.llama' not in sys.modules  # importing the package alone runs nothing\n"
        "from llama_cpp import Llama, __version__\n"
        "assert Llama.__module__ == 'llama_cpp.llama' and __version__\n"
        "assert llama_cpp.llama_backend_init is L.llama_backend_init\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_version_read_beside_the_package_is_the_installed_one():
    backend.llama_cpp_version.cache_clear()
    assert backend.llama_cpp_version() == version("llama_cpp_python")


def test_every_command_is_found_by_its_word_alone():
    """A command line builds only the named command's module (cli/app.py `named`): each name a
    module registers leads back to that module, and the whole app has no name the map misses."""
    import typer

    from llmcli.cli import app as cli

    whole = typer.main.get_command(cli.whole_app())
    for module in cli.COMMANDS:
        registered = typer.main.get_command(cli.new_app((module,))).commands
        assert registered, module
        for name in registered:
            assert cli.REGISTERED_BY.get(name, name) == module, (name, module)
            assert name in whole.commands
    for name in whole.commands:
        one = typer.main.get_command(cli.named(["-q", name, "--help"]))
        assert name in one.commands and len(one.commands) < len(whole.commands), name


def test_a_word_that_names_no_command_gets_the_whole_app():
    from llmcli.cli import app as cli

    for argv in ([], ["--version"], ["nope"], ["--", "generate"], ["-h"]):
        assert cli.named(argv) is cli.whole_app(), argv
