"""Tags in streamed text: text arrives in pieces, so a tag (a stop string, `</think>`, `<tool_call>`)
may be cut between two of them. `partial_tail` says how much of the text received so far could
still become the tag, which the reader then holds back until the next piece decides. The stop
strings (engine/text.py), the reasoning splitter (reasoning.py) and the tool-call parser
(tools/calls.py) all hold text back by this one rule."""

from __future__ import annotations


def partial_tail(text: str, tag: str) -> int:
    """The length of the longest end of `text` that is the start of `tag` but not all of it (a
    whole tag is found, not held): how many characters to hold back; 0 when none could be."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
