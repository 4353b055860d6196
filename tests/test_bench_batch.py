"""`llmcli bench --scenario batch`: N sequences decoded together by `llmcli batch`'s decoder on the
real SmolLM2-135M (tiny sizes; speed is not asserted), the rows held against the schema, the table,
and `bench plot` drawing the aggregate and per-sequence lines against N; the flags refused before
anything loads on the fake backend."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from benchfake import FakeBackend
from documents import check
from helpers import bench_in, run

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def batch_run(tmp_path_factory):
    result = run("bench", "-m", "smollm2-135m", "--scenario", "batch", "--parallel", "1,3", "-p", "8",
                 "-n", "6", "-r", "2", "-t", "1", "-o", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    path = tmp_path_factory.mktemp("batch") / "batch.json"
    path.write_text(result.stdout)
    return path


@pytest.mark.model
def test_one_row_per_n_with_aggregate_and_per_sequence_speeds(batch_run):
    doc = check(json.loads(batch_run.read_text()), "bench")
    rows = doc["results"]
    assert [r["n_parallel"] for r in rows] == [1, 3]
    assert doc["settings"]["scenario"] == "batch" and doc["settings"]["sweep"]["n_parallel"] == [1, 3]
    for r in rows:
        assert r["scenario"] == "batch" and (r["n_prompt"], r["n_gen"]) == (8, 6)
        assert len(r["samples_ts"]) == 2 and all(v > 0 for v in r["samples_ts"] + r["samples_seq_ts"])
        assert r["avg_prefill_ts"] > 0 and r["repetitions"] == 2
        n = r["n_parallel"]
        # every sequence decodes its 6 tokens, an end token or not (as llama-batched-bench's)
        assert r["completion_tokens"] == [6 * n, 6 * n] and r["ended_early"] == [0, 0]
    one, three = rows
    assert one["vs_one"] == 1.0
    assert three["vs_one"] == pytest.approx(three["avg_ts"] / one["avg_ts"], rel=1e-3)
    # one sequence: the aggregate is that sequence's own speed
    assert one["avg_seq_ts"] == pytest.approx(one["avg_ts"], rel=0.05)


@pytest.mark.model
def test_the_table_names_each_n_and_what_the_columns_count():
    result = run("bench", "-m", "smollm2-135m", "--scenario", "batch", "-np", "2", "-p", "4", "-n", "3",
                 "-r", "1", "--no-warmup", "-t", "1")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    head, _, row = result.stdout.splitlines()[:3]
    assert "t/s (all)" in head and "t/s (each)" in head and "vs N=1" in head
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:5] == ["1", "4", "3", "2"]  # threads, pp, tg, N
    assert "llama-batched-bench's S_TG" in result.stdout


@pytest.mark.model
def test_bench_plot_draws_aggregate_and_per_sequence_against_n(batch_run, tmp_path):
    out = tmp_path / "batch.svg"
    result = run("bench", "plot", str(batch_run), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    root = ET.parse(out).getroot()
    ids = {e.get("id") for e in root.iter(f"{SVG}g")}
    texts = " ".join(e.text or "" for e in root.iter(f"{SVG}text"))
    assert {"series:aggregate", "series:per sequence"} <= ids
    assert "sequences decoded together (N)" in texts and "decode tokens/s" in texts
    png = tmp_path / "batch.png"
    assert run("bench", "plot", str(batch_run), "-o", str(png)).exit_code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_chart_has_both_lines_at_each_n():
    from llmcli.render import charts

    rows = [{"scenario": "batch", "n_parallel": n, "avg_ts": 10.0 * n, "stddev_ts": 1.0, "avg_seq_ts": 10.0,
             "stddev_seq_ts": 0.5, "repetitions": 3, "n_prompt": 32, "n_gen": 128, "n_threads": 2,
             "model_filename": "m.gguf"} for n in (1, 2, 4)]  # fmt: skip
    chart = charts.bench_chart([("run", rows, {}, {})])
    (panel,) = chart.panels
    lines = {s.label: (s.xs, s.ys, s.spread) for s in panel.series}
    assert lines["aggregate"][:2] == ([1.0, 2.0, 4.0], [10.0, 20.0, 40.0])
    assert lines["per sequence"][:2] == ([1.0, 2.0, 4.0], [10.0, 10.0, 10.0])
    assert lines["aggregate"][2][0] == (9.0, 11.0)
    assert panel.x_label == "sequences decoded together (N)"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--parallel", "2"), "--parallel is for --scenario batch"),
        (("--scenario", "batch", "--parallel", "0"), "--parallel"),
        (("--scenario", "batch", "--parallel", "300"), "at most 256"),
        (("--scenario", "batch", "-pg", "8,8"), "-pg and -d do not apply to --scenario batch"),
        (("--scenario", "batch", "-d", "64"), "-pg and -d do not apply to --scenario batch"),
        (("--scenario", "batch", "-n", "0"), "needs an answer length"),
    ],
)
def test_bad_flags_are_refused_before_anything_loads(tmp_path, monkeypatch, args, said):
    fake = bench_in(tmp_path, monkeypatch, FakeBackend())
    result = run("bench", *args)
    assert result.exit_code == 2, result.stdout
    assert said in result.stderr and len(result.stderr.strip().splitlines()) <= 2
    assert fake.engines == [] and fake.runs == 0


def test_the_aggregate_is_taken_while_all_n_decode():
    """N x the speed of the first sequence to end: a sequence stopping early does not lower it, one
    that ended at its first token never decoded and is not counted."""
    from llmcli.bench.batch import BatchCase, sample

    case = BatchCase("m", 0, None, 32, 32, 3)  # type: ignore[arg-type]
    s = 1_000_000_000
    together = sample(0, [(2 * s, 1000.0, 32)] * 3, case, 0)
    assert together.decode_ts == pytest.approx(93.0) and together.seq_decode_ts == pytest.approx(31.0)
    # one stopped after 11 tokens (in 500 ms, in steps of 3): the steps of 3 ran at 20 tok/s each
    early = sample(0, [(s, 500.0, 11), (2 * s, 1000.0, 32), (2 * s, 1000.0, 32)], case, 1)
    assert early.decode_ts == pytest.approx(60.0) and early.completion_tokens == 75
    at_first = sample(0, [(s, 0.0, 1), (2 * s, 1000.0, 32), (2 * s, 1000.0, 32)], case, 1)
    assert at_first.decode_ts == pytest.approx(62.0)
    assert sample(0, [(s, 0.0, 1)], case, 1).decode_ts is None
