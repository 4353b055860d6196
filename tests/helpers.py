"""Helpers shared by CLI tests: run llmcli like a shell would, on a fake engine."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from llmcli import loader
from llmcli.cli.app import app
from llmcli.engine.fake import FakeEngine


def run(*args: str, input: str | bytes | None = None, env: dict | None = None):
    """Invoke the CLI; returns Click's Result with separate stdout/stderr."""
    return CliRunner().invoke(app, list(args), input=input, env=env, catch_exceptions=False)


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Route model loading to FakeEngine; returns the factory (`.made` lists engines built)."""
    factory = FakeEngine.factory()
    monkeypatch.setattr(loader, "engine_factory", factory)
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("LLMCLI_MODEL", str(model))
    return factory
