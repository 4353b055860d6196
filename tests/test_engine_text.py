"""The one text path (engine/text.py) without a model: UTF-8 held until complete, stop strings
across tokens, the held-back text released at the end."""

from __future__ import annotations

import subprocess
import sys

from llmcli.contract import Token
from llmcli.engine.text import TextStream
from llmcli.tags import partial_tail as _overlap


class _Fed:
    def __init__(self, stop: list[str] | None) -> None:
        self.stream = TextStream(stop)
        self.events: list[Token] = []


def generation(stop: list[str] | None = None) -> tuple[_Fed, list[Token]]:
    g = _Fed(stop)
    return g, g.events


def feed(g: _Fed, chunks: list[bytes]) -> bool:
    """Feed one chunk per token, as the decode loop does: one Token event per chunk, then the end."""
    for i, chunk in enumerate(chunks):
        text, stopped = g.stream.feed(chunk)
        g.events.append(Token(text, i + 1))
        if stopped:
            g.stream.finish(True)
            return True
    if tail := g.stream.finish(False):
        g.events.append(Token(tail, len(chunks)))
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


def test_text_held_back_at_the_end_of_generation_is_shown():
    """The answer ends (end of generation, the token cap) while text that could start a stop
    string is held: it is shown, and it is part of the answer."""
    g, events = generation(["STOP"])
    assert not feed(g, [b"it is ", b"ST"])
    assert "".join(e.text for e in events) == "it is ST" == g.stream.text
