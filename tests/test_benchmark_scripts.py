"""The benchmark scripts stay runnable as the code moves: each answers --help, and every llmcli name
it imports exists (they import lazily, so --help alone would not notice a moved one)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_llmcli_import_resolves(script):
    missing = []
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("llmcli"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{node.module}.{alias.name}")
    assert missing == []


WITH_FLAGS = [p for p in SCRIPTS if "argparse" in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("script", WITH_FLAGS, ids=lambda p: p.name)
def test_help(script):
    result = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout


def test_policy_replay_drafts_a_copied_answer_and_holds_plain_speed_on_a_fresh_one(tmp_path):
    """The offline replay the adaptive-k defaults are tuned with: on an answer that copies its
    prompt the policy must beat plain decoding clearly, on one with nothing to copy stay near it,
    with and without the busy-machine noise."""
    import json
    import random

    rng = random.Random(1)
    prompt = [rng.randrange(100, 5000) for _ in range(400)]
    fresh = [rng.randrange(5000, 9000) for _ in range(160)]  # no token of it occurs before
    answers = {
        "smollm2-135m/copy": {"prompt": prompt, "answer": prompt[100:260]},
        "gemma3-270m/fresh": {"prompt": prompt, "answer": fresh},
    }
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(answers))
    script = SCRIPTS[0].parent / "spec_policy_replay.py"
    for extra in ([], ["--noise", "--seeds", "3"]):
        result = subprocess.run([sys.executable, str(script), "replay", str(path), *extra],
                                capture_output=True, text=True, timeout=300)  # fmt: skip
        assert result.returncode == 0, result.stderr
        speeds = {
            line.split()[0]: float(line.split("adaptive")[1].split("x")[0])
            for line in result.stdout.splitlines()
            if " adaptive " in line and "/" in line.split()[0]
        }
        assert speeds["smollm2-135m/copy"] > 1.3, result.stdout
        assert 0.9 <= speeds["gemma3-270m/fresh"] <= 1.05, result.stdout
        assert "geometric mean" in result.stdout


def _schedule_module():
    sys.path.insert(0, str(SCRIPTS[0].parent))
    try:
        return importlib.import_module("spec_schedule")
    finally:
        sys.path.pop(0)


def test_spec_schedule_reads_llama_lookups_drafts_pass_for_pass():
    """The drafts llama-lookup verified, read back from its -v log: one list a pass, the empty
    draft before the first sample left out, a piece holding a newline or a comma read whole."""
    log = (
        "0.02.248 D drafted [  ]\n"
        "0.02.259 D drafted [  ]\n"
        "The0.02.317 D drafted [ ' same':1142, ',':28, ':':42, '\n\n':261 ]\n"
        " same0.02.317 D the sampled target token matches the 0th drafted token\n"
        "0.02.328 D drafted [ '\n':198 ]\n"
        "n_drafted    = 5\n"
    )
    schedule = _schedule_module()
    assert schedule.drafts_from_log(log) == [[], [1142, 28, 42, 261], [198]]
    proposer = schedule.ScriptedProposer(schedule.drafts_from_log(log))
    assert proposer.propose(8) == ([], 0)
    assert proposer.propose(2) == ([1142, 28], 4)  # cut to the k the engine asks for
    assert proposer.propose(8) == ([198], 4)
    assert proposer.propose(8) == ([], 0)  # past llama-lookup's last pass: plain steps


def test_spec_schedule_refuses_a_log_it_cannot_read_whole():
    schedule = _schedule_module()
    with pytest.raises(ValueError, match="-v"):
        schedule.drafts_from_log("n_drafted = 0\n")
    with pytest.raises(ValueError, match="drafted 9"):
        schedule.drafts_from_log("D drafted [  ]\nD drafted [ 'a':1 ]\nn_drafted    = 9\n")


def _answers_module():
    sys.path.insert(0, str(SCRIPTS[0].parent))
    try:
        return importlib.import_module("retrieval_answers")
    finally:
        sys.path.pop(0)


def test_retrieval_answer_facts_are_on_their_lines_and_not_given_away_by_the_question():
    """Each question's fact is on the line that answers it (checked by the script itself) and in no
    question's own words, so an answer that only repeats its question is never counted right."""
    answers = _answers_module()
    qs = answers.questions()
    assert len(qs) == 30
    for q in qs:
        assert not answers.contains(q["question"], q["fact"]), q
    contains = answers.contains
    assert contains("It keeps at most 2000 MB.", ["2000"]) and not contains("20000 MB", ["2000"])
    assert contains("Five ROUNDS, i.e. 5.", ["5"]) and not contains("512 tokens", ["5"])
    assert contains("set HF_HOME=...", ["hf_home"]) and contains("try --show-tools.", ["--show-tools"])
    assert not contains("use --show-toolsets", ["--show-tools"])


@pytest.mark.model
def test_retrieval_answers_runs_end_to_end_on_smollm2(tmp_path):
    """Two questions on the bundled SmolLM2 (too small to answer them: the figures are the lead's
    to quote on Qwen2.5-Coder-1.5B), with and without retrieval: one JSON document, a row each,
    and `ask` put the passage holding the first answer's line in front of the model."""
    import json

    import minilm

    try:
        minilm.path()
    except minilm.Unavailable as exc:
        pytest.skip(f"all-MiniLM-L6-v2 cannot be built here: {exc}")
    script = SCRIPTS[0].parent / "retrieval_answers.py"
    argv = [sys.executable, str(script), "--answer", "smollm2-135m", "--limit", "2", "-n", "16", "--json"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["questions"] == 2 and doc["model"] == "smollm2-135m" and len(doc["load_average"]) == 3
    assert len(doc["rows"]) == 2 and all(0 <= doc["share_right"][k] <= 1 for k in ("without", "with"))
    for row in doc["rows"]:
        assert row["without"]["exit"] == 0 and row["without"]["text"]
        assert row["with"]["exit"] in (0, 8) and isinstance(row["with"]["right"], bool)
    assert doc["rows"][0]["with"]["given"] is True  # KV.md:28, found by hybrid search
