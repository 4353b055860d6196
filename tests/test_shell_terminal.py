"""Terminal manners: colour (--color/--no-color, NO_COLOR, FORCE_COLOR, a terminal or not), -q, --debug."""

from __future__ import annotations

import io

import pytest
from helpers import run

from llmcli import render


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture(autouse=True)
def plain_state():
    render.configure()
    yield
    render.configure()


@pytest.mark.parametrize(
    ("flag", "env", "tty", "expected"),
    [
        (None, {}, True, True),  # auto: a terminal gets colour
        (None, {}, False, False),  # auto: a pipe or file does not
        (None, {"NO_COLOR": "1"}, True, False),
        (None, {"NO_COLOR": ""}, True, True),  # set but empty: ignored, as no-color.org says
        (None, {"FORCE_COLOR": "1"}, False, True),
        (None, {"FORCE_COLOR": ""}, False, False),
        (None, {"NO_COLOR": "1", "FORCE_COLOR": "1"}, True, False),
        (True, {"NO_COLOR": "1"}, False, True),  # --color beats everything
        (False, {"FORCE_COLOR": "1"}, True, False),  # --no-color too
    ],
)
def test_color_decision(monkeypatch, flag, env, tty, expected):
    monkeypatch.delenv("NO_COLOR", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    render.configure(color=flag)
    assert render.color_enabled(Stream(tty)) is expected


def test_color_flags_reach_render():
    run("--no-color", "config", "path")
    assert render.color_enabled(Stream(True)) is False
    run("--color", "config", "path")
    assert render.color_enabled(Stream(False)) is True


def test_rich_console_follows_the_decision(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    render.configure(color=True)
    assert render.err_console().no_color is False
    render.configure(color=False)
    assert render.err_console().no_color is True


def test_stdout_never_carries_colour(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    result = run("--color", "config", "show")
    assert "\x1b[" not in result.stdout


def test_quiet_silences_information_but_not_results_or_errors():
    loud = run("config", "set", "top_k", "20")
    assert loud.stderr == f"top_k = 20 in {_config()}\n"
    quiet = run("-q", "config", "set", "top_k", "30")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert run("-q", "config", "path").stdout == f"{_config()}\n"
    failed = run("-q", "config", "set", "top_k", "x")
    assert failed.exit_code == 2 and failed.stderr.startswith("llmcli: configuration error:")


def test_debug_adds_the_traceback():
    _config().write_text("top_k = 'x'\n")
    plain = run("config", "show")
    assert plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr
    debug = run("--debug", "config", "show")
    assert debug.exit_code == 2
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.rstrip().endswith(plain.stderr.rstrip())


def test_debug_from_the_environment(monkeypatch):
    _config().write_text("top_k = 'x'\n")
    monkeypatch.setenv("LLMCLI_DEBUG", "1")
    assert "Traceback" in run("config", "show").stderr


def _config():
    import os
    from pathlib import Path

    return Path(os.environ["LLMCLI_CONFIG"])
