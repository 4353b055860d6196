"""`llmcli batch`'s progress on stderr: a bar on a terminal (items done of the total, aggregate
tokens/s, time left, items failed), nothing otherwise; and the summary line at the end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llmcli import render
from llmcli.render.progress import enabled_bar


class BatchBar:
    """Advanced once per finished item; does nothing where stderr is not a terminal."""

    def __init__(self, bar: Any | None, total: int) -> None:
        self.bar = bar
        self.task = bar.add_task("batch", total=total, tok_s=0.0, failed=0) if bar is not None else None

    def update(self, done: int, failed: int, tok_s: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done + failed, tok_s=tok_s, failed=failed)


@contextmanager
def progress(total: int) -> Iterator[BatchBar]:
    if not enabled_bar() or total == 0:
        yield BatchBar(None, total)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
    from rich.progress import Progress as RichProgress

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[tok_s]:.1f} tok/s"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[failed]} failed"),
    )
    with RichProgress(*columns, console=render.err_console(), transient=True) as bar:
        yield BatchBar(bar, total)


def summary(*, items: int, failed: int, skipped: int, tokens: int, wall_s: float, parallel: int,
            how: str, prompt_tokens: int = 0, reused: int = 0) -> None:  # fmt: skip
    """The line at the end, on stderr (shown unless --quiet): `prompt_tokens` of the items, `reused`
    of them taken from a shared prefix's cells rather than prefilled."""
    rate = tokens / wall_s if wall_s > 0 else 0.0
    # `items` answered; with failures the count of both, said so that none reads as no item at all
    def count(n: int) -> str:
        return f"{n} item" if n == 1 else f"{n} items"

    parts = [f"{count(items + failed)}: {items} done, {failed} failed"] if failed else [count(items)]
    if skipped:
        parts.append(f"{skipped} already done")
    if prompt_tokens:
        parts.append(f"{prompt_tokens} prompt tokens ({reused} from a shared prefix)")
    parts += [
        f"{tokens} tokens",
        f"{wall_s:.1f} s",
        f"{rate:.1f} tok/s aggregate",
        f"parallel {parallel} ({how})",
    ]
    render.info("batch: " + ", ".join(parts))
