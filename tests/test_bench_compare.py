"""`llmcli bench compare`: ratios and Welch's verdict, llmcli's and llama-bench's files, bad input."""

from __future__ import annotations

import json

import pytest
from benchfake import FakeBackend
from helpers import run, use_bench_backend


@pytest.fixture
def results(monkeypatch, tmp_path):
    """make(name, *args, **fake) writes `llmcli bench -o json` of a FakeBackend run to tmp_path/name."""
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMCLI_MODEL", "m.gguf")

    def make(name: str, *args: str, fmt: str = "json", **fake) -> str:
        backend = FakeBackend(**fake)
        use_bench_backend(lambda debug=False: backend)
        result = run("bench", "-p", "64", "-n", "16", "-t", "1", "-o", fmt, *args)
        (tmp_path / name).write_text(result.stdout)
        return name

    return make


def _rows(stdout: str) -> list[list[str]]:
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for i, line in enumerate(lines) if i > 1]


def test_a_real_speedup_is_reported(results):
    old = results("old.json", jitter=[1.0, 1.02, 0.98])
    new = results(
        "new.json", pp_ns=800_000.0, jitter=[1.0, 1.02, 0.98]
    )  # prefill 25% faster, decode the same
    result = run("bench", "compare", old, new)
    assert result.exit_code == 0, result.stderr
    pp, tg = _rows(result.stdout)
    assert pp[0] == "pp64" and pp[3] == "1.250" and pp[5] == "faster"
    assert tg[0] == "tg16" and tg[3] == "1.000" and tg[5] == "within noise"
    assert "Welch's t-test on tokens/s per repetition; a difference counts when p < 0.05." in result.stdout


def test_noise_is_not_a_difference(results):
    old = results("old.json", jitter=[1.0, 1.3, 0.7])
    new = results("new.json", pp_ns=980_000.0, jitter=[0.7, 1.0, 1.3])  # 2% faster, 30% noise
    doc = json.loads(run("bench", "compare", old, new, "-o", "json").stdout)
    pp = doc["comparisons"][0]
    assert pp["test"] == "pp64" and 0.9 < pp["ratio"] < 1.1
    assert pp["verdict"] == "within noise" and pp["p_value"] > 0.05


def test_slower_and_json_fields(results):
    old = results("old.json", jitter=[1.0, 1.01, 0.99])
    new = results("new.jsonl", fmt="jsonl", tg_ns=12_000_000.0, jitter=[1.0, 1.01, 0.99])
    doc = json.loads(run("bench", "compare", old, new, "-o", "json", "--alpha", "0.01").stdout)
    tg = doc["comparisons"][1]
    assert tg["verdict"] == "slower" and tg["ratio"] == pytest.approx(10 / 12, rel=1e-3)
    assert set(tg) == {"test", "old_avg_ts", "old_stddev_ts", "new_avg_ts", "new_stddev_ts", "ratio", "t",
                       "df", "p_value", "verdict"}  # fmt: skip
    assert doc["alpha"] == 0.01 and doc["only_in_old"] == doc["only_in_new"] == []


def test_tests_in_one_file_only_are_listed(results):
    old = results("old.json", "-d", "0,128")
    new = results("new.json")
    result = run("bench", "compare", old, new)
    assert [row[0] for row in _rows(result.stdout)] == ["pp64", "tg16"]
    assert "only in old: pp64 @ d128, tg16 @ d128" in result.stdout


def test_swept_settings_label_the_rows(results):
    old = results("old.json", "-t", "1,2")
    new = results("new.json", "-t", "1,2")
    labels = [row[0] for row in _rows(run("bench", "compare", old, new).stdout)]
    assert labels == ["pp64 [t=1]", "tg16 [t=1]", "pp64 [t=2]", "tg16 [t=2]"]


def test_reads_llama_bench_json(results, tmp_path):
    new = results("new.json")
    llama_bench = [
        {"model_filename": "/models/m.gguf", "n_prompt": 64, "n_gen": 0, "n_depth": 0, "n_threads": 1,
         "n_batch": 2048, "n_ubatch": 512, "n_gpu_layers": 99, "flash_attn": False, "type_k": "f16",
         "type_v": "f16", "samples_ns": [80_000_000, 80_000_000, 80_000_000]},
        {"model_filename": "/models/m.gguf", "n_prompt": 0, "n_gen": 16, "n_depth": 0, "n_threads": 1,
         "n_batch": 2048, "n_ubatch": 512, "n_gpu_layers": 99, "flash_attn": 0, "type_k": "f16",
         "type_v": "f16", "avg_ts": 100.0, "samples_ts": [100.0, 100.0, 100.0]},
    ]  # fmt: skip
    (tmp_path / "lb.json").write_text(json.dumps(llama_bench))
    doc = json.loads(run("bench", "compare", "lb.json", new, "-o", "json").stdout)
    pp, tg = doc["comparisons"]
    assert pp["old_avg_ts"] == pytest.approx(800.0) and pp["ratio"] == pytest.approx(1.25)
    assert tg["ratio"] == pytest.approx(1.0)


