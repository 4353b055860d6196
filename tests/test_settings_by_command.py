"""One run specification (llmcli.runspec): for each setting and each command where it applies, the
flag, the LLMCLI_* variable and the config file each change what the run records (the fake engine
keeps every request's sampling, prompt and load options). Precedence: flag > environment > config.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import run

# setting -> (flag, a value that is not the default, how the run shows it)
SAMPLING = {
    "temperature": ("--temperature", "0.25", 0.25),
    "top_k": ("--top-k", "7", 7),
    "top_p": ("--top-p", "0.5", 0.5),
    "min_p": ("--min-p", "0.2", 0.2),
    "repeat_penalty": ("--repeat-penalty", "1.3", 1.3),
    "max_tokens": ("--max-tokens", "9", 9),
}
ENGINE = {
    "ctx_size": ("--ctx-size", "1024", 1024),
    "threads": ("--threads", "3", 3),
    "batch_size": ("--batch-size", "64", 64),
}
COMMANDS = ("generate", "chat", "batch")
SOURCES = ("flag", "env", "config")


def _set(source: str, key: str, flag: str, value: str) -> list[str]:
    """Give `key` its `value` from `source`; the command-line arguments that adds."""
    if source == "flag":
        return [flag, value]
    if source == "env":
        os.environ[f"LLMCLI_{key.upper()}"] = value
        return []
    config = Path(os.environ["LLMCLI_CONFIG"])
    text = value if not isinstance(value, str) or value.replace(".", "").isdigit() else json.dumps(value)
    config.write_text(f"{key} = {text}\n")
    return []


def _run(command: str, tmp_path: Path, extra: list[str]):
    if command == "generate":
        return run("generate", "hello", "--no-log", *extra)
    if command == "chat":
        return run("chat", "--no-log", *extra, input="hello\n")
    (tmp_path / "p.txt").write_text("hello\n")
    return run("batch", str(tmp_path / "p.txt"), "--no-log", "-np", "1", *extra)


@pytest.fixture
def clean_env():
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("key", sorted(SAMPLING))
def test_sampling_settings(fake, tmp_path, clean_env, command, key, source):
    flag, value, expected = SAMPLING[key]
    result = _run(command, tmp_path, _set(source, key, flag, value))
    assert result.exit_code == 0, result.output
    params = fake.made[-1].history[-1].params
    assert getattr(params, key) == pytest.approx(expected), f"{command}: {key} from the {source}"


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("key", sorted(ENGINE))
def test_engine_settings(fake, tmp_path, clean_env, command, key, source):
    flag, value, expected = ENGINE[key]
    result = _run(command, tmp_path, _set(source, key, flag, value))
    assert result.exit_code == 0, result.output
    assert getattr(fake.made[0].options, key) == expected, f"{command}: {key} from the {source}"


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", COMMANDS)
def test_the_system_prompt(fake, tmp_path, clean_env, command, source):
    result = _run(command, tmp_path, _set(source, "system", "--system", "Answer in French."))
    assert result.exit_code == 0, result.output
    assert "Answer in French." in fake.made[-1].history[-1].prompt, f"{command}: system from the {source}"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_flag_wins_over_the_environment_which_wins_over_the_config(fake, tmp_path, clean_env, command):
    Path(os.environ["LLMCLI_CONFIG"]).write_text("temperature = 0.1\ntop_k = 3\nmax_tokens = 5\n")
    os.environ["LLMCLI_TOP_K"] = "4"
    os.environ["LLMCLI_MAX_TOKENS"] = "6"
    result = _run(command, tmp_path, ["--max-tokens", "7"])
    assert result.exit_code == 0, result.output
    params = fake.made[-1].history[-1].params
    assert (params.temperature, params.top_k, params.max_tokens) == (pytest.approx(0.1), 4, 7)


def test_the_models_recommendation_fills_only_what_nothing_set(tmp_path, clean_env):
    from helpers import use_engine

    from llmcli.engine.fake import FakeEngine

    factory = use_engine(FakeEngine.factory(sampling={"temperature": 0.6, "top_k": 20}))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    Path(os.environ["LLMCLI_CONFIG"]).write_text("top_k = 11\n")
    (tmp_path / "p.txt").write_text("hello\n")
    for args in (["generate", "hello"], ["batch", str(tmp_path / "p.txt"), "-np", "1"]):
        result = run(*args, "-m", str(model), "--no-log")
        assert result.exit_code == 0, result.output
        params = factory.made[-1].history[-1].params
        assert (params.temperature, params.top_k) == (pytest.approx(0.6), 11), args[0]


def test_an_items_own_options_sit_between_the_flags_and_the_rest(fake, tmp_path, clean_env):
    Path(os.environ["LLMCLI_CONFIG"]).write_text("temperature = 0.9\nmax_tokens = 50\n")
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "a", "prompt": "hi", "temperature": 0.3,
                                                  "max_tokens": 20}) + "\n")  # fmt: skip
    result = run("batch", str(tmp_path / "p.jsonl"), "--no-log", "-np", "1", "--max-tokens", "8")
    assert result.exit_code == 0, result.output
    params = fake.made[-1].history[-1].params
    assert params.temperature == pytest.approx(0.3)  # the item's, over the config file's
    assert params.max_tokens == 8  # the typed flag's, over the item's


def test_batch_continues_a_base_models_raw_text_as_generate_does(tmp_path, clean_env):
    from helpers import use_engine

    from llmcli.engine.fake import FakeEngine

    factory = use_engine(FakeEngine.factory(model_type="base"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    (tmp_path / "p.txt").write_text("Once upon a time\n")
    result = run("batch", str(tmp_path / "p.txt"), "-m", str(model), "--no-log", "-np", "1")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)["record"]
    assert record["prompt_format"] == "raw"
    assert factory.made[-1].history[-1].prompt.endswith("Once upon a time")
    generated = run("generate", "Once upon a time", "-m", str(model), "--no-log", "--json")
    assert json.loads(generated.stdout)["prompt_format"] == "raw"


@pytest.mark.parametrize("source", SOURCES)
def test_bench_sweeps_the_configured_threads_and_batch_size(tmp_path, monkeypatch, clean_env, source):
    """bench keeps llama-bench's defaults unless LLMCLI_* or the config file set a load setting."""
    from benchfake import FakeBackend
    from helpers import bench_in

    bench_in(tmp_path, monkeypatch, FakeBackend())
    extra = _set(source, "threads", "-t", "3")
    if source == "config":
        Path(os.environ["LLMCLI_CONFIG"]).write_text("threads = 3\nbatch_size = 256\n")
    elif source == "env":
        os.environ["LLMCLI_BATCH_SIZE"] = "256"
    else:
        extra += ["-b", "256"]
    result = run("bench", "-p", "8", "-n", "4", "-r", "1", "-o", "json", *extra)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["results"]
    assert {(r["n_threads"], r["n_batch"]) for r in rows} == {(3, 256)}, source
    if source == "flag":  # nothing configured: llama-bench's -b 2048 where no flag sets a batch size
        untouched = run("bench", "-p", "8", "-n", "4", "-r", "1", "-o", "json", "-t", "3")
        assert {r["n_batch"] for r in json.loads(untouched.stdout)["results"]} == {2048}


