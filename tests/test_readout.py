"""The live readout never corrupts the streamed text; its status line sits below it and goes away."""

from __future__ import annotations

import io

import pyte
import pytest

from llmcli.contract import Done, PrefillProgress, Stats, Token
from llmcli.render.stats import stats_line
from llmcli.repl.readout import LiveReadout


def feed(screen_stream, data: str) -> None:
    screen_stream.feed(data.replace("\n", "\r\n"))  # a terminal in cooked mode maps NL to CR-NL


def make(columns: int = 40, lines: int = 6):
    screen = pyte.Screen(columns, lines)
    return screen, pyte.Stream(screen)


def test_text_intact_with_status_line_below_while_streaming():
    out = io.StringIO()
    readout = LiveReadout(out, columns=40, dim=False)
    readout(PrefillProgress(0, 10, 0.0))
    readout(PrefillProgress(10, 10, 5.0))
    text = "Hello world, this is a long answer\nwith a second line and more words here"
    for i, ch in enumerate(text):
        readout(Token(ch, i + 1))
        readout._draw()  # the timer would redraw at any moment
    screen, stream = make()
    feed(stream, out.getvalue())
    rows = [r.rstrip() for r in screen.display]
    assert rows[0] == "Hello world, this is a long answer"
    assert rows[1] == "with a second line and more words here"
    assert rows[2].startswith("decode ") and "tok/s" in rows[2]
    readout(Done(text, "stop", Stats(), 1))
    readout.stop()
    screen, stream = make()
    feed(stream, out.getvalue())
    rows = [r.rstrip() for r in screen.display]
    assert rows[:2] == ["Hello world, this is a long answer", "with a second line and more words here"]
    assert all(not r for r in rows[2:])  # the status line is gone


@pytest.mark.parametrize("width", [40, 20, 13])
def test_text_that_wraps_at_the_edge_leaves_no_part_of_the_status_in_it(width):
    """A long line wraps into the row the status line was on; the status is erased first, so
    nothing of it is left beside the text (before: "...aquatic life./s · 7 tok · 0.1 s"). A piece
    ending exactly on the last column leaves the terminal's pending wrap alone."""
    out = io.StringIO()
    readout = LiveReadout(out, columns=20, dim=False)
    readout(PrefillProgress(10, 10, 1.0))
    text = ("x" * width) + "abcdefghij klmnopqrstuvwxyz 0123456789 and the end"
    pieces = [text[:width]] + [text[i : i + 3] for i in range(width, len(text), 3)]
    for n, piece in enumerate(pieces, 1):
        readout(Token(piece, n))
        readout._draw()
    screen, stream = make(columns=20, lines=8)
    feed(stream, out.getvalue())
    rows = screen.display  # full rows: a space that wrapped is part of the text
    body = [r for r in rows if r.strip() and not r.startswith("decode ")]
    assert "".join(body).rstrip() == text, rows
    assert [i for i, r in enumerate(rows) if r.startswith("decode ")] == [len(body)], rows
    readout(Done(text, "stop", Stats(), 1))
    readout.stop()
    screen, stream = make(columns=20, lines=8)
    feed(stream, out.getvalue())
    rows = screen.display
    assert "".join(rows).rstrip() == text and not any("tok" in r for r in rows), rows


def test_tabs_keep_the_cursor_where_the_terminal_puts_it():
    out = io.StringIO()
    readout = LiveReadout(out, columns=20, dim=False)
    readout(PrefillProgress(10, 10, 1.0))
    text = "def f():\n\treturn 1\t# one\t\t\tend"
    for n, ch in enumerate(text, 1):
        readout(Token(ch, n))
        readout._draw()
    screen, stream = make(columns=20, lines=8)
    feed(stream, out.getvalue())
    rows = [r.rstrip() for r in screen.display]
    # a tab stops at the last column; what is written there then wraps
    assert rows[:4] == ["def f():", "        return 1   #", " one               e", "nd"], rows
    assert rows[4].startswith("decode ") and (screen.cursor.y, screen.cursor.x) == (3, readout.col), rows


