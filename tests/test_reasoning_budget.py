"""The pieces of a reasoning budget and of a grammar that waits for the answer, apart from a model:
where a generation prompt leaves the model, the tracker the decode loop feeds, how the switch and
the budget combine for a template, the flags and config, and what a server is sent.
(tests/test_reasoning_real.py runs them on a real model.)"""

from __future__ import annotations

import pytest
from helpers import run
from test_reasoning_split import QWEN3, R1

from llmcli import reasoning
from llmcli.contract import Request, SamplingParams
from llmcli.engine import local
from llmcli.engine.fake import FakeEngine
from llmcli.errors import UsageError
from llmcli.reasoning import ReasoningFormat, Tracker
from llmcli.served.wire import budget_fields


@pytest.mark.parametrize(
    "tail, state",
    [
        ("<|im_start|>assistant\n<think>\n", "reasoning"),  # R1's distills: the block is open
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", "answer"),  # Qwen3 switched off
        ("<|im_start|>assistant\n", "start"),  # Qwen3 on: the model may open one
        ("</think>\nearlier answer<|im_end|>\n<|im_start|>assistant\n", "start"),  # an earlier turn's
    ],
)
def test_where_the_generation_prompt_leaves_the_model(tail, state):
    assert reasoning.prompt_state(QWEN3, tail) == state


def feed(tracker: Tracker, pieces: list[str]) -> list[str | None]:
    """The tracker as the decode loop drives it: asked before each token, fed after."""
    asked = []
    for piece in pieces:
        asked.append(tracker.due())
        tracker.feed(piece)
    return asked


def test_the_budget_is_due_once_after_n_tokens_inside_the_block():
    tracker = Tracker(R1, "reasoning", budget=3, message="Enough.")
    asked = feed(tracker, ["a", "b", "c", "d"])
    assert asked[:3] == [None, None, None]
    assert asked[3] == "\nEnough.\n</think>\n\n"
    assert tracker.due() is None  # once
    feed(tracker, ["\n</think>\n\n"])
    assert tracker.answering and tracker.tokens == 5


def test_tokens_of_the_answer_do_not_count_and_a_closed_block_is_never_forced():
    tracker = Tracker(QWEN3, "start", budget=2)
    feed(tracker, ["<think>", "x", "</think>", "\n\n", "The", " answer", " goes", " on"])
    assert tracker.tokens == 3 and tracker.answering
    assert tracker.due() is None


def test_a_budget_of_zero_closes_a_block_as_it_opens():
    tracker = Tracker(QWEN3, "start", budget=0)
    assert feed(tracker, ["\n"]) == [None]  # nothing opened yet
    tracker.feed("<think>")
    assert tracker.due() == "\n</think>\n\n"


def test_the_budget_waits_for_a_multibyte_character_to_end():
    tracker = Tracker(R1, "reasoning", budget=1)
    tracker.feed("a")
    assert tracker.due(mid_character=True) is None
    assert tracker.due(mid_character=False) is not None


def test_at_the_start_only_an_answer_begun_without_a_block_is_the_grammars():
    splitter = reasoning.Splitter(QWEN3, "start")
    assert splitter.would_answer("{")
    assert (
        not splitter.would_answer("\n")
        and not splitter.would_answer("<th")
        and not splitter.would_answer("<think>")
    )


def test_no_tracker_unless_something_depends_on_the_block():
    assert reasoning.tracker_for(QWEN3, "start", None, "", constrained=False) is None
    assert reasoning.tracker_for(QWEN3, None, 5, "", constrained=True) is None  # raw text
    assert reasoning.tracker_for(None, "start", 5, "", constrained=False) is None
    assert reasoning.tracker_for(QWEN3, "start", None, "", constrained=True) is not None
    assert reasoning.tracker_for(QWEN3, "answer", 5, "", constrained=False) is not None


def engine_with(fmt: ReasoningFormat | None) -> FakeEngine:
    engine = FakeEngine()
    engine.info.reasoning = fmt
    return engine


