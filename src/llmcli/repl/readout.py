"""The live readout: streamed text on the terminal with a status line kept just below it.

While the prompt is prefilled the status line shows tokens done of total and the speed; while
decoding, the running decode speed, tokens so far and elapsed time. A timer thread redraws it
several times a second, so it moves even inside a long prefill batch.

How the text stays intact: the status line always lives on the row below the text cursor.
After text is written, we move down one row (a newline, which scrolls when at the bottom),
draw the status, move back up and restore the column. Before writing text that contains a
newline, the status row is erased first, so text never mixes with it. Model text is written
as is, never through Rich.

A reasoning model's reasoning streams dimmed as it comes (or not at all with `show_thinking`
off), and folds to one line when the answer starts: "thought for N tokens (X s) · /think show".
The rows it took are erased by moving up and clearing to the end of the screen; a reasoning taller
than the screen has rows in the scrollback, which no terminal can erase: they stay, and the folded
line follows them.

`llmcli.render.stream.PlainSink` is the non-terminal counterpart: text to stdout, nothing else.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from llmcli.contract import Done, Event, PrefillProgress, Reasoning, Token

REFRESH_S = 0.2


def _advance(col: int, text: str, cols: int) -> tuple[int, bool]:
    """The cursor's column after `text` (no newline) is written from `col`, as a terminal with
    automatic margins moves it, and whether the text reached the right edge. `cols` is a pending
    wrap: the last column was written, and the next character goes to the next row. A double-width
    character that does not fit in what is left of a row goes to the next one whole."""
    from wcwidth import wcwidth

    edge = False
    for ch in text:
        if ch == "\t":  # to the next tab stop, never past the last column (a tab does not wrap)
            col = col if col >= cols else min(cols - 1, (col // 8 + 1) * 8)
            continue
        w = wcwidth(ch)
        if w <= 0:
            continue  # combining marks and other controls take no column
        if col >= cols or col + w > cols:
            col, edge = 0, True
        col += w
        edge = edge or col >= cols
    return col, edge


def _rows(col: int, text: str, cols: int) -> tuple[int, int]:
    """The cursor's column after `text` (newlines included) is written from `col`, and how many rows
    down it moved: a newline's, and an automatic margin's wraps (as `_advance` moves it)."""
    from wcwidth import wcwidth

    rows = 0
    for ch in text:
        if ch in "\r\n":  # the readout writes both as a new line (a terminal in cooked mode maps NL)
            col, rows = 0, rows + 1
            continue
        if ch == "\t":
            col = col if col >= cols else min(cols - 1, (col // 8 + 1) * 8)
            continue
        w = wcwidth(ch)
        if w <= 0:
            continue
        if col >= cols or col + w > cols:
            col, rows = 0, rows + 1
        col += w
    return col, rows


def folded_line(tokens: int, seconds: float | None, *, interrupted: bool = False) -> str:
    """What the reasoning folds to: "thought for 212 tokens (4.1 s) · /think show"."""
    took = f"{seconds:.1f} s" if seconds is not None else ""
    if interrupted:
        took = f"{took}, interrupted" if took else "interrupted"
    plural = "" if tokens == 1 else "s"
    return f"thought for {tokens} token{plural}" + (f" ({took})" if took else "") + FOLD_HINT


FOLD_HINT = " · /think show"


class LiveReadout:
    """An event sink for a terminal: streams text to `out` and keeps a status line under it."""

    def __init__(
        self,
        out: TextIO | None = None,
        *,
        columns: int | None = None,
        dim: bool = True,
        show_thinking: bool = True,
        lines: int | None = None,
    ) -> None:
        self.out = out or sys.stdout
        self.columns = columns
        self.lines = lines  # the screen's rows (None: the terminal's)
        self.dim = dim
        self.show_thinking = show_thinking  # stream the reasoning (else only its folded line)
        self.thinking_rows = 0  # rows the shown reasoning took, from its first
        self.think_started: float | None = None
        self.thinking_open = False  # reasoning came and has not been folded yet
        self.thought_text = False  # and some of it was not whitespace (an empty block folds to nothing)
        self.lock = threading.Lock()
        self.col = 0  # display column of the text cursor
        self.phase = "prefill"
        self.thought = 0  # tokens a reasoning model spent thinking, while it does
        self.prefill_done = 0
        self.prefill_total = 0
        self.tokens = 0
        self.spec: tuple[int, int, int] | None = None  # drafted, accepted, target passes
        self.started = time.perf_counter()
        self.decode_started: float | None = None
        self.prefill_elapsed = 0.0
        # images: the positions of the one being encoded now (0: none) and since when, and the
        # image tokens and encode seconds of the prompt so far
        self.encoding, self.encode_started = 0, 0.0
        self.image_tokens, self.image_s = 0, 0.0
        self.status_drawn = False
        self.paused = False  # a question is asked below the text (a tool call's approval): no status
        self.tool: tuple[str, float] | None = None  # the tool call running, and when it began
        self.tool_ms = 0.0  # the answer's tool calls so far, apart from the model's prefill and decode
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.started = time.perf_counter()
        self._draw()
        self._timer = threading.Thread(target=self._tick, name="llmcli-readout", daemon=True)
        self._timer.start()

    def stop(self) -> None:
        self._stop.set()
        if self._timer:
            self._timer.join()
        with self.lock:
            self._erase_status()
            if self.col:
                self.out.write("\n")
                self.col = 0
            self.out.flush()

    # -- tool calls: the model waits, the readout says on what ------------------------------

    def pause(self) -> None:
        """Take the status line away and end the text's line: something else is written below."""
        with self.lock:
            self.paused = True
            self._erase_status()
            if self.col:
                self.out.write("\n")
                self.col = 0
            self.out.flush()

    def resume(self) -> None:
        with self.lock:
            self.paused = False
            self._draw_locked()

    def note(self, line: str, stream: TextIO) -> None:
        """A line of llmcli's own (a tool call and its result) on `stream`, below the text so far."""
        self.pause()
        stream.write(line + "\n")
        stream.flush()
        self.resume()

    def tool_started(self, name: str) -> None:
        self.tool = (name, time.perf_counter())
        self._draw()

    def tool_finished(self, ms: float | None) -> None:
        """A call ended (`ms`: how long it ran, None: it did not run); the next round begins with
        the prefill of its results."""
        self.tool = None
        self.tool_ms += ms or 0.0
        self.phase, self.prefill_done, self.prefill_total, self.prefill_elapsed = "prefill", 0, 0, 0.0
        self.started, self.decode_started, self.tokens, self.spec = time.perf_counter(), None, 0, None

    def _tick(self) -> None:
        while not self._stop.wait(REFRESH_S):
            self._draw()

    # -- events ------------------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        if isinstance(event, PrefillProgress):
            self.prefill_done, self.prefill_total = event.done, event.total
            self.prefill_elapsed = time.perf_counter() - self.started
            if event.encoding and not self.encoding:
                self.encode_started = time.perf_counter()
            self.encoding = event.encoding
            self.image_tokens, self.image_s = event.image_tokens, event.image_ms / 1000
        elif isinstance(event, Token):
            if self.decode_started is None:
                self.decode_started = time.perf_counter()
            if event.text and self.thinking_open:
                self._fold()
            self.phase = "decode"
            self.tokens = event.n_tokens
            if event.passes:
                self.spec = (event.drafted, event.accepted, event.passes)
            if event.text:
                self._write(event.text)
        elif isinstance(event, Reasoning):  # a reasoning model thinks: shown apart, then folded
            now = time.perf_counter()
            if self.decode_started is None:
                self.decode_started = now
            if self.think_started is None:
                self.think_started = now
            self.phase, self.thought = "thinking", event.n_tokens
            self.thinking_open = True
            self.thought_text = self.thought_text or bool(event.text.strip())
            if self.show_thinking and event.text:
                self._write_thought(event.text)
        elif isinstance(event, Done):
            if self.thinking_open:  # the text ended inside the reasoning, or with no answer after it
                self._fold(interrupted=event.finish_reason == "interrupted")
            self.phase = "done"

    # -- drawing -----------------------------------------------------------------------------

    def status_text(self) -> str:
        now = time.perf_counter()
        if self.tool is not None:
            name, began = self.tool
            return f"tool {name} · {now - began:.1f} s" + self._tools_part(now - began)
        return self._model_status(now) + self._tools_part(0.0)

    def _tools_part(self, running_s: float) -> str:
        """The answer's time in tool calls so far, where there is some: apart from the model's."""
        total = self.tool_ms / 1000 + running_s
        return f" · tools {total:.1f} s" if self.tool_ms else ""

    def _model_status(self, now: float) -> str:
        if self.phase == "prefill" and not self.prefill_total:  # a served model: no progress to show
            return f"waiting for the first token · {now - self.started:.1f} s"
        if self.phase == "prefill" and self.encoding:  # the third phase: an image through the projector
            seconds = self.image_s + now - self.encode_started
            return f"image {seconds:.2f} s · {self.image_tokens + self.encoding} tok"
        if self.phase == "prefill":
            elapsed = now - self.started
            rate = self.prefill_done / self.prefill_elapsed if self.prefill_elapsed > 0 else 0.0
            image = f" · image {self.image_s:.2f} s · {self.image_tokens} tok" if self.image_tokens else ""
            return (
                f"prefill {self.prefill_done}/{self.prefill_total} tok · {rate:.0f} tok/s · {elapsed:.1f} s"
                + image
            )
        start = self.decode_started or now
        elapsed = now - start
        if self.phase == "thinking":
            return f"thinking · {self.thought} tok · {elapsed:.1f} s"
        rate = (self.tokens - 1) / elapsed if elapsed > 0 and self.tokens > 1 else 0.0
        line = f"decode {rate:.1f} tok/s · {self.tokens} tok · {elapsed:.1f} s"
        if self.spec is not None:
            from llmcli.render.stats import speculation_part

            drafted, accepted, passes = self.spec
            # the first token came with the prompt's pass: per pass are the tokens after it
            line += " · " + speculation_part(drafted, accepted, max(0, self.tokens - 1), passes)
        return line

    def _cols(self) -> int:
        if self.columns:
            return self.columns
        import shutil

        return shutil.get_terminal_size((80, 24)).columns

    def _write(self, text: str) -> None:
        """Write model text. `col` is the cursor's display column, `cols` when the text ends on the
        last column: the terminal then holds the cursor there until the next character wraps it
        (a "pending wrap", which any cursor movement would cancel), so no status is drawn until
        more text comes. Text that reaches the right edge, or holds a newline, erases the status
        row first: the text goes on into that row."""
        with self.lock:
            cols = self._cols()
            lines = text.replace("\r", "\n").split("\n")
            if len(lines) > 1:  # after the last newline the cursor starts at column 0
                end, edge = _advance(0, lines[-1], cols)[0], True
            else:
                end, edge = _advance(self.col, text, cols)
            if edge:
                self._erase_status()
            self.out.write(text)
            self.col = end
            if not self.status_drawn:  # erased: put it back; otherwise the timer redraws
                self._draw_locked()
            else:
                self.out.flush()

    def _write_thought(self, text: str) -> None:
        """Reasoning text, dimmed, on its own rows (its first starts it: leading blank lines go)."""
        if not self.thinking_rows and self.col == 0:
            text = text.lstrip()
            if not text:
                return
        with self.lock:
            cols = self._cols()
            _, edge = _advance(self.col, text.replace("\r", "\n").split("\n")[-1], cols)
            if "\n" in text or "\r" in text or edge:
                self._erase_status()
            end, rows = _rows(self.col, text, cols)
            self.out.write(f"\x1b[2m{text}\x1b[22m" if self.dim else text)
            self.thinking_rows += rows
            self.col = end
            if not self.status_drawn:
                self._draw_locked()
            else:
                self.out.flush()

    def _fold(self, *, interrupted: bool = False) -> None:
        """The reasoning, ended: its rows erased where they are all still on the screen, and one
        line in their place."""
        import shutil

        self.thinking_open = False
        if not self.thought_text:  # an empty block (thinking off, or nothing to think): nothing to fold
            return
        self.thought_text = False
        seconds = time.perf_counter() - self.think_started if self.think_started is not None else None
        line = folded_line(self.thought, seconds, interrupted=interrupted)
        with self.lock:
            self._erase_status()
            screen = self.lines or shutil.get_terminal_size((80, 24)).lines
            shown = self.show_thinking and (self.thinking_rows or self.col)
            if shown and self.thinking_rows < screen - 1:  # all on the screen: up to the first, clear
                up = f"\x1b[{self.thinking_rows}A" if self.thinking_rows else ""
                self.out.write(f"{up}\r\x1b[J")
            elif self.col:  # taller than the screen (or nothing shown): the line goes below
                self.out.write("\n")
            width = max(1, self._cols() - 1)
            if len(line) > width:  # a narrow terminal: the hint goes first
                line = line.removesuffix(FOLD_HINT)
            line = line[:width]
            self.out.write((f"\x1b[2m{line}\x1b[22m" if self.dim else line) + "\n")
            self.col = 0
            self.thinking_rows = 0
            self.out.flush()

    def _draw(self) -> None:
        with self.lock:
            self._draw_locked()

    def _draw_locked(self) -> None:
        if (self._stop.is_set() and self.phase == "done") or self.paused:
            return
        cols = self._cols()
        if self.col >= cols:  # a pending wrap: moving the cursor would lose it
            return
        status = self.status_text()[: max(1, cols - 1)]
        if self.dim:
            status = f"\x1b[2m{status}\x1b[0m"
        # down a row (scrolling if needed), draw, back up, restore the column
        self.out.write(f"\n\r\x1b[2K{status}\x1b[1A\x1b[{self.col + 1}G")
        self.out.flush()
        self.status_drawn = True

    def _erase_status(self) -> None:
        if self.status_drawn:
            self.out.write(f"\x1b[1B\r\x1b[2K\x1b[1A\x1b[{self.col + 1}G")
            self.status_drawn = False
