"""The one text path from generated tokens to the text a user sees, shared by every engine.

Each token arrives as raw bytes. `TextStream.feed` turns them into text that is safe to show:
- UTF-8 is decoded incrementally, so a character split across tokens is held until complete and
  never shown as a replacement character;
- text that could be the start of a stop string is held back until it either becomes the stop
  string (cut there, never shown) or cannot any more (released);
- `finish` releases what is still held when generation ends for another reason (the token cap,
  a full context, Ctrl-C), so the exact `--max-tokens` cut shows every complete character.
The real engine and the fake engine both feed this, so tests on the fake mean what they say.
"""

from __future__ import annotations

import codecs

from llmcli.tags import partial_tail


class TextStream:
    def __init__(self, stops: list[str] | None = None) -> None:
        self.stops = [s for s in stops or [] if s]
        self.pieces: list[str] = []  # what was emitted, in order
        self.pending = ""  # text held back because it could be the start of a stop string
        self.decoded_chars = 0  # characters decoded so far, before any stop-string cut
        self.last = ""  # the last token's text, before any stop-string hold-back
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def mid_character(self) -> bool:
        """Whether the last token ended inside a multi-byte character."""
        return bool(self._utf8.getstate()[0])

    def feed(self, data: bytes) -> tuple[str, bool]:
        """One token's bytes in; the text now safe to show, and whether a stop string was reached."""
        text = self.last = self._utf8.decode(data)
        self.decoded_chars += len(text)
        if not text or not self.stops:
            self.pieces.append(text)
            return text, False
        buf = self.pending + text
        cut = min((i for i in (buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.pending = ""
            self.pieces.append(buf[:cut])
            return buf[:cut], True
        hold = max((partial_tail(buf, s) for s in self.stops), default=0)
        self.pending = buf[len(buf) - hold :]
        self.pieces.append(buf[: len(buf) - hold])
        return buf[: len(buf) - hold], False

    def finish(self, stopped: bool) -> str:
        """The held-back text to show at the end ("" when a stop string ended the answer)."""
        tail, self.pending = ("" if stopped else self.pending), ""
        if tail:
            self.pieces.append(tail)
        return tail