@pytest.mark.parametrize("source", ("env", "config"))
def test_logs_rerun_loads_with_the_runs_settings_and_the_entrys_own(fake, tmp_path, clean_env, source):
    """A rerun repeats the logged sampling and context; how the model is loaded otherwise (threads,
    batch size) comes from LLMCLI_* and the config file as for every other command."""
    _set(source, "threads", "-t", "3")  # (the config file is read once per process: set it first)
    first = run("generate", "hello", "--seed", "11", "--temperature", "0.3", "--json")
    assert first.exit_code == 0, first.output
    recorded = json.loads(first.stdout)["model"]["context_size"]
    rerun = run("logs", "rerun", "1")
    assert rerun.exit_code == 0, rerun.output
    engine = fake.made[-1]
    assert engine.options.threads == 3
    assert engine.options.ctx_size == recorded  # the entry's own
    assert engine.history[-1].params.temperature == pytest.approx(0.3)


def test_a_typed_schema_is_every_items_constraint_whole(fake, tmp_path, clean_env):
    """--json-schema on the command line wins over an item's grammar or response_format as one
    constraint: never the item's grammar with the flag's schema."""
    flag_schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    items = [{"id": "g", "prompt": "hi", "grammar": 'root ::= "x"'},
             {"id": "s", "prompt": "hi", "response_format": {"type": "json_object"}}]  # fmt: skip
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    result = run("batch", str(tmp_path / "p.jsonl"), "--no-log", "-np", "1", "--json-schema",
                 json.dumps(flag_schema))  # fmt: skip
    assert result.exit_code == 0, result.output
    for request in fake.made[-1].history:
        assert request.params.json_schema == flag_schema
        assert 'root ::= "x"' not in (request.params.grammar or "")
