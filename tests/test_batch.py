"""`llmcli batch`: many prompts in one run. The input formats, order, resume and bad input on the
fake engine (its items answered side by side, as a served model's are); batched decoding for real
on SmolLM2 (engine/batched.py): the same text as `generate` at --parallel 1, the same text run to
run at --parallel 4, and a run killed midway that a rerun completes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from batchtools import PROMPTS, SRC, served_batch_resumes
from batchtools import cli as _cli
from batchtools import lines as _lines
from helpers import run


def test_plain_text_one_line_per_item_in_order(fake, tmp_path):
    (tmp_path / "p.txt").write_text("first\n\nsecond\nthird\n")
    result = run("batch", str(tmp_path / "p.txt"), "--seed", "1")
    assert result.exit_code == 0, result.stderr
    lines = _lines(result.stdout)
    assert [d["id"] for d in lines] == ["1", "3", "4"]  # line numbers; the blank line is no item
    assert all(d["record"]["text"] and d["record"]["finish_reason"] != "error" for d in lines)
    assert "batch: 3 items" in result.stderr


def test_jsonl_and_openai_batch_formats_with_per_item_options(fake, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": "a", "prompt": "hi", "max_tokens": 3, "seed": 7})
        + "\n"
        + json.dumps({"id": 2, "messages": [{"role": "user", "content": "yo"}], "temperature": 0})
        + "\n"
    )
    lines = _lines(run("batch", str(src)).stdout)
    assert [d["id"] for d in lines] == ["a", 2]  # the id's JSON type is kept (issue 63)
    assert lines[0]["record"]["params"]["max_tokens"] == 3 and lines[0]["record"]["params"]["seed"] == 7
    assert lines[1]["record"]["params"]["temperature"] == 0
    openai = tmp_path / "openai.jsonl"
    body = {"model": "x", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}
    openai.write_text(json.dumps({"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions",
                                  "body": body}) + "\n")  # fmt: skip
    (line,) = _lines(run("batch", str(openai)).stdout)  # OpenAI input: OpenAI's output line (issue 63)
    assert line["custom_id"] == "req-1" and line["llmcli"]["record"]["params"]["max_tokens"] == 5


def test_text_mode_prints_answers_only(fake, tmp_path):
    (tmp_path / "p.txt").write_text("one\ntwo\n")
    result = run("batch", str(tmp_path / "p.txt"), "--text")
    assert result.exit_code == 0 and result.stdout.strip() and not result.stdout.lstrip().startswith("{")


def test_bad_line_stops_before_anything_is_generated(fake, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "prompt": "ok"}\n{"id": 2, "prompt": \n{"id": 3}\n')
    result = run("batch", str(src))
    assert result.exit_code == 2 and result.stdout == ""
    assert "line 2" in result.stderr
    skipped = run("batch", str(src), "--skip-bad")
    assert [d["id"] for d in _lines(skipped.stdout)] == [1]  # the id's JSON type is kept (issue 63)
    assert "2 bad line(s)" in skipped.stderr
    assert "skipped: line 2, line 3" in skipped.stderr  # which lines (issue 63)


def test_empty_file_and_duplicate_ids_are_refused(fake, tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n")
    result = run("batch", str(tmp_path / "empty.txt"))
    assert result.exit_code == 2 and "empty" in result.stderr and result.stdout == ""
    (tmp_path / "dup.jsonl").write_text('{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n')
    result = run("batch", str(tmp_path / "dup.jsonl"))
    assert result.exit_code == 2 and "twice" in result.stderr


def test_output_file_resumes_and_overwrite_starts_again(fake, tmp_path):
    src, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    src.write_text("a\nb\n")
    assert run("batch", str(src), "-o", str(out)).exit_code == 0
    assert [d["id"] for d in _lines(out.read_text())] == ["1", "2"]
    src.write_text("a\nb\nc\n")
    with out.open("a") as f:
        f.write('{"schema_version": 1, "id": "3", "rec')  # a line a kill cut short
    result = run("batch", str(src), "-o", str(out))
    assert result.exit_code == 0 and "2 already done" in result.stderr
    assert [d["id"] for d in _lines(out.read_text())] == ["1", "2", "3"]
    done = run("batch", str(src), "-o", str(out))
    assert done.exit_code == 0 and "all 3 items are already in" in done.stderr
    assert run("batch", str(src), "-o", str(out), "--overwrite").exit_code == 0
    assert [d["id"] for d in _lines(out.read_text())] == ["1", "2", "3"]


def test_unordered_writes_every_item(fake, tmp_path):
    (tmp_path / "p.txt").write_text("".join(f"prompt {i}\n" for i in range(9)))
    lines = _lines(run("batch", str(tmp_path / "p.txt"), "--unordered", "-np", "3").stdout)
    assert sorted(int(d["id"]) for d in lines) == list(range(1, 10))


# -- for real, on SmolLM2 -------------------------------------------------------------------

@pytest.mark.model
def test_batched_text_equals_generate_at_parallel_1_and_is_stable_at_4(tmp_path):
    src = tmp_path / "p.txt"
    src.write_text("\n".join(PROMPTS) + "\n")
    common = ["-m", "smollm2-135m", "--temperature", "0", "--max-tokens", "24"]
    one = _cli("batch", str(src), *common, "-np", "1")
    assert one.returncode == 0, one.stderr
    batched = [d["record"] for d in _lines(one.stdout)]
    for prompt, rec in zip(PROMPTS, batched, strict=True):
        gen = _cli("generate", prompt, *common, "--json")
        assert gen.returncode == 0, gen.stderr
        assert rec["text"] == json.loads(gen.stdout)["text"], prompt
    four = [_cli("batch", str(src), *common, "-np", "4") for _ in range(2)]
    texts = [[d["record"]["text"] for d in _lines(r.stdout)] for r in four]
    assert texts[0] == texts[1] and all(texts[0])  # batched rounding may differ from -n 1, not run to run
    assert "parallel 4" in four[0].stderr


@pytest.mark.model
def test_a_killed_run_loses_only_the_items_in_flight(tmp_path):
    src, out = tmp_path / "p.txt", tmp_path / "out.jsonl"
    src.write_text("".join(f"Count from {i} to {i + 20}.\n" for i in range(24)))
    args = [sys.executable, "-m", "llmcli", "batch", str(src), "-m", "smollm2-135m", "--temperature", "0",
            "--max-tokens", "32", "-np", "2", "-o", str(out), "--unordered"]  # fmt: skip
    proc = subprocess.Popen(args, env={**os.environ, "PYTHONPATH": str(SRC)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 3):
        assert proc.poll() is None, "the run ended before it was killed"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = _lines(
        out.read_text().rsplit("\n", 1)[0] if not out.read_text().endswith("\n") else out.read_text()
    )
    assert 3 <= len(kept) < 24
    again = _cli("batch", str(src), "-m", "smollm2-135m", "--temperature", "0", "--max-tokens", "32",
                 "-np", "2", "-o", str(out))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"{len(kept)} already done" in again.stderr
    ids = [d["id"] for d in _lines(out.read_text())]
    assert sorted(ids, key=int) == [str(i) for i in range(1, 25)]  # every item once


@pytest.mark.served
def test_served_batch_sends_requests_side_by_side_and_resumes(llama_server, tmp_path):
    """Against a real llama-server (-np 4): every item answered through the served engine, records
    that say so, the same resume by id (tests/batchtools.py; tests/test_vllm.py runs it on vLLM)."""
    every = served_batch_resumes(llama_server.ref, tmp_path)
    assert all(d["record"]["model"]["server"] == "llama-server" for d in every)


@pytest.mark.model
def test_parallel_auto_measures_the_knee_and_says_which(tmp_path, monkeypatch):
    """The first run measures the speeds by N and says so; a later run on the same machine, model
    and settings takes what it stored (a cache of its own here: no other test's run is in it)."""
    monkeypatch.setenv("LLMCLI_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "p.txt"
    src.write_text("\n".join(PROMPTS) + "\n")
    args = ("batch", str(src), "-m", "smollm2-135m", "--temperature", "0", "--max-tokens", "8")
    first = _cli(*args)
    assert first.returncode == 0, first.stderr
    assert len(_lines(first.stdout)) == len(PROMPTS)
    assert "auto: measured tok/s by N 1: " in first.stderr  # sizes up to the 6 items: 1, 2, 4
    measured = first.stderr.split("measured tok/s by N ", 1)[1].split(")")[0].split(";")[0].splitlines()[0]
    assert "8:" not in measured
    stored = list((tmp_path / "cache" / "batch-knee").glob("*.json"))
    if not stored:  # another process kept the machine busy during the probe: nothing is kept
        return
    again = _cli(*args)
    assert again.returncode == 0, again.stderr
    assert "measured by an earlier run here" in again.stderr
    assert f"auto: tok/s by N {measured}" in again.stderr  # the same speeds, so the same N
    assert len(_lines(again.stdout)) == len(PROMPTS)


def test_parallel_is_a_number_or_auto(fake, tmp_path):
    (tmp_path / "p.txt").write_text("a\n")
    for bad in ("0", "many", "300"):
        result = run("batch", str(tmp_path / "p.txt"), "-np", bad)
        assert result.exit_code == 2 and "--parallel" in result.stderr


@pytest.mark.model
def test_a_prompt_longer_than_a_sequence_context_fails_alone(tmp_path):
    src = tmp_path / "in.jsonl"
    long = "word " * 400
    src.write_text("\n".join(json.dumps({"id": i, "prompt": p}) for i, p in
                             enumerate(["Say hi.", long, "Say bye."])) + "\n")  # fmt: skip
    result = _cli(
        "batch", str(src), "-m", "smollm2-135m", "--max-tokens", "4", "-np", "2", "--ctx-size", "256"
    )
    assert result.returncode == 1 and "1 of 3 items failed" in result.stderr
    lines = _lines(result.stdout)
    assert [d["id"] for d in lines] == [0, 1, 2]  # the ids' JSON type is kept (issue 63)
    assert lines[1]["record"]["finish_reason"] == "error" and "context" in lines[1]["record"]["error"]
    assert lines[0]["record"]["text"] and lines[2]["record"]["text"]


def test_each_item_is_logged_under_the_batch_id(fake, tmp_path):
    (tmp_path / "p.txt").write_text("one\ntwo\nthree\n")
    assert run("batch", str(tmp_path / "p.txt")).exit_code == 0
    entries = json.loads(run("logs", "--json").stdout)
    batch_rows = [e for e in entries if e.get("command") == "batch"]
    assert len(batch_rows) == 3 and len({e["conversation_id"] for e in batch_rows}) == 1
    assert run("batch", str(tmp_path / "p.txt"), "--no-log").exit_code == 0
    assert len(json.loads(run("logs", "--json").stdout)) == 3


@pytest.mark.model
def test_each_sequences_context_is_sized_to_the_work_unless_set(tmp_path):
    """Without -c, a sequence's share of the batch's context is what its items can need (prompt and
    answer, a bound), not the model's whole context: a smaller KV cache, made sooner; with -c, -c."""
    src = tmp_path / "p.txt"
    src.write_text("\n".join(PROMPTS) + "\n")
    sized = _cli("batch", str(src), "-m", "smollm2-135m", "--temperature", "0", "-n", "16", "-np", "2")
    assert sized.returncode == 0, sized.stderr
    records = [d["record"] for d in _lines(sized.stdout)]
    longest = max(r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in records)
    assert {r["model"]["context_size"] for r in records} == {512}  # 256-rounded bound of the work
    assert longest <= 512 and all(r["finish_reason"] in ("stop", "length") for r in records)
    assert all(r["usage"]["completion_tokens"] <= 16 for r in records)
    given = _cli("batch", str(src), "-m", "smollm2-135m", "--temperature", "0", "-n", "16", "-np", "2",
                 "-c", "1024")  # fmt: skip
    assert {d["record"]["model"]["context_size"] for d in _lines(given.stdout)} == {1024}
    # the same texts either way: the context's size changes no answer
    assert [d["record"]["text"] for d in _lines(given.stdout)] == [r["text"] for r in records]
