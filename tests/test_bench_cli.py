"""`llmcli bench` from the command line on the fake backend and an injected clock: tables, formats, errors."""

from __future__ import annotations

import csv
import io
import json
import re
import statistics

import pytest
from benchfake import FAKE_ENVIRONMENT, Crash, FakeBackend, FakeClock
from helpers import bench_in, run

from llmcli.bench import membw


@pytest.fixture
def backend(monkeypatch, tmp_path):
    """`llmcli bench` runs on this FakeBackend: 1000 t/s prefill, 100 t/s decode, no noise."""
    return bench_in(tmp_path, monkeypatch, FakeBackend())


def _table(stdout: str) -> list[list[str]]:
    """The Markdown table's rows (header first, rule dropped) as lists of stripped cells."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for i, line in enumerate(lines) if i != 1]


def test_default_run_is_llama_bench_pp512_and_tg128(backend):
    result = run("bench", "-t", "2")
    assert result.exit_code == 0, result.stderr
    assert _table(result.stdout) == [
        ["model", "size", "params", "backend", "threads", "test", "t/s", "GB/s"],
        ["fake 2M Q4_K_M", "1.0 MB", "2.00 M", "CPU", "2", "pp512", "1000.00 ± 0.00", ""],
        ["fake 2M Q4_K_M", "1.0 MB", "2.00 M", "CPU", "2", "tg128", "100.00 ± 0.00", "0.10"],
    ]
    assert "build: abc1234 (ggml 0.0.0), llama-cpp-python 0.0.test, llmcli 0.0.test" in result.stdout
    assert "cpu: Test CPU (avx2 fma)" in result.stdout
    assert "repetitions: 5, warm-up: yes" in result.stdout
    assert result.stderr.splitlines() == [
        "llmcli bench: [1/2] pp512: 1000.00 ± 0.00 t/s",
        "llmcli bench: [2/2] tg128: 100.00 ± 0.00 t/s",
    ]
    assert backend.runs == 12  # a warm-up and 5 timed runs per test
    assert backend.loads == [("a.gguf", 99, True)]
    assert [n_ctx for _, n_ctx in backend.contexts] == [512]  # one context, sized for the largest test


def test_mean_and_stddev_of_the_samples(backend):
    backend.jitter = [1.0, 1.25, 0.8]
    doc = json.loads(run("bench", "-p", "100", "-n", "0", "-r", "3", "--no-warmup", "-o", "json").stdout)
    (result,) = doc["results"]
    assert result["samples_ns"] == [100_000_000, 125_000_000, 80_000_000]
    expected = [1000.0, 800.0, 1250.0]
    assert result["samples_ts"] == expected
    assert result["avg_ts"] == pytest.approx(statistics.fmean(expected))
    assert result["stddev_ts"] == pytest.approx(statistics.stdev(expected))
    assert result["cv"] == pytest.approx(statistics.stdev(expected) / statistics.fmean(expected), abs=1e-6)
    assert result["warmup"] is False and doc["settings"]["warmup"] is False


def test_sweep_is_a_cross_product_in_llama_bench_order(backend):
    result = run("bench", "-p", "64,128", "-n", "16", "-t", "1-2", "-d", "0,256", "-o", "json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["results"]
    assert [(r["n_threads"], r["test"]) for r in rows] == [
        (t, name)
        for t in (1, 2)
        for name in ("pp64", "pp128", "tg16", "pp64 @ d256", "pp128 @ d256", "tg16 @ d256")
    ]
    assert len(backend.contexts) == 2  # one per thread count, sized for the largest test
    assert {n_ctx for _, n_ctx in backend.contexts} == {512}


def test_pg_and_depth_names(backend):
    result = run("bench", "-p", "0", "-n", "0", "-pg", "32,8", "-d", "64", "-t", "1")
    assert result.exit_code == 0, result.stderr
    assert _table(result.stdout)[1][5] == "pp32+tg8 @ d64"
    # pg counts prompt and generated tokens over the whole time, as llama-bench does
    assert _table(result.stdout)[1][6] == f"{40 / (32 * 0.001 + 8 * 0.01):.2f} ± 0.00"


def test_depth_is_filled_once_and_trimmed_between_runs(backend):
    run("bench", "-p", "32", "-n", "8", "-d", "128", "-t", "1")
    # filled to 128 once; later runs trim back to the depth instead of refilling
    assert backend.depth_fills == [128]


def test_several_models_are_loaded_once_each(backend):
    result = run(
        "bench", "-m", "a.gguf,b.gguf", "-p", "16", "-n", "4", "-t", "1", "-ngl", "0,1", "-o", "jsonl"
    )
    assert result.exit_code == 0, result.stderr
    assert backend.loads == [
        ("a.gguf", 0, True), ("a.gguf", 1, True), ("b.gguf", 0, True), ("b.gguf", 1, True)
    ]  # fmt: skip
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["model_filename"], r["n_gpu_layers"], r["test"]) for r in rows] == [
        (m, ngl, t) for m in ("a.gguf", "b.gguf") for ngl in (0, 1) for t in ("pp16", "tg4")
    ]


def test_swept_settings_get_columns(backend):
    result = run("bench", "-p", "16", "-n", "0", "-t", "1", "-b", "64,128", "-fa", "0,1", "-ctk", "q8_0")
    head = _table(result.stdout)[0]
    # n_ubatch is capped at n_batch, so it varies too
    assert head == ["model", "size", "params", "backend", "threads", "n_batch", "n_ubatch", "fa", "type_k",
                    "test", "t/s"]  # fmt: skip
    assert [row[5:9] for row in _table(result.stdout)[1:]] == [
        ["64", "64", "0", "q8_0"], ["64", "64", "1", "q8_0"],
        ["128", "128", "0", "q8_0"], ["128", "128", "1", "q8_0"],
    ]  # fmt: skip


def test_quantized_v_cache_without_flash_attention_is_skipped(backend):
    result = run("bench", "-p", "16", "-n", "0", "-t", "1", "-fa", "0,1", "-ctv", "q8_0")
    assert result.exit_code == 0
    assert "skipping -fa 0 with -ctv q8_0: a quantized V cache needs flash attention" in result.stderr
    assert [row[-4:-1] for row in _table(result.stdout)[1:]] == [["1", "q8_0", "pp16"]]
    only = run("bench", "-p", "16", "-t", "1", "-ctv", "q4_0")
    assert only.exit_code == 2
    assert "needs flash attention" in only.stderr


# -- machine-readable formats ----------------------------------------------------------------


def test_json_document_records_everything(backend):
    result = run("bench", "-p", "64", "-n", "16", "-t", "2", "-r", "2", "-o", "json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["schema"] == "llmcli-bench/1"
    assert doc["complete"] is True and doc["planned"] == doc["finished"] == 2
    assert doc["environment"] == FAKE_ENVIRONMENT
    assert doc["settings"]["repetitions"] == 2 and doc["settings"]["sweep"]["n_threads"] == [2]
    pp, tg = doc["results"]
    assert pp["test"] == "pp64" and pp["n_prompt"] == 64 and pp["n_gen"] == 0
    recorded = {"model_filename", "model_type", "model_size", "model_file_size", "model_n_params",
                "model_quantization", "n_batch", "n_ubatch", "n_threads", "n_gpu_layers",
                "n_gpu_layers_offloaded", "flash_attn", "type_k", "type_v", "test_time", "n_ctx"}  # fmt: skip
    assert recorded <= set(pp)
    assert pp["n_batch"] == 2048 and pp["n_ubatch"] == 512 and pp["flash_attn"] is False
    assert pp["model_quantization"] == "Q4_K_M" and pp["model_n_params"] == 2_000_000
    assert len(pp["samples_ns"]) == len(pp["samples_ts"]) == 2
    assert pp["effective_gbps"] is None
    assert tg["effective_gbps"] == pytest.approx(1_000_000 * 100 / 1e9)
    assert result.stderr.count("llmcli bench:") == 2  # progress stays on stderr


def test_csv_has_one_row_per_result_with_samples_and_environment(backend):
    result = run("bench", "-p", "64", "-n", "16", "-t", "1", "-r", "3", "-o", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["test"] for r in rows] == ["pp64", "tg16"]
    assert rows[0]["samples_ns"] == "64000000 64000000 64000000"
    assert rows[0]["build_commit"] == "abc1234" and rows[0]["cpu_info"] == "Test CPU"
    assert rows[0]["run_complete"] == "true"
    assert float(rows[1]["avg_ts"]) == pytest.approx(100.0)


def test_jsonl_is_one_flat_record_per_line(backend):
    result = run("bench", "-p", "64", "-n", "16", "-t", "1", "-o", "jsonl")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["test"] for r in rows] == ["pp64", "tg16"]
    assert all(r["cpu_info"] == "Test CPU" for r in rows)
    assert [(r["result_index"], r["results_planned"]) for r in rows] == [(1, 2), (2, 2)]


def test_jsonl_records_are_written_as_each_result_finishes(backend, tmp_path):
    """A run that dies in its second test (a crashing kernel, the OOM killer) has already written
    the first test's record, whole; compare reads it and says the run did not finish."""
    backend.crash_at = 8  # the first test's warm-up and 5 runs are done, the second's warm-up too
    result = run("bench", "-p", "64", "-n", "16", "-t", "1", "-o", "jsonl", catch=True)
    assert isinstance(result.exception, Crash)
    (line,) = result.stdout.splitlines()
    record = json.loads(line)
    assert record["test"] == "pp64" and (record["result_index"], record["results_planned"]) == (1, 2)
    (tmp_path / "cut.jsonl").write_text(result.stdout)
    compared = run("bench", "compare", "cut.jsonl", "cut.jsonl")
    assert compared.exit_code == 0, compared.stderr
    assert "llmcli: warning: cut.jsonl is from a run that did not finish" in compared.stderr


