"""The README as a reader meets it: nothing said twice."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sentences(text: str) -> list[str]:
    """The prose sentences of a Markdown text (code blocks, tables and headings left out), each on
    one line; short ones (a label, "See X.") are not counted."""
    out, inside = [], False
    for block in text.split("\n\n"):
        fences = block.count("```")
        if not inside and fences == 0 and not block.lstrip().startswith(("|", "#", "!")):
            out += re.split(r"(?<=[.!?;])\s+", " ".join(block.split()))
        inside ^= fences % 2 == 1
    return [s for s in out if len(s) >= 40]


def test_the_readme_says_each_sentence_once():
    said = Counter(sentences((ROOT / "README.md").read_text(encoding="utf-8")))
    assert [s for s, n in said.items() if n > 1] == []
    assert "Errors are one line on stderr, `llmcli: <kind>: <message> (<hint>)`;" in said


def test_a_repeated_paragraph_is_found():
    said = "Errors are one line on stderr, whatever went wrong."
    text = f"{said}\nA terminal breaks a long one between words.\n\n{said}\n"
    assert Counter(sentences(text)).most_common(1) == [(said, 2)]
