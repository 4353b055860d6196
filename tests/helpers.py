"""Helpers shared by CLI tests: run llmcli like a shell would, on a fake engine."""

from __future__ import annotations

from typer.testing import CliRunner

from llmcli.cli.app import app


def run(*args: str, input: str | bytes | None = None, env: dict | None = None):
    """Invoke the CLI; returns Click's Result with separate stdout/stderr."""
    return CliRunner().invoke(app, list(args), input=input, env=env, catch_exceptions=False)
