"""Helpers shared by CLI tests: run llmcli like a shell would, on a fake engine."""

from __future__ import annotations

from typer.testing import CliRunner

from llmcli.cli.app import app


def run(*args: str, input: str | bytes | None = None, env: dict | None = None, catch: bool = False):
    """Invoke the CLI; returns Click's Result with separate stdout/stderr. `catch`: an exception
    that escapes the command is kept in `result.exception` (with what was written before it)."""
    return CliRunner().invoke(app, list(args), input=input, env=env, catch_exceptions=catch)


def use_engine(factory):
    """Run this test's commands on `factory` (e.g. `FakeEngine.factory()`): the one object tests
    replace is the environment (conftest restores it after each test)."""
    from dataclasses import replace

    from llmcli import environment

    environment.install(replace(environment.current(), engine_factory=factory))
    return factory


def use_bench_backend(make):
    """Run `llmcli bench` on `make(debug=...)`'s backend."""
    from dataclasses import replace

    from llmcli import environment

    environment.install(replace(environment.current(), bench_backend=make))
    return make


def bench_in(tmp_path, monkeypatch, fake, files=("a.gguf", "b.gguf")):
    """`llmcli bench` on the FakeBackend `fake`, in `tmp_path` holding stand-in model `files`, with
    the first as the default model; returns `fake`."""
    use_bench_backend(lambda debug=False: fake)
    for name in files:
        (tmp_path / name).write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMCLI_MODEL", files[0])
    return fake


def engine_factory():
    from llmcli import environment

    return environment.current().engine_factory
