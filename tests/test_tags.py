"""The one partial-tag rule (llmcli/tags.py) that stop strings, the reasoning splitter and the
tool-call parser hold text back by: it agrees with its definition on any text and tag, and each
of the three readers holds a tag cut between two pieces instead of showing half of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmcli.tags import partial_tail

# a small alphabet, so that texts end with the starts of tags often
TEXT = st.text(alphabet="<>/ta", max_size=12)


def naive(text: str, tag: str) -> int:
    """The definition: the longest n with text[-n:] == tag[:n] and n < len(tag); 0 where none."""
    lengths = [n for n in range(1, len(tag)) if n <= len(text) and text[len(text) - n :] == tag[:n]]
    return max(lengths, default=0)


@given(TEXT, TEXT)
def test_it_agrees_with_the_definition(text, tag):
    assert partial_tail(text, tag) == naive(text, tag)


@given(TEXT, st.text(alphabet="<>/ta", min_size=1, max_size=12))
def test_what_it_holds_is_a_start_of_the_tag_and_never_all_of_it(text, tag):
    n = partial_tail(text, tag)
    assert 0 <= n < len(tag)
    assert tag.startswith(text[len(text) - n :])


def test_examples():
    assert partial_tail("abcST", "STOP") == 2
    assert partial_tail("answer </th", "</think>") == 4
    assert partial_tail("<tool_call>", "<tool_call>") == 0  # a whole tag is found, not held
    assert partial_tail("", "<tool_call>") == 0
    assert partial_tail("<<", "<<x") == 2


def test_the_three_readers_hold_a_tag_cut_between_pieces():
    from llmcli.engine.text import TextStream
    from llmcli.reasoning import ReasoningFormat, Splitter
    from llmcli.tools.calls import CallFormat, Parser

    stream = TextStream(["STOP"])
    assert stream.feed(b"go ST") == ("go ", False)
    assert stream.feed(b"OP") == ("", True)

    parser = Parser(CallFormat("hermes"))
    assert parser.feed("Sure. <tool") == ["Sure."]
    pieces = parser.feed('_call>{"name": "f", "arguments": {}}</tool_call>')
    assert [(p.name, p.arguments) for p in pieces] == [("f", {})]

    splitter = Splitter(ReasoningFormat("<think>", "</think>", None, False))
    assert splitter.feed("<think>hmm</th") == ("hmm", "")
    assert splitter.feed("ink>the answer") == ("", "the answer")
