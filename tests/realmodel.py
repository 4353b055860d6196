"""Helpers for tests on the real models, run through the installed CLI in a subprocess.

Gemma 3 270M (the larger, harder, base model) is what `llmcli` runs here unless a test names
another model: `LLMCLI_MODEL=gemma3-270m` is set for every call. `default_model_env()` gives the
environment of a fresh install instead, where the default (SmolLM2-135M-Instruct) runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

GEMMA = "gemma3-270m"


def default_model_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LLMCLI_MODEL", None)
    return env


def llmcli(
    *args: str,
    input: str | bytes | None = None,
    timeout: float = 600,
    check: bool = False,
    env: dict[str, str] | None = None,
):
    """Run `python -m llmcli ARGS` with the test's isolated environment (Gemma unless `env` says
    otherwise); text mode unless bytes given."""
    text = not isinstance(input, bytes)
    if env is None:
        env = dict(os.environ)
        env.setdefault("LLMCLI_MODEL", GEMMA)
    result = subprocess.run(
        [sys.executable, "-m", "llmcli", *args],
        input=input,
        capture_output=True,
        text=text,
        timeout=timeout,
        env=env,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"llmcli {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result


def generate_json(*args: str, no_answer_ok: bool = False, **kwargs) -> dict:
    """`generate --json`'s record, checked against its schema; `no_answer_ok`: a run whose model gave
    no answer (exit 8, finish_reason no_answer) is a record too, not a failure."""
    from records import validate

    result = llmcli("generate", *args, "--json", check=not no_answer_ok, **kwargs)
    if no_answer_ok:
        assert result.returncode in (0, 8), result.stderr
    record = validate(json.loads(result.stdout))
    assert (record["finish_reason"] == "no_answer") == (result.returncode == 8)
    return record