@pytest.mark.parametrize(
    "fmt, think, budget, expect_think, expect_budget",
    [
        (QWEN3, None, 0, False, 0),  # a budget of 0 uses the switch
        (QWEN3, True, 0, True, 0),  # said on the command line: kept
        (QWEN3, False, None, False, None),  # the switch alone
        (R1, False, None, False, 0),  # no switch: off is a budget of 0
        (R1, None, 50, None, 50),
        (None, False, None, False, None),  # not a reasoning model: nothing changes
    ],
)
def test_the_switch_and_the_budget_as_a_template_takes_them(fmt, think, budget, expect_think, expect_budget):
    request = Request(SamplingParams(reasoning_budget=budget), messages=[{"role": "user", "content": "hi"}],
                      think=think)  # fmt: skip
    resolved = local.thinking(engine_with(fmt), request)
    assert (resolved.think, resolved.params.reasoning_budget) == (expect_think, expect_budget)


def test_the_engine_is_told_where_the_prompt_leaves_the_model(tmp_path):
    from test_reasoning import template

    engine = engine_with(R1)
    engine.info.chat_template = template("deepseek-r1-distill")
    engine.replies = ["Let me see.</think>\n\n42"]
    events = list(engine.respond(Request(SamplingParams(), messages=[{"role": "user", "content": "6*7?"}])))
    assert engine.reasoning_state == "reasoning"
    assert events[-1].text == "42" and events[-1].reasoning == "Let me see."
    list(engine.respond(Request(SamplingParams(), text="plain text")))
    assert engine.reasoning_state is None  # raw text is text


def test_the_flags_and_the_config_set_the_budget(fake, monkeypatch):
    result = run(
        "generate", "--reasoning-budget", "64", "--reasoning-budget-message", "Answer now.", "--json", "hi"
    )
    assert result.exit_code == 0, result.output
    params = fake.made[-1].history[-1].params
    assert (params.reasoning_budget, params.reasoning_budget_message) == (64, "Answer now.")
    run("generate", "--reasoning-budget", "-1", "hi")
    assert fake.made[-1].history[-1].params.reasoning_budget is None  # -1: no limit
    monkeypatch.setenv("LLMCLI_REASONING_BUDGET", "0")
    run("generate", "hi")
    assert fake.made[-1].history[-1].params.reasoning_budget == 0


def test_a_negative_budget_other_than_minus_one_is_refused(fake):
    result = run("generate", "--reasoning-budget", "-2", "hi")
    assert result.exit_code == 2
    assert "--reasoning-budget" in result.output


def test_a_budget_goes_to_the_servers_that_take_one_and_is_refused_elsewhere():
    params = SamplingParams(reasoning_budget=32, reasoning_budget_message="Now answer.")
    assert budget_fields(params, "llama-server") == {"reasoning_budget_tokens": 32,
                                                     "reasoning_budget_message": "Now answer."}  # fmt: skip
    assert budget_fields(SamplingParams(reasoning_budget=32), "vllm") == {"thinking_token_budget": 32}
    with pytest.raises(UsageError, match="no message"):
        budget_fields(params, "vllm")
    with pytest.raises(UsageError, match="takes no reasoning budget"):
        budget_fields(params, "ollama")
    assert budget_fields(SamplingParams(), "ollama") == {}


def test_with_thinking_off_a_block_the_model_writes_anyway_stays_out_of_the_answer():
    from test_reasoning import template

    engine = engine_with(QWEN3)
    engine.info.chat_template = template("qwen3")
    engine.replies = ["<think>\n\n</think>\n\nParis."]
    request = Request(
        SamplingParams(), messages=[{"role": "user", "content": "Capital of France?"}], think=False
    )
    done = list(engine.respond(request))[-1]
    assert engine.reasoning_state == "answer"  # the grammar, if any, applies from the first token
    assert (done.text, done.reasoning) == ("Paris.", "")
