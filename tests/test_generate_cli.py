"""`llmcli generate` on the fake engine: prompt assembly, output channels, JSON, errors."""

from __future__ import annotations

import json
import re

from helpers import run, use_engine


def test_text_goes_to_stdout_alone(fake):
    fake_result = run("generate", "hello there", "--seed", "1")
    assert fake_result.exit_code == 0
    assert fake_result.stdout == "echo: hello there\n"  # the fake echoes the user's turn
    assert fake_result.stderr == ""


def test_stdin_comes_before_argument(fake):
    result = run("generate", "Summarize:", input="notes line\n")
    assert result.exit_code == 0
    prompt = fake.made[0].history[0].prompt
    assert prompt.index("notes line") < prompt.index("Summarize:")


def test_prompt_file(fake, tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("from a file")
    result = run("generate", "-f", str(f), "--raw")
    assert result.exit_code == 0
    assert fake.made[0].history[0].prompt == "from a file"


def test_raw_skips_template_and_system_goes_in(fake):
    run("generate", "plain", "--raw")
    assert fake.made[0].history[0].prompt == "plain"
    run("generate", "q", "--system", "Be brief.")
    prompt = fake.made[1].history[0].prompt
    assert "Be brief." in prompt and "<start_of_turn>user" in prompt


def test_json_record(fake):
    result = run("generate", "hi", "--json", "--seed", "7", "--temperature", "0.5")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["finish_reason"] == "stop"
    assert doc["params"]["seed"] == 7
    assert doc["params"]["temperature"] == 0.5
    usage = doc["usage"]
    assert usage["prefill_tokens"] + usage["cached_tokens"] == usage["prompt_tokens"]
    assert usage["decode_tokens"] == usage["completion_tokens"] == len(doc["text"])
    for key in (
        "load_ms",
        "prefill_ms",
        "prefill_tokens_per_s",
        "decode_ms",
        "decode_tokens_per_s",
        "ttft_ms",
    ):
        assert doc["timings"][key] > 0
    assert set(doc["model"]) >= {"path", "architecture", "quantization", "size_bytes"}
    assert set(doc["versions"]) == {"llmcli", "llama_cpp_python", "backend", "server"}
    assert doc["versions"]["server"] is None and doc["versions"]["llama_cpp_python"]
    assert doc["prompt_format"] == "fallback:gemma"


def test_random_seed_is_reported(fake):
    doc = json.loads(run("generate", "hi", "--json").stdout)
    assert isinstance(doc["params"]["seed"], int)


def test_stats_line_on_stderr(fake):
    result = run("generate", "hi", "--stats")
    assert result.exit_code == 0
    line = result.stderr.splitlines()[-1]
    assert re.fullmatch(
        r"prompt \d+ tok · prefill [\d.]+ tok/s · generated \d+ tok · decode [\d.]+ tok/s · "
        r"ttft \d+\.\d\d s · load \d+\.\d\d s",
        line,
    ), line
    assert "tok/s" not in result.stdout
    both = run("generate", "hi", "--stats", "--json")  # the line is on stderr: it goes with --json too
    assert both.exit_code == 0
    assert json.loads(both.stdout)["text"] and both.stderr.splitlines()[-1].startswith("prompt ")


def test_max_tokens_and_stop(fake):
    fake.made.clear()
    result = run("generate", "x", "--max-tokens", "3", "--json")
    doc = json.loads(result.stdout)
    assert doc["finish_reason"] == "length" and doc["usage"]["completion_tokens"] == 3


def test_stop_string_cuts_output(monkeypatch, tmp_path):
    from llmcli.engine.fake import FakeEngine

    factory = FakeEngine.factory(replies=["alpha beta STOP gamma"])
    use_engine(factory)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = run("generate", "x", "-m", str(model), "--stop", "STOP", "--json")
    doc = json.loads(result.stdout)
    assert doc["text"] == "alpha beta " and doc["finish_reason"] == "stop"


def test_interrupted_exits_130_with_partial_text(monkeypatch, tmp_path):
    from llmcli.engine.fake import FakeEngine

    factory = FakeEngine.factory(replies=["0123456789"], interrupt_after=4)
    use_engine(factory)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = run("generate", "x", "-m", str(model))
    assert result.exit_code == 130
    assert result.stdout == "0123\n"
