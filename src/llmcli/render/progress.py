"""The lower layers' progress and notices on stderr: a live bar on a terminal, plain lines otherwise.

On a terminal the bar shows bytes done of the total, speed and time left. When stderr is not a
terminal (a log file, CI), a line is written when each file starts and ends, and nothing else.
`--quiet` silences both; warnings always show.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llmcli import render
from llmcli.reporting import Progress, Reporter, Task
from llmcli.units import human_size


class StderrReporter(Reporter):
    def info(self, message: str) -> None:
        render.info(message)

    def warn(self, message: str) -> None:
        render.warn(message)

    def debug(self, message: str) -> None:
        render.debug_log(message)

    @contextmanager
    def progress(self) -> Iterator[Progress]:
        if not enabled_bar():
            yield LineProgress()
            return
        with _rich_bar() as bar:
            yield BarProgress(bar)


class LineProgress(Progress):
    """A line when each file starts and one when it ends."""

    @contextmanager
    def task(self, name: str, total: int, *, done: int = 0, verb: str = "downloading") -> Iterator[Task]:
        task = Task(name, total, done, verb)
        resumed = f", resuming at {human_size(done)}" if done else ""
        render.info(f"{verb} {name} ({human_size(total)}{resumed})")
        yield task
        render.info(_summary(task))


class _BarTask(Task):
    def __init__(self, bar: Any, *args: Any) -> None:
        super().__init__(*args)
        self.bar = bar
        self.task_id = bar.add_task(f"{self.verb} {self.name}", total=self.total, completed=self.done)

    def advance(self, n: int) -> None:
        super().advance(n)
        self.bar.update(self.task_id, completed=self.done)

    def reset(self, done: int = 0) -> None:
        super().reset(done)
        self.bar.reset(self.task_id, completed=done, total=self.total)


class BarProgress(Progress):
    """A Rich bar per file."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    @contextmanager
    def task(self, name: str, total: int, *, done: int = 0, verb: str = "downloading") -> Iterator[Task]:
        yield _BarTask(self.bar, name, total, done, verb)


def _summary(task: Task) -> str:
    elapsed = max(time.monotonic() - task.started, 1e-6)
    moved = task.done - task.start_done
    return f"  {task.name}: {human_size(moved)} in {elapsed:.1f}s ({human_size(moved / elapsed)}/s)"


def enabled_bar() -> bool:
    return not render.quiet() and bool(getattr(sys.stderr, "isatty", lambda: False)())


def _rich_bar():
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import Progress as RichProgress

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    return RichProgress(*columns, console=render.err_console(), transient=False)
