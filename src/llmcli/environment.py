"""What a command runs with, in one object: its streams and whether they are terminals, the output
options (quiet, debug, colour), the resolved-settings cache, the engine factory, bench's backend
factory and the hub's progress reporter.

The root callback derives the invocation's environment once from the global flags
(`configure`); the output layer, the loader, bench and the hub read it (`current`) instead of
module globals of their own. Tests replace this one object (`install`, or the conftest fixtures),
not a handful of globals one by one. hatch's `Application` and httpie's `Environment` are the
models.

Light on purpose: `--help` and shell completion import it, so nothing heavy is imported here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from llmcli.bench.runner import Backend
    from llmcli.contract import Engine, EngineOptions
    from llmcli.hub.progress import Reporter


def llama_engine(path: Path, options: EngineOptions, debug: bool) -> Engine:
    """The real engine factory: llama.cpp through llama-cpp-python."""
    from llmcli.engine.llama import LlamaEngine

    return LlamaEngine(path, options, debug=debug)


def llama_bench_backend(debug: bool = False) -> Backend:
    """The real bench backend: llama.cpp through the engine's measuring surface."""
    from llmcli.bench.llama_backend import LlamaBackend

    return LlamaBackend(debug=debug)


def _reporter() -> Reporter:
    from llmcli.hub.progress import Reporter

    return Reporter()  # says nothing: the root callback installs the one that draws on stderr


@dataclass
class Environment:
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    quiet: bool = False
    debug: bool = False
    color: bool | None = None  # None: auto (a terminal, unless NO_COLOR; FORCE_COLOR forces it)
    engine_factory: Callable[[Path, EngineOptions, bool], Engine] = llama_engine
    # Check a model's header, template and memory fit before loading it; None: for the real engine
    # only (a test's fake engine loads stand-in files; a test sets True to put it behind the checks).
    check_model_files: bool | None = None
    bench_backend: Callable[..., Backend] = llama_bench_backend
    reporter: Reporter = field(default_factory=_reporter)
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
        return self.engine_factory is llama_engine


def _isatty(stream: Any) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


_current = Environment()


def current() -> Environment:
    return _current


def install(env: Environment) -> Environment:
    """Make `env` the current environment (the root callback; tests)."""
    global _current
    _current = env
    return env


def configure(**changes: Any) -> Environment:
    """The invocation's environment: the current one with the global flags and this invocation's
    streams applied, keeping what was installed before (a test's engine factory, say)."""
    streams = {"stdin": sys.stdin, "stdout": sys.stdout, "stderr": sys.stderr}
    return install(replace(_current, **{**streams, **changes}))
