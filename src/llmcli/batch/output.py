"""Where a batch's lines go: stdout, or `-o FILE` appended durably (each line flushed and fsynced
as its item finishes; what is already there is read by batch/identity.py's `Written`); and the
order they go in (the input's, holding finished items back until those before them are written,
or as they end)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from llmcli import render
from llmcli.render.documents import stamped

Line = dict[str, Any] | str | None  # a JSON line's document, an answer's text (--text), or nothing


def schema_of(line: dict[str, Any]) -> str:
    """The published schema of an output line: llmcli's, or OpenAI's batch output line."""
    return "batch/openai_line" if "custom_id" in line else "batch/line"


class Sink:
    """Writes finished lines to stdout or a file, durably, in input order unless `unordered`."""

    def __init__(self, path: Path | None, *, overwrite: bool, unordered: bool) -> None:
        self.path = path
        self.unordered = unordered
        self._held: dict[int, Line] = {}
        self._next = 0
        self.written = 0  # lines written in this run
        self._file: IO[bytes] | None = None
        if path is not None:
            if overwrite or not path.exists():
                self._file = open(path, "wb")  # noqa: SIM115
            else:
                self._truncate_partial(path)
                self._file = open(path, "ab")  # noqa: SIM115

    @staticmethod
    def _truncate_partial(path: Path) -> None:
        """Drop a last line a kill cut short, so the next line starts on a line of its own."""
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)

    def skip(self, order: int) -> None:
        """The item at `order` is not written this run (done before, or a bad line skipped)."""
        self.put(order, None)

    def put(self, order: int, line: Line) -> None:
        if self.unordered:
            if line is not None:
                self._write(line)
            return
        self._held[order] = line
        while self._next in self._held:
            held = self._held.pop(self._next)
            if held is not None:
                self._write(held)
            self._next += 1

    def _write(self, line: dict[str, Any] | str) -> None:
        self.written += 1
        if isinstance(line, str):
            render.out_text(line if line.endswith("\n") else line + "\n")
            return
        if self._file is None:
            if "custom_id" in line:
                render.out_json(line, schema="batch/openai_line", line=True)
            else:
                render.out_json(line, schema="batch/line", line=True)
            return
        text = json.dumps(stamped(line, schema_of(line)), ensure_ascii=False)
        self._file.write((text + "\n").encode("utf-8"))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
