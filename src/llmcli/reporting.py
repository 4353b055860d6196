"""How the layers below the output layer say what they are doing: notices, warnings, debug lines
and the progress of each file, through a `Reporter`.

Nothing below `render` writes to the terminal itself. The hub calls `task()` for each file it
transfers or hashes; the hub, the loader, the KV store and the served engine call `info()`,
`warn()` and `debug()` for what they have to say (a retry, a resumed download, a state that could
not be used). What becomes of it is the installed reporter's business: the command line installs
one that renders on stderr (`llmcli.render.progress`), passed down through the environment
(`environment.install`). Until one is installed, nothing is shown.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Task:
    """One file being transferred or hashed (`unit` "bytes"), or a count of things being worked
    through (`unit` names them: "texts"); a renderer's subclass draws it as it moves."""

    def __init__(self, name: str, total: int, done: int, verb: str, unit: str = "bytes") -> None:
        self.name, self.total, self.done, self.verb, self.unit = name, total, done, verb, unit
        self.started = time.monotonic()
        self.start_done = done

    def advance(self, n: int) -> None:
        self.done += n

    def reset(self, done: int = 0) -> None:
        self.done = self.start_done = done


class Progress:
    """The tasks of one pull, verify or check; this base one reports nothing."""

    @contextmanager
    def task(self, name: str, total: int, *, done: int = 0, verb: str = "downloading",
             unit: str = "bytes") -> Iterator[Task]:  # fmt: skip
        yield Task(name, total, done, verb, unit)


class Reporter:
    """Where notices, warnings, debug lines and progress go; this base one drops them."""

    def info(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass

    def debug(self, message: str) -> None:
        pass

    @contextmanager
    def progress(self) -> Iterator[Progress]:
        yield Progress()


_installed = Reporter()


def install(reporter: Reporter) -> None:
    """Send what the lower layers report to `reporter` (the environment does, when installed)."""
    global _installed
    _installed = reporter


def info(message: str) -> None:
    _installed.info(message)


def warn(message: str) -> None:
    """A warning: shown even with --quiet."""
    _installed.warn(message)


def debug(message: str) -> None:
    """A line shown only with --debug."""
    _installed.debug(message)


def progress():
    """A Progress for the duration of a pull, verify or check."""
    return _installed.progress()
