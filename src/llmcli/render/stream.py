"""Model text streamed to a pipe or file: the pieces as they come, a newline at the end (none
when there was no text).

The terminal counterpart, with a live status line, is `llmcli.repl.readout.LiveReadout`.
Model text is written as is, never through Rich.
"""

from __future__ import annotations

import sys
from typing import TextIO

from llmcli.contract import Event, Reasoning, Token

DIM, PLAIN = "\x1b[2m", "\x1b[0m"


class PlainSink:
    """For pipes: the answer's text to stdout as it comes, a newline at the end. A reasoning
    model's reasoning goes to `thoughts` (stderr; None: nowhere), dimmed where `dim`, and ends
    with a newline there when the answer begins."""

    def __init__(self, out: TextIO | None = None, thoughts: TextIO | None = None, dim: bool = False) -> None:
        self.out = out or sys.stdout
        self.thoughts, self.dim = thoughts, dim
        self.last = ""
        self.thought = False  # some reasoning was written
        self.thinking = False  # and its last line is not ended yet

    def start(self) -> None:
        pass

    def __call__(self, event: Event) -> None:
        if isinstance(event, Token) and event.text:
            self._end_thoughts()
            self.out.write(event.text)
            self.out.flush()
            self.last = event.text
        elif isinstance(event, Reasoning) and self.thoughts is not None and event.text:
            text = event.text if self.thought else event.text.lstrip()  # its first line starts it
            if text:
                self.thoughts.write(f"{DIM}{text}{PLAIN}" if self.dim else text)
                self.thoughts.flush()
                self.thought, self.thinking = True, not text.endswith("\n")

    def _end_thoughts(self) -> None:
        if self.thinking and self.thoughts is not None:
            self.thoughts.write("\n")
            self.thoughts.flush()
        self.thinking = False

    def stop(self) -> None:
        """The answer's last line ended; no answer leaves stdout empty (a script can tell)."""
        self._end_thoughts()
        if self.last and not self.last.endswith("\n"):
            self.out.write("\n")
        self.out.flush()
        self.last = ""