@pytest.mark.parametrize("fmt", ["md", "json", "csv"])
def test_other_formats_are_written_when_the_run_ends(backend, fmt):
    backend.crash_at = 8
    result = run("bench", "-p", "64", "-n", "16", "-t", "1", "-o", fmt, catch=True)
    assert isinstance(result.exception, Crash)
    assert result.stdout == ""


def test_ctrl_c_in_jsonl(backend, tmp_path):
    backend.interrupt_at = 8
    result = run("bench", "-p", "64", "-n", "16", "-t", "1", "-o", "jsonl")
    assert result.exit_code == 130
    (record,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert record["test"] == "pp64" and record["result_index"] == 1 and record["results_planned"] == 2
    assert "interrupted: 1 of 2 results finished" in result.stderr


def test_roofline_divides_by_the_measured_bandwidth(backend, monkeypatch):
    probe = membw.Bandwidth(
        read_gbps=0.5, copy_gbps=0.4, threads=2, buffer_bytes=1 << 20, reps=5, method="test"
    )
    calls = []
    monkeypatch.setattr(membw, "measure", lambda threads: calls.append(threads) or probe)
    result = run("bench", "-p", "64", "-n", "16", "-t", "1,2", "--roofline")
    assert result.exit_code == 0, result.stderr
    assert calls == [2]  # measured with as many threads as the most the sweep uses
    table = _table(result.stdout)
    assert table[0][-2:] == ["GB/s", "roofline"]
    assert table[2][-2:] == ["0.10", "20%"]  # 0.1 GB/s of 0.5 GB/s
    assert table[1][-1] == ""  # prefill has no decode traffic
    assert "memory bandwidth: read 0.5 GB/s, copy 0.4 GB/s (2 threads, best of 5" in result.stdout
    doc = json.loads(run("bench", "-p", "0", "-n", "16", "-t", "1", "--roofline", "-o", "json").stdout)
    assert doc["memory_bandwidth"]["read_gbps"] == 0.5
    assert doc["results"][0]["roofline_fraction"] == pytest.approx(0.2)


# -- bad input -------------------------------------------------------------------------------


def test_unknown_model(backend):
    result = run("bench", "-m", "missing.gguf", "-t", "1")
    assert result.exit_code == 3
    assert result.stderr.startswith("llmcli: model not found: no such model file: missing.gguf")
    assert len(result.stderr.splitlines()) == 1
    assert result.stdout == ""
    assert backend.runs == 0


def test_unknown_second_model_fails_before_anything_runs(backend):
    result = run("bench", "-m", "a.gguf,missing.gguf", "-t", "1")
    assert result.exit_code == 3
    assert backend.runs == 0 and backend.loads == []


def test_a_model_name_close_to_a_known_one_is_suggested(backend):
    assert run("models", "alias", "tiny-llama", "a.gguf").exit_code == 0
    for typed, meant in (("smollm2", "smollm2-135m"), ("tiny-lama", "tiny-llama"), ("Gemma3", "gemma3-270m")):
        result = run("bench", "-m", typed, "-t", "1")
        assert result.exit_code == 3 and not result.stdout
        [line] = result.stderr.splitlines()
        assert f"no model or alias named {typed!r}; did you mean {meant}?" in line
    unlike = run("bench", "-m", "qqqqqq", "-t", "1")
    assert unlike.exit_code == 3 and "did you mean" not in unlike.stderr
    assert backend.runs == 0


def test_plot_help_names_its_argument_as_typed():
    result = run("bench", "plot", "--help")
    assert result.exit_code == 0
    assert "llmcli bench plot [OPTIONS] RESULTS..." in result.stdout
    assert "\n  RESULTS...  " in result.stdout
    assert "{" not in result.stdout and "<list" not in result.stdout and "Path]" not in result.stdout


def test_invalid_model_file(backend):
    backend.invalid.add("b.gguf")
    result = run("bench", "-m", "b.gguf", "-t", "1")
    assert result.exit_code == 5
    assert "b.gguf is not a GGUF file" in result.stderr


def test_nothing_to_measure(backend):
    result = run("bench", "-p", "0", "-n", "0")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "llmcli: usage error: nothing to measure: -p and -n are 0 and there is no -pg"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", "-5"], "-p must be >= 0, got -5"),
        (["-n", "-1"], "-n must be >= 0, got -1"),
        (["-d", "-1"], "-d must be >= 0, got -1"),
        (["-t", "0"], "-t must be >= 1, got 0"),
        (["-pg", "512,-1"], "-pg: both sizes must be >= 1, got 512,-1"),
        (["-r", "0"], "-r"),
    ],
)
def test_negative_sizes(backend, args, message):
    result = run("bench", *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert backend.runs == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("512-128", "-p: malformed range '512-128': the last value 128 is below the first 512"),
        ("128-512+0", "-p: malformed range '128-512+0': the step must be at least 1"),
        ("1-8*1", "-p: malformed range '1-8*1': multiply a first value >= 1 by at least 2"),
        ("128-", "-p: malformed value '128-'"),
        ("abc", "-p: malformed value 'abc'"),
        ("128,,256", "-p: empty value in '128,,256'"),
        ("1-2-3", "-p: malformed value '1-2-3'"),
    ],
)
def test_malformed_range(backend, value, message):
    result = run("bench", "-p", value)
    assert result.exit_code == 2
    assert message in result.stderr