@pytest.mark.parametrize(
    ("col", "text", "expected"),
    [
        (0, "x" * 20, (20, True)),  # the last column written: a pending wrap
        (20, "a", (1, True)),
        (18, "中", (20, True)),
        (19, "中", (2, True)),  # a double-width character that does not fit wraps whole (as xterm, tmux)
        (5, "e\u0301", (6, False)),  # a combining accent takes no column
        (17, "\t", (19, False)),
        (20, "\t", (20, False)),
    ],
)
def test_the_cursor_model(col, text, expected):
    from llmcli.repl.readout import _advance

    assert _advance(col, text, 20) == expected


def test_scrolling_at_the_bottom_of_the_screen_keeps_text():
    out = io.StringIO()
    readout = LiveReadout(out, columns=30, dim=False)
    lines = [f"line {i}" for i in range(10)]
    n = 0
    for line in lines:
        for piece in (line, "\n"):
            n += 1
            readout(Token(piece, n))
    readout.stop()
    screen, stream = make(columns=30, lines=5)
    feed(stream, out.getvalue())
    rows = [r.rstrip() for r in screen.display]
    shown = [r for r in rows if r]
    assert len(shown) >= 3 and shown == lines[-len(shown) :]  # a clean tail: the cursor and status rows below
    assert not any("tok/s" in r for r in rows)


def test_prefill_status_shows_progress():
    readout = LiveReadout(io.StringIO(), columns=80)
    readout(PrefillProgress(512, 2048, 100.0))
    assert readout.status_text().startswith("prefill 512/2048 tok")


def test_one_stats_line_for_chat_generate_and_the_session():
    s = Stats(prompt_tokens=120, cached_tokens=100, prefill_tokens=20, prefill_ms=100, completion_tokens=11,
              decode_tokens=11, decode_ms=500, ttft_ms=150, load_ms=1234, context_used=131)  # fmt: skip
    common = "prompt 120 tok (100 reused) · prefill 200.0 tok/s · generated 11 tok · decode 22.0 tok/s"
    assert stats_line(s, context=4096) == common + " · ttft 0.15 s · context 131/4096"  # after a reply
    assert stats_line(s, load=True) == common + " · ttft 0.15 s · load 1.23 s"  # generate --stats
    assert stats_line(s, ttft=False) == common  # /stats session totals
    fresh = Stats(prompt_tokens=5, prefill_tokens=5, prefill_ms=10, completion_tokens=1, decode_tokens=1)
    assert stats_line(fresh, ttft=False).startswith("prompt 5 tok · prefill 500.0 tok/s")  # nothing reused


def test_tool_calls_show_in_the_status_apart_from_the_model_and_leave_the_text_intact():
    out = io.StringIO()
    readout = LiveReadout(out, columns=60, dim=False)
    for i, ch in enumerate("Checking."):
        readout(Token(ch, i + 1))
    readout.pause()  # a call's approval is asked below the text
    out.write("run tool weather? y\n")
    readout.resume()
    readout.tool_started("weather")
    assert readout.status_text().startswith("tool weather · ")
    readout._draw()
    readout.tool_finished(1500.0)
    readout.note("tool weather({}) -> sunny (1500 ms)", out)
    assert (
        readout.status_text().startswith("waiting for the first token")
        and "· tools 1.5 s" in readout.status_text()
    )
    readout(PrefillProgress(10, 10, 5.0))
    for i, ch in enumerate("Sunny."):
        readout(Token(ch, i + 1))
    status = readout.status_text()
    assert status.startswith("decode ") and status.endswith("· tools 1.5 s")  # where the time went
    readout._draw()
    screen, stream = make(60, 8)
    feed(stream, out.getvalue())
    rows = [r.rstrip() for r in screen.display]
    assert rows[:4] == ["Checking.", "run tool weather? y", "tool weather({}) -> sunny (1500 ms)", "Sunny."]
    assert rows[4].startswith("decode ") and rows[4].endswith("tools 1.5 s")
    readout(Done("Sunny.", "stop", Stats(), 1))
    readout.stop()
    screen, stream = make(60, 8)
    feed(stream, out.getvalue())
    assert [r.rstrip() for r in screen.display][4] == ""  # the status line is gone


def test_stats_line_shows_tool_time_apart_from_the_model():
    s = Stats(prompt_tokens=10, prefill_tokens=10, prefill_ms=500, completion_tokens=5, decode_tokens=5,
              decode_ms=1000, tool_ms=2500)  # fmt: skip
    assert "tools 2.50 s (model 1.50 s)" in stats_line(s)
    assert "tools" not in stats_line(Stats())
