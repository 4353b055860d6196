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
    def task(self, name: str, total: int, *, done: int = 0, verb: str = "downloading",
             unit: str = "bytes") -> Iterator[Task]:  # fmt: skip
        task = Task(name, total, done, verb, unit)
        resumed = f", resuming at {_amount(done, unit)}" if done else ""
        render.info(f"{verb} {name} ({_amount(total, unit)}{resumed})")
        yield task
        render.info(_summary(task))


class _BarTask(Task):
    def __init__(self, bar: Any, *args: Any) -> None:
        super().__init__(*args)
        self.bar = bar
        self.task_id = bar.add_task(f"{self.verb} {self.name}", total=self.total, completed=self.done,
                                    unit=self.unit)  # fmt: skip

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
    def task(self, name: str, total: int, *, done: int = 0, verb: str = "downloading",
             unit: str = "bytes") -> Iterator[Task]:  # fmt: skip
        yield _BarTask(self.bar, name, total, done, verb, unit)


def _amount(n: float, unit: str) -> str:
    """Bytes as a size (1.2 MB), anything else counted (3,258 texts)."""
    return human_size(n) if unit == "bytes" else f"{int(n):,} {unit}"


def _summary(task: Task) -> str:
    elapsed = max(time.monotonic() - task.started, 1e-6)
    moved = task.done - task.start_done
    if task.unit != "bytes":
        return f"  {task.name}: {moved:,} {task.unit} in {elapsed:.1f}s ({moved / elapsed:.1f} {task.unit}/s)"
    return f"  {task.name}: {human_size(moved)} in {elapsed:.1f}s ({human_size(moved / elapsed)}/s)"


def enabled_bar() -> bool:
    return not render.quiet() and bool(getattr(sys.stderr, "isatty", lambda: False)())


def _rich_bar():
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        ProgressColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import Progress as RichProgress
    from rich.text import Text

    class ByUnit(ProgressColumn):
        """Bytes as Rich draws a download; a count as done/total and its rate."""

        def __init__(self, bytes_column: ProgressColumn, counted: str) -> None:
            super().__init__()
            self.bytes_column, self.counted = bytes_column, counted

        def render(self, task):
            unit = task.fields.get("unit", "bytes")
            if unit == "bytes":
                return self.bytes_column.render(task)
            return Text(self.counted.format(done=int(task.completed), total=int(task.total or 0), unit=unit,
                                            speed=task.speed or 0.0), style="progress.download")  # fmt: skip

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        ByUnit(DownloadColumn(), "{done:,}/{total:,} {unit}"),
        ByUnit(TransferSpeedColumn(), "{speed:.1f} {unit}/s"),
        TimeRemainingColumn(),
    )
    return RichProgress(*columns, console=render.err_console(), transient=False)