@pytest.mark.parametrize("ngl", [-1, 99, 999])
def test_all_layers_match_however_they_were_asked_for(results, tmp_path, ngl):
    """llama-bench's default -ngl is llama.cpp's -1 (all layers) since the release llmcli builds
    against; llmcli's is 99, the older default; both mean every layer of a small model."""
    new = results("new.json")
    llama_bench = [
        {"model_filename": "/models/m.gguf", "n_prompt": 64, "n_gen": 0, "n_threads": 1, "n_batch": 2048,
         "n_ubatch": 512, "n_gpu_layers": ngl, "flash_attn": 0, "type_k": "f16", "type_v": "f16",
         "samples_ts": [800.0, 800.0, 800.0]},
    ]  # fmt: skip
    (tmp_path / "lb.json").write_text(json.dumps(llama_bench))
    doc = json.loads(run("bench", "compare", "lb.json", new, "-o", "json").stdout)
    assert [c["test"] for c in doc["comparisons"]] == ["pp64"]


def test_a_partial_offload_is_not_all_layers(results, tmp_path):
    """Where the record knows the model's layer count (llmcli's do: the fake model has 4), a count
    up to it stays a count; above it, every layer is offloaded whatever the number."""
    three, four = results("three.json", "-ngl", "3"), results("four.json", "-ngl", "4")
    assert json.loads((tmp_path / four).read_text())["results"][0]["model_n_layers"] == 4
    result = run("bench", "compare", three, four)
    assert result.exit_code == 2 and "no test in common" in result.stderr
    five, many = results("five.json", "-ngl", "5"), results("many.json", "-ngl", "99")
    doc = json.loads(run("bench", "compare", five, many, "-o", "json").stdout)
    assert [c["test"] for c in doc["comparisons"]] == ["pp64", "tg16"]


def test_interrupted_run_is_flagged(results):
    old = results("old.json", interrupt_at=8)
    new = results("new.json")
    result = run("bench", "compare", old, new)
    assert result.exit_code == 0
    assert "llmcli: warning: old.json is from a run that did not finish" in result.stderr
    assert "only in new: tg16" in result.stdout


# -- bad input -------------------------------------------------------------------------------


def test_missing_file(results):
    new = results("new.json")
    result = run("bench", "compare", "nope.json", new)
    assert result.exit_code == 2
    assert result.stderr == "llmcli: usage error: cannot read nope.json: No such file or directory\n"


def test_not_json(results, tmp_path):
    new = results("new.json")
    (tmp_path / "bad.json").write_text("| model | t/s |\n")
    result = run("bench", "compare", "bad.json", new)
    assert result.exit_code == 2
    assert result.stderr.startswith("llmcli: usage error: bad.json is not a benchmark result: line 1:")


def test_json_that_is_not_a_result(results, tmp_path):
    new = results("new.json")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    result = run("bench", "compare", "other.json", new)
    assert result.exit_code == 2
    assert (
        "other.json is not a benchmark result (expected the output of llmcli bench -o json" in result.stderr
    )
    (tmp_path / "nosamples.json").write_text('[{"test": "pp64"}]')
    assert "nosamples.json: pp64 has no samples" in run("bench", "compare", "nosamples.json", new).stderr
    (tmp_path / "empty.json").write_text('{"results": []}')
    assert "empty.json holds no results" in run("bench", "compare", "empty.json", new).stderr


def test_binary_file(results, tmp_path):
    new = results("new.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00GGUF")
    result = run("bench", "compare", "bin.json", new)
    assert result.exit_code == 2
    assert "bin.json is not a benchmark result: not UTF-8 text" in result.stderr


def test_mismatched_files(results):
    old = results("old.json", "-b", "512")
    new = results("new.json")
    result = run("bench", "compare", old, new)
    assert result.exit_code == 2
    assert result.stderr == (
        "llmcli: usage error: old.json and new.json have no test in common "
        "(old: pp64, tg16; new: pp64, tg16) (compare runs of the same tests with the same settings)\n"
    )


def test_bad_alpha(results):
    old = results("old.json")
    assert (
        "--alpha must be between 0 and 1, got 1.5"
        in run("bench", "compare", old, old, "--alpha", "1.5").stderr
    )