def test_ranges_expand(backend):
    doc = json.loads(run("bench", "-p", "16-64*2,100", "-n", "0", "-t", "1-3+2", "-o", "json").stdout)
    assert doc["settings"]["sweep"]["n_prompt"] == [16, 32, 64, 100]
    assert doc["settings"]["sweep"]["n_threads"] == [1, 3]


def test_depth_beyond_the_context(backend):
    result = run("bench", "-p", "512", "-n", "128", "-d", "4096", "--ctx-size", "4096")
    assert result.exit_code == 2
    assert result.stderr == (
        "llmcli: usage error: pp512 @ d4096 needs 4608 tokens of context "
        "(depth 4096 + prompt 512 + generation 0) but --ctx-size is 4096 "
        "(raise --ctx-size, or leave it out to size the context to fit)\n"
    )
    assert backend.runs == 0


def test_depth_beyond_the_training_context(backend):
    result = run("bench", "-p", "512", "-n", "0", "-d", "8000")
    assert result.exit_code == 2
    assert "pp512 @ d8000 needs 8512 tokens of context (depth 8000 + prompt 512 + generation 0) but a.gguf " \
           "was trained with 8192" in result.stderr  # fmt: skip


def test_context_is_raised_to_fit_without_ctx_size(backend):
    result = run("bench", "-p", "512", "-n", "0", "-d", "4096", "-t", "1", "-o", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["results"][0]["n_ctx"] == 4608


def test_bad_output_format_and_scenario(backend):
    assert "--output must be one of md, csv, json, jsonl, got 'xml'" in run("bench", "-o", "xml").stderr
    assert "--scenario must be one of tests, chat" in run("bench", "--scenario", "x").stderr
    assert run("bench", "--scenario", "chat", "-p", "5").exit_code == 2


def test_ctrl_c_keeps_finished_results_marked_incomplete(backend):
    backend.interrupt_at = 8  # during the second test: 6 runs for the first, its warm-up, then Ctrl-C
    result = run("bench", "-p", "64", "-n", "16", "-t", "1")
    assert result.exit_code == 130
    assert [row[5] for row in _table(result.stdout)[1:]] == ["pp64"]
    assert "**incomplete**: interrupted after 1 of 2 results" in result.stdout
    assert (
        "llmcli: warning: interrupted: 1 of 2 results finished; they are marked incomplete" in result.stderr
    )


def test_ctrl_c_in_json(backend):
    backend.interrupt_at = 8
    result = run("bench", "-p", "64", "-n", "16", "-t", "1", "-o", "json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 130
    assert doc["complete"] is False and doc["interrupted"] is True
    assert doc["planned"] == 2 and doc["finished"] == 1
    assert [r["test"] for r in doc["results"]] == ["pp64"]


def test_ctrl_c_before_any_result(backend):
    backend.interrupt_at = 1
    result = run("bench", "-p", "64", "-t", "1")
    assert result.exit_code == 130
    assert "No test finished." in result.stdout
    assert "**incomplete**: interrupted after 0 of 2 results" in result.stdout


# -- chat scenario ---------------------------------------------------------------------------


def test_chat_scenario_reports_every_turn_in_both_cache_modes(backend):
    backend.clock = FakeClock(step_ns=1_000_000)  # every clock read is 1 ms later
    result = run("bench", "--scenario", "chat", "-n", "8", "-t", "1", "-r", "2", "-o", "json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["results"]
    assert [(r["cache"], r["turn"]) for r in rows] == [
        (m, t) for m in ("reuse", "fresh") for t in (1, 2, 3, 4)
    ]
    reuse, fresh = rows[:4], rows[4:]
    assert all(r["scenario"] == "chat" and r["test"] == f"chat turn {r['turn']} ({r['cache']})" for r in rows)
    assert all(r["completion_tokens"] == [8, 8] for r in rows)  # the fake echoes more than 8 characters
    # with reuse, later turns find the history in the cache; fresh re-evaluates all of it
    assert all(r["cached_tokens"] == [0, 0] for r in fresh)
    assert reuse[0]["cached_tokens"] == [0, 0]
    assert all(r["cached_tokens"][0] > 0 for r in reuse[1:])
    assert [r["prompt_tokens"] for r in reuse] == [r["prompt_tokens"] for r in fresh]
    # one clock read between the start and the first token, then one per token: 1 ms steps
    assert all(r["avg_ttft_ms"] == 1.0 and r["samples_ttft_ns"] == [1_000_000] * 2 for r in rows)
    assert all(r["samples_ts"] == [1000.0, 1000.0] for r in rows)
    engine = backend.engines[0]
    assert engine.options.threads == 1
    assert all(req.params.temperature == 0 and req.params.max_tokens == 8 for req in engine.history)
    assert len(engine.history) == 4 * (1 + 2 + 2)  # warm-up, then 2 repetitions per mode


def test_chat_table(backend):
    backend.clock = FakeClock(step_ns=1_000_000)
    result = run("bench", "--scenario", "chat", "-n", "8", "-t", "1", "-r", "1")
    table = _table(result.stdout)
    assert table[0] == [
        "model",
        "threads",
        "n_gen",
        "cache",
        "turn",
        "prompt",
        "reused",
        "ttft ms",
        "t/s",
        "GB/s",
    ]
    assert table[1][:5] == ["fake 2M Q4_K_M", "1", "8", "reuse", "1"]
    assert table[1][7:] == ["1.0 ± 0.0", "1000.00 ± 0.00", "1.00"]
    assert len(table) == 9


def test_chat_ctrl_c(backend, monkeypatch):
    from llmcli.engine.fake import FakeEngine

    original = FakeEngine.stream
    calls = []

    def stream(self, prompt, params):
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        yield from original(self, prompt, params)

    monkeypatch.setattr(FakeEngine, "stream", stream)
    result = run("bench", "--scenario", "chat", "-n", "4", "-t", "1", "-r", "1", "--no-warmup")
    assert result.exit_code == 130
    assert "**incomplete**" in result.stdout
    assert "No test finished." not in result.stdout  # the "reuse" mode had finished
    assert len(_table(result.stdout)) == 5


def test_help_mentions_the_method():
    result = run("bench", "--help")
    assert result.exit_code == 0
    assert re.search(r"--n-prompt", result.stdout) and "--roofline" in result.stdout


def test_a_busy_machine_is_flagged(backend):
    backend.busy = 0.4
    result = run("bench", "-p", "64", "-n", "16", "-t", "1")
    assert result.exit_code == 0
    assert (
        "busy machine: other processes used 40% of the CPU during pp64; numbers measured under load"
        in result.stdout
    )
    assert (
        "llmcli bench: [1/2] pp64: 1000.00 ± 0.00 t/s (other processes used 40% of the CPU)" in result.stderr
    )
    doc = json.loads(run("bench", "-p", "64", "-n", "0", "-t", "1", "-o", "json").stdout)
    assert doc["results"][0]["other_cpu_load"] == 0.4
    backend.busy = 0.05
    assert "busy machine" not in run("bench", "-p", "64", "-n", "0", "-t", "1").stdout


def test_busy_starts_background_load_for_the_run_and_stops_it(backend, monkeypatch):
    from llmcli.engine import cpu_load

    started: list = []
    real = cpu_load.background

    def watched(n):
        ctx = real(n)

        class Wrap:
            def __enter__(self):
                procs = ctx.__enter__()
                assert [p.poll() for p in procs] == [None] * n  # running while the tests run
                started.extend(procs)
                return procs

            def __exit__(self, *exc):
                return ctx.__exit__(*exc)

        return Wrap()

    monkeypatch.setattr(cpu_load, "background", watched)
    result = run("bench", "-t", "1,2", "-p", "0", "-n", "8", "-r", "1", "--busy", "2", "-o", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["settings"]["busy_processes"] == 2
    assert [r["n_threads"] for r in doc["results"]] == [1, 2]  # bench keeps the counts as given
    assert len(started) == 2 and all(p.poll() is not None for p in started)  # stopped afterwards
    started.clear()
    md = run("bench", "-t", "1", "-p", "0", "-n", "8", "-r", "1", "--busy", "1")
    assert "measured next to 1 busy process started by --busy" in md.stdout


def test_background_load_is_stopped_when_the_run_fails():
    from llmcli.engine import cpu_load

    procs: list = []
    with pytest.raises(RuntimeError), cpu_load.background(1) as started:
        procs.extend(started)
        raise RuntimeError("boom")
    assert procs and procs[0].poll() is not None


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["-p", "512,4096", "-n", "0"], "use a smaller -p, -n or -d"),
        (["-p", "512", "-n", "0", "--ctx-size", "8192"], "--ctx-size"),
        (["--scenario", "chat", "--ctx-size", "8192"], "--ctx-size"),
        (["--scenario", "spec", "-n", "6", "--ctx-size", "8192"], "--ctx-size"),
    ],
)
def test_a_context_that_does_not_fit_memory_is_refused_before_anything_runs(backend, args, hint):
    """As generate refuses it: one line, the numbers, nothing measured, nothing on stdout."""
    backend.memory_tokens = 2048
    result = run("bench", "-r", "1", *args)
    assert result.exit_code == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmcli: not enough memory: a.gguf"), result.stderr
    assert hint in lines[0]
    assert result.stdout == ""
    assert backend.runs == 0 and backend.loads == [] and backend.engines == []


def test_every_context_a_run_creates_is_checked_once(backend):
    result = run("bench", "-p", "128,256", "-n", "16", "-r", "1", "-o", "json")
    assert result.exit_code == 0, result.stderr
    assert backend.memory_checks == [("a.gguf", 256)]  # one context, sized for the largest test
    assert [n_ctx for _, n_ctx in backend.contexts] == [256]


def test_force_skips_the_memory_check(backend):
    backend.memory_tokens = 256
    result = run("bench", "-p", "512", "-n", "0", "-r", "1", "--force", "-o", "json")
    assert result.exit_code == 0, result.stderr
    assert backend.memory_checks == [] and [n_ctx for _, n_ctx in backend.contexts] == [512]


@pytest.mark.parametrize(("repack", "noted"), [(False, True), (True, False), (None, False)])
def test_footer_says_when_the_weights_were_not_repacked(backend, monkeypatch, repack, noted):
    """llama-bench repacks by default; a run that did not (an AMX build) says how to compare."""
    env = {**FAKE_ENVIRONMENT, **({} if repack is None else {"weight_repack": repack})}
    monkeypatch.setattr(FakeBackend, "environment", lambda self: dict(env))
    backend.repack_default = repack is not False
    result = run("bench", "-p", "8", "-n", "4", "-r", "1")
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("weights: not repacked")]
    assert len(lines) == int(noted)
    if noted:
        assert "llama-bench --repack 0" in lines[0]
