"""`llmcli bench --repack 0,1`: weight repacking as a sweep axis, as llama-bench's --repack, in every
scenario, in the records and the table, and in `bench compare` (fake backend)."""

from __future__ import annotations

import json

import pytest
from benchfake import FakeBackend, FakeClock
from helpers import bench_in, run, use_bench_backend


@pytest.fixture
def backend(monkeypatch, tmp_path):
    return bench_in(tmp_path, monkeypatch, FakeBackend(clock=FakeClock(step_ns=1_000_000)))


def _table(stdout: str) -> list[list[str]]:
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for i, line in enumerate(lines) if i != 1]


def test_both_layouts_load_the_model_once_each_and_say_which_they_measured(backend):
    result = run("bench", "-p", "8", "-n", "4", "-t", "1", "-r", "1", "--repack", "0,1", "-o", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert backend.loads == [("a.gguf", 99, False), ("a.gguf", 99, True)]
    assert [(r["test"], r["repack"]) for r in doc["results"]] == [
        ("pp8", False), ("tg4", False), ("pp8", True), ("tg4", True)
    ]  # fmt: skip
    assert doc["settings"]["sweep"]["repack"] == [False, True]


def test_the_table_shows_the_layout_when_swept(backend):
    result = run("bench", "-p", "8", "-n", "0", "-t", "1", "-r", "1", "--repack", "1,0")
    assert result.exit_code == 0, result.stderr
    head, *rows = _table(result.stdout)
    assert "repack" in head
    assert [row[head.index("repack")] for row in rows] == ["1", "0"]


def test_the_default_is_the_builds_and_is_recorded(backend):
    doc = json.loads(run("bench", "-p", "8", "-n", "0", "-t", "1", "-r", "1", "-o", "json").stdout)
    assert [r["repack"] for r in doc["results"]] == [True]
    assert backend.loads == [("a.gguf", 99, True)]
    assert "repack" not in _table(run("bench", "-p", "8", "-n", "0", "-t", "1", "-r", "1").stdout)[0]


def test_an_amx_build_measures_unrepacked_weights_by_default_and_shows_it(backend):
    backend.repack_default = False  # where llama.cpp would hand the weights to its AMX kernels
    result = run("bench", "-p", "8", "-n", "0", "-t", "1", "-r", "1")
    assert result.exit_code == 0, result.stderr
    head, row = _table(result.stdout)
    assert row[head.index("repack")] == "0"
    assert backend.loads == [("a.gguf", 99, False)]
    assert "--repack" not in result.stderr  # no warning: nothing was asked


def test_asking_for_repacked_weights_on_an_amx_build_is_honoured_with_a_warning(backend):
    backend.repack_default = False
    result = run("bench", "-p", "8", "-n", "0", "-t", "1", "-r", "1", "--repack", "1", "-o", "json")
    assert result.exit_code == 0, result.stderr
    assert "AMX kernels" in result.stderr and "--no-repack avoids them" in result.stderr
    assert backend.loads == [("a.gguf", 99, True)]
    assert [r["repack"] for r in json.loads(result.stdout)["results"]] == [True]


def test_no_repack_is_repack_0(backend):
    result = run("bench", "-p", "8", "-n", "0", "-t", "1", "-r", "1", "--no-repack", "-o", "json")
    doc = json.loads(result.stdout)
    assert [r["repack"] for r in doc["results"]] == [False]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repack", "2"], "--repack: expected 0 or 1, got '2'"),
        (["--repack", "0,"], "--repack: empty value"),
        (["--repack", "1", "--no-repack"], "--repack and --no-repack: give one"),
    ],
)
def test_bad_values_are_one_line_and_nothing_runs(backend, args, message):
    result = run("bench", "-p", "8", "-n", "0", *args)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert backend.loads == [] and backend.runs == 0


def test_the_spec_scenario_compares_each_layout_with_its_own_plain_case(backend):
    result = run("bench", "--scenario", "spec", "-n", "6", "-t", "1", "-r", "1", "--repack", "0,1",
                 "-o", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    records = json.loads(result.stdout)["results"]
    assert [(r["spec_type"], r["repack"]) for r in records] == [
        ("none", False), ("lookup", False), ("none", True), ("lookup", True)
    ]  # fmt: skip
    assert [e.options.repack for e in backend.engines] == [False, False, True, True]
    assert all(r["vs_plain"] is not None for r in records if r["spec_type"] == "lookup")


def test_the_chat_scenario_loads_each_layout(backend):
    result = run("bench", "--scenario", "chat", "-n", "4", "-t", "1", "-r", "1", "--repack", "0,1",
                 "-o", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    records = json.loads(result.stdout)["results"]
    assert {r["repack"] for r in records} == {False, True}
    assert [e.options.repack for e in backend.engines] == [False, True]


def test_a_served_model_refuses_it(backend, monkeypatch):
    monkeypatch.setenv("LLMCLI_MODEL", "http://127.0.0.1:9/v1")
    result = run("bench", "--repack", "0")
    assert result.exit_code == 2
    assert "--repack: not for a served model" in result.stderr


# -- bench compare ---------------------------------------------------------------------------


def _write(tmp_path, name: str, *args: str, **fake) -> str:
    backend = FakeBackend(**fake)
    use_bench_backend(lambda debug=False: backend)
    result = run("bench", "-p", "64", "-n", "0", "-t", "1", "-r", "3", "-o", "json", *args)
    assert result.exit_code == 0, result.stderr
    (tmp_path / name).write_text(result.stdout)
    return name


def test_compare_pairs_each_layout_with_its_own(backend, tmp_path):
    old = _write(tmp_path, "old.json", "--repack", "0,1", jitter=[1.0, 1.02, 0.98])
    new = _write(tmp_path, "new.json", "--repack", "0,1", pp_ns=500_000.0, jitter=[1.0, 1.02, 0.98])
    doc = json.loads(run("bench", "compare", old, new, "-o", "json").stdout)
    assert [c["test"] for c in doc["comparisons"]] == ["pp64 [repack=0]", "pp64 [repack=1]"]
    assert all(c["ratio"] == pytest.approx(2.0) for c in doc["comparisons"])


def test_compare_matches_a_file_that_does_not_record_the_layout(backend, tmp_path):
    """Files from before --repack (and llama-bench files of one layout) still match."""
    old = _write(tmp_path, "old.json", jitter=[1.0, 1.02, 0.98])
    doc = json.loads((tmp_path / old).read_text())
    for record in doc["results"]:
        del record["repack"]
    (tmp_path / old).write_text(json.dumps(doc))
    new = _write(tmp_path, "new.json", "--repack", "0", jitter=[1.0, 1.02, 0.98])
    result = json.loads(run("bench", "compare", old, new, "-o", "json").stdout)
    assert [c["test"] for c in result["comparisons"]] == ["pp64"]


def test_compare_keeps_every_model_of_a_file(backend, tmp_path):
    """Two models' results with the same test and settings are two rows, not one."""
    old = _write(tmp_path, "old.json", "-m", "a.gguf,b.gguf", jitter=[1.0, 1.02, 0.98])
    new = _write(tmp_path, "new.json", "-m", "a.gguf,b.gguf", pp_ns=500_000.0, jitter=[1.0, 1.02, 0.98])
    doc = json.loads(run("bench", "compare", old, new, "-o", "json").stdout)
    assert [c["test"] for c in doc["comparisons"]] == ["pp64 [model=a.gguf]", "pp64 [model=b.gguf]"]
