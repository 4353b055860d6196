"""stderr's long lines broken at a terminal's width: between stats parts, else between words."""

from __future__ import annotations

import io
import os
import pty

from llmcli.render.wrap import fit, for_stream

STATS = (
    "prompt 90 tok (71 reused) · prefill 269.9 tok/s · generated 192 tok · decode 104.4 tok/s"
    " · ttft 0.07 s · context 281/4096"
)


def test_a_line_that_fits_is_unchanged():
    assert fit(STATS, len(STATS)) == STATS
    assert fit("short\n\nlines", 20) == "short\n\nlines"


def test_stats_parts_are_never_split():
    lines = fit(STATS, 80).split("\n")
    assert len(lines) == 2
    assert all(len(line) <= 80 for line in lines)
    assert lines[1].startswith("  ") and not lines[1].startswith("   ")
    parts = [p.strip() for line in lines for p in line.split(" · ")]
    assert parts == STATS.split(" · ")  # each part whole, in order, nothing lost


def test_other_lines_break_between_words_and_keep_every_word():
    text = "error: " + " ".join(f"word{i}" for i in range(60))
    lines = fit(text, 50).split("\n")
    assert len(lines) > 1 and all(len(line) <= 50 for line in lines)
    assert " ".join(line.strip() for line in lines) == text
    assert all(line.startswith("  ") for line in lines[1:])


def test_an_indented_line_keeps_its_indent_and_continues_deeper():
    text = "    " + " ".join(["alpha"] * 30)
    lines = fit(text, 40).split("\n")
    assert lines[0].startswith("    alpha")
    assert all(line.startswith("      alpha") for line in lines[1:])


def test_double_width_characters_count_two_columns():
    text = " ".join(["日本語"] * 10)  # 10 words of 6 columns, 9 spaces: 69 columns, 39 characters
    lines = fit(text, 40).split("\n")
    assert len(lines) == 2


def test_a_word_longer_than_the_width_stands_whole_on_its_own_line():
    url = "https://example.com/" + "x" * 80
    assert fit(f"see {url} for more", 40).split("\n") == ["see", f"  {url}", "  for more"]


def test_only_a_terminal_gets_broken_lines():
    assert for_stream(STATS, io.StringIO()) == STATS  # a pipe or a file: one message, one line
    main, child = pty.openpty()
    try:
        os.set_blocking(main, False)
        import fcntl
        import struct
        import termios

        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
        with open(child, "w", closefd=False) as stream:
            out = for_stream(STATS, stream)
        assert out != STATS and all(len(line) <= 60 for line in out.split("\n"))
    finally:
        os.close(main)
        os.close(child)
