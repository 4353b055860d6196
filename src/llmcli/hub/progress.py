"""How the hub reports what it is doing: progress of each file, and notices, through a `Reporter`.

The hub never writes to the terminal itself. It calls `task()` for each file it transfers or
hashes, and `info()` / `warn()` for notices (a retry, a resumed download, an unverifiable file);
the command line installs a reporter that renders them on stderr (`llmcli.render.progress`).
Until one is installed, nothing is shown.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Task:
    """One file being transferred or hashed; a renderer's subclass draws it as it moves."""

    def __init__(self, name: str, total: int, done: int, verb: str) -> None:
        self.name, self.total, self.done, self.verb = name, total, done, verb
        self.started = time.monotonic()
        self.start_done = done

    def advance(self, n: int) -> None:
        self.done += n

    def reset(self, done: int = 0) -> None:
        self.done = self.start_done = done


class Progress:
    """The tasks of one pull, verify or check; this base one reports nothing."""

    @contextmanager
    def task(self, name: str, total: int, *, done: int = 0, verb: str = "downloading") -> Iterator[Task]:
        yield Task(name, total, done, verb)


class Reporter:
    """Where the hub's progress and notices go; this base one drops them."""

    def info(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass

    @contextmanager
    def progress(self) -> Iterator[Progress]:
        yield Progress()


def _reporter() -> Reporter:
    from llmcli import environment

    return environment.current().reporter  # the command line installs one that draws on stderr


def info(message: str) -> None:
    _reporter().info(message)


def warn(message: str) -> None:
    _reporter().warn(message)


def progress():
    """A Progress for the duration of a pull, verify or check."""
    return _reporter().progress()
