"""Download and hashing progress on stderr: a live bar on a terminal, plain lines otherwise.

On a terminal the bar shows bytes done of the total, speed and time left. When stderr is not a
terminal (a log file, CI), a line is written when each file starts and ends, and nothing else.
`--quiet` silences both.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any

from llmcli import render


def human_size(n: float | None) -> str:
    """Decimal units, as the hub and most download tools show them: 4.9 GB, 352 B."""
    if n is None:
        return "?"
    units = ("B", "kB", "MB", "GB", "TB")
    value, i = float(n), 0
    while abs(value) >= 1000 and i < len(units) - 1:
        value, i = value / 1000, i + 1
    if i == 0:
        return f"{int(value)} B"
    return f"{value:.1f} {units[i]}" if value < 100 else f"{value:.0f} {units[i]}"


class Task:
    """One file being transferred or hashed."""

    def __init__(self, owner: Progress, name: str, total: int, done: int, verb: str) -> None:
        self.owner, self.name, self.total, self.done, self.verb = owner, name, total, done, verb
        self.started = time.monotonic()
        self.start_done = done
        self.task_id: Any = None

    def advance(self, n: int) -> None:
        self.done += n
        if self.owner.bar is not None and self.task_id is not None:
            self.owner.bar.update(self.task_id, completed=self.done)

    def reset(self, done: int = 0) -> None:
        self.done = self.start_done = done
        if self.owner.bar is not None and self.task_id is not None:
            self.owner.bar.reset(self.task_id, completed=done, total=self.total)


class Progress:
    """Tasks shown as a Rich bar on a TTY, or as start/end lines when stderr is not one."""

    def __init__(self, bar: Any = None) -> None:
        self.bar = bar

    @contextmanager
    def task(self, name: str, total: int, *, done: int = 0, verb: str = "downloading"):
        task = Task(self, name, total, done, verb)
        if self.bar is not None:
            task.task_id = self.bar.add_task(f"{verb} {name}", total=total, completed=done)
        else:
            resumed = f", resuming at {human_size(done)}" if done else ""
            render.info(f"{verb} {name} ({human_size(total)}{resumed})")
        yield task
        if self.bar is None:
            render.info(_summary(task))


def _summary(task: Task) -> str:
    elapsed = max(time.monotonic() - task.started, 1e-6)
    moved = task.done - task.start_done
    return f"  {task.name}: {human_size(moved)} in {elapsed:.1f}s ({human_size(moved / elapsed)}/s)"


def enabled_bar() -> bool:
    return not render.quiet() and bool(getattr(sys.stderr, "isatty", lambda: False)())


@contextmanager
def progress():
    """A Progress for the duration of a pull; the live bar exists only on a terminal."""
    if not enabled_bar():
        yield Progress()
        return
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
    with RichProgress(*columns, console=render.err_console(), transient=False) as bar:
        yield Progress(bar)
