"""The engine's text path without a model: UTF-8 held until complete, stop strings across tokens."""

from __future__ import annotations

import codecs
import subprocess
import sys

from llmcli.engine.base import SamplingParams, Token
from llmcli.engine.llama import _Generation, _overlap


def generation(stop: list[str] | None = None) -> tuple[_Generation, list[Token]]:
    events: list[Token] = []
    g = object.__new__(_Generation)
    g.params = SamplingParams(stop=stop or [])
    g.pieces, g.pending, g.generated, g.decoded_chars = [], "", [], 0
    g.utf8 = codecs.getincrementaldecoder("utf-8")("replace")
    g.events = events
    return g, events


def feed(g: _Generation, chunks: list[bytes]) -> bool:
    """Feed one chunk per token, as the decode loop does: one Token event per chunk."""
    for chunk in chunks:
        g.generated.append(0)
        text, stopped = g.add_text(chunk)
        g.events.append(Token(text, len(g.generated)))
        if stopped:
            return True
    return False


def test_characters_split_across_tokens_are_held_until_complete():
    data = "café 日本語 🌊".encode()
    g, events = generation()
    feed(g, [data[i : i + 1] for i in range(len(data))])  # one byte per token
    texts = [e.text for e in events]
    assert "".join(texts) == "café 日本語 🌊"
    assert all("\ufffd" not in t for t in texts)


def test_long_piece_is_not_truncated():
    g, events = generation()
    piece = ("x" * 5000).encode()
    feed(g, [piece])
    assert "".join(e.text for e in events) == "x" * 5000


def test_stop_string_across_tokens_is_cut_and_never_shown():
    g, events = generation(["</end>"])
    stopped = feed(g, [b"hello <", b"/en", b"d> after"])
    assert stopped
    assert "".join(e.text for e in events) == "hello "


def test_held_back_prefix_is_released_when_it_is_not_a_stop():
    g, events = generation(["STOP"])
    assert not feed(g, [b"ST", b"OR", b"Y"])
    assert "".join(e.text for e in events) == "STORY"


def test_overlap():
    assert _overlap("abcST", "STOP") == 2
    assert _overlap("abc", "STOP") == 0
    assert _overlap("S", "S") == 0  # a whole stop string is found, not held


def test_help_and_version_import_nothing_heavy():
    code = (
        "import sys\n"
        "from llmcli.cli.app import main\n"
        "for argv in (['llmcli', '--help'], ['llmcli', '--version'], ['llmcli', 'generate', '--help']):\n"
        "    sys.argv = argv\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('llama_cpp', 'numpy', 'huggingface_hub', 'jinja2') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out
