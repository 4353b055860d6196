"""Model text streamed to a pipe or file: the pieces as they come, a newline at the end.

The terminal counterpart, with a live status line, is `llmcli.repl.readout.LiveReadout`.
Model text is written as is, never through Rich.
"""

from __future__ import annotations

import sys
from typing import TextIO

from llmcli.contract import Event, Token


class PlainSink:
    """For pipes: the answer's text to stdout as it comes, a newline at the end."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.last = ""

    def start(self) -> None:
        pass

    def __call__(self, event: Event) -> None:
        if isinstance(event, Token) and event.text:
            self.out.write(event.text)
            self.out.flush()
            self.last = event.text

    def stop(self) -> None:
        if not self.last.endswith("\n"):
            self.out.write("\n")
        self.out.flush()
        self.last = ""
