"""What a command runs with, in one object: its streams and whether they are terminals, the output
options (quiet, debug, colour), the resolved-settings cache, the engine factory, bench's backend
factory and the reporter the lower layers report through.

The root callback derives the invocation's environment once from the global flags
(`configure`). Only the command line, the REPL and the output layer read it
(`current`); the layers below are given what they need: the loader its engine factory as an
argument, settings its cache and the hub, loader, KV store and served engine their reporter,
pushed down when an environment is installed (`install`). Tests replace this one object
(`install`, or the conftest fixtures), not a handful of globals one by one. hatch's
`Application` and httpie's `Environment` are the models.

It names no engine and no bench backend: None stands for llama.cpp's, which the loader and bench
build (`loader.llama_engine`, `bench.llama_backend`) where a test installed none of its own.
Light on purpose: `--help` and shell completion import it, so nothing heavy is imported here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from llmcli.reporting import Reporter

if TYPE_CHECKING:
    from llmcli.contract import Engine, EngineOptions


@dataclass
class Environment:
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    quiet: bool = False
    debug: bool = False
    color: bool | None = None  # None: auto (a terminal, unless NO_COLOR; FORCE_COLOR forces it)
    # None: llama.cpp's (`loader.llama_engine`); a test installs a fake engine's
    engine_factory: Callable[[Path, EngineOptions, bool], Engine] | None = None
    # Check a model's header, template and memory fit before loading it; None: for the real engine
    # only (a test's fake engine loads stand-in files; a test sets True to put it behind the checks).
    check_model_files: bool | None = None
    # bench's backend (a bench.runner.Backend) for debug=...; None: llama.cpp's (bench.llama_backend)
    bench_backend: Callable[..., Any] | None = None
    reporter: Reporter = field(default_factory=Reporter)  # drops all: the root callback installs one
    settings_cache: dict[str, Any] = field(default_factory=dict)  # the parsed config file, once

    @property
    def interactive(self) -> bool:
        """A person at a terminal on both ends (chat's prompt and live readout)."""
        return _isatty(self.stdin) and _isatty(self.stdout)

    @property
    def stdin_piped(self) -> bool:
        return not _isatty(self.stdin)

    @property
    def checks_model_files(self) -> bool:
        if self.check_model_files is not None:
            return self.check_model_files
        return self.engine_factory is None  # the real engine


def _isatty(stream: Any) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def current() -> Environment:
    return _current


def install(env: Environment) -> Environment:
    """Make `env` the current environment (the root callback; tests), and give the layers below
    their part of it: settings its cache, the lower layers their reporter."""
    global _current
    from llmcli import reporting, settings

    _current = env
    settings.use_cache(env.settings_cache)
    reporting.install(env.reporter)
    return env


_current = install(Environment())


def configure(**changes: Any) -> Environment:
    """The invocation's environment: the current one with the global flags and this invocation's
    streams applied, keeping what was installed before (a test's engine factory, say)."""
    streams = {"stdin": sys.stdin, "stdout": sys.stdout, "stderr": sys.stderr}
    return install(replace(_current, **{**streams, **changes}))
