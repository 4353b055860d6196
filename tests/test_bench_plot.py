"""`llmcli bench plot`: real result files (a serving run against the misbehaving server of
tests/servers.py, local runs on the fake backend) drawn by matplotlib into PNG, SVG and PDF files and
by plotext on the terminal. The drawn figures are read back: each series' line and points, the
error bars, the axes' ticks and labels, the title, the SLO line and the goodput knee; the SVG's
named elements and texts; plotext's characters."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from benchfake import FakeBackend
from helpers import bench_in, run
from servers import Behaviour

from llmcli.render import charts, plot

SVG = "{http://www.w3.org/2000/svg}"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def serving_run(fault_server, tmp_path):
    fault_server.state.behaviour = Behaviour(delay_s=0.01)
    result = run("bench", "-m", fault_server.ref, "-p", "8", "-n", "5", "-r", "1", "--no-warmup",
                 "--request-rate", "5,20,80", "--requests", "6", "--goodput", "ttft:100000",
                 "-o", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    path = tmp_path / "serve.json"
    path.write_text(result.stdout)
    return path


def _bench(tmp_path, name: str, *args: str) -> Path:
    result = run("bench", *args, "-o", "json")
    assert result.exit_code == 0, result.stderr
    path = tmp_path / f"{name}.json"
    path.write_text(result.stdout)
    return path


@pytest.fixture
def size_sweep(monkeypatch, tmp_path):
    """The usual llama-bench-style sweep: four prompt sizes and one answer size, twice each."""
    bench_in(tmp_path, monkeypatch, FakeBackend(jitter=[1.0, 1.2, 0.9]))
    return _bench(tmp_path, "sweep", "-p", "16,32,64,128", "-n", "16", "-r", "2")


def _figure(*paths: Path, metric: str = "ttft"):
    fig = plot.figure(charts.bench_chart([(p.stem, *charts.load(p)) for p in paths], metric))
    return fig, fig.axes[0]


def _series(ax) -> dict[str, tuple[list[float], list[float]]]:
    """Each drawn series' label and points: error-bar containers and plain lines alike."""
    out = {c.get_label(): c.lines[0] for c in ax.containers}
    out.update({line.get_label(): line for line in ax.lines if not line.get_label().startswith("_")})
    return {k: ([float(x) for x in v.get_xdata()], [float(y) for y in v.get_ydata()]) for k, v in out.items()}


def _svg(path: Path) -> tuple[set[str], list[str]]:
    root = ET.parse(path).getroot()
    return {e.get("id") for e in root.iter(f"{SVG}g")}, [e.text or "" for e in root.iter(f"{SVG}text")]


def test_a_size_sweep_is_one_line_per_test_kind_with_error_bars(size_sweep):
    fig, ax = _figure(size_sweep)
    series = _series(ax)
    assert list(series) == ["pp", "tg"]
    assert series["pp"][0] == [16, 32, 64, 128] and series["tg"][0] == [16]  # tg at its own size, not at 0
    records = json.loads(size_sweep.read_text())["results"]
    pp = [r for r in records if r["n_gen"] == 0]
    assert series["pp"][1] == pytest.approx([r["avg_ts"] for r in pp])
    # the spread of the repetitions: each error bar spans mean - sd to mean + sd
    bars = [c[2][0] for c in ax.containers]
    spans = [seg[:, 1] for seg in bars[0].get_segments()]
    assert [hi - lo for lo, hi in spans] == pytest.approx([2 * r["stddev_ts"] for r in pp])
    assert all(r["stddev_ts"] > 0 for r in pp)
    # round ticks at the swept sizes (doubling: a log2 axis), round y ticks from 0
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32", "64", "128"]
    assert all(float(v) == int(v) for v in ax.get_yticks()) and ax.get_ylim()[0] == 0
    assert "prompt tokens (pp)" in ax.get_xlabel() and "sd of 2 runs" in ax.get_ylabel()
    title = fig._suptitle.get_text()  # the model and the machine
    assert re.fullmatch(r"a \(fake 2M Q4_K_M\) on Test CPU, \d+ threads?", title), title


@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_the_file_format_follows_the_suffix_and_the_umask(size_sweep, tmp_path, suffix, magic):
    out = tmp_path / f"sweep{suffix}"
    old = os.umask(0o022)
    try:
        result = run("bench", "plot", str(size_sweep), "-o", str(out))
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert out.read_bytes().startswith(magic)
    assert out.stat().st_mode & 0o777 == 0o644  # as any program's output, not a private 0600
    if suffix == ".svg":
        ids, texts = _svg(out)
        assert {"series:pp", "series:tg"} <= ids
        assert {"16", "32", "64", "128", "pp", "tg"} <= set(texts)
        assert any(t.startswith("a (fake 2M Q4_K_M) on Test CPU") for t in texts)


def test_a_depth_sweep_overlaid_on_another_run(monkeypatch, tmp_path):
    bench_in(tmp_path, monkeypatch, FakeBackend())
    before = _bench(tmp_path, "before", "-p", "64", "-n", "16", "-d", "0,256,512", "-r", "2")
    after = _bench(tmp_path, "after", "-p", "64", "-n", "16", "-d", "0,512", "-r", "2")
    _, ax = _figure(before, after)
    series = _series(ax)
    assert list(series) == ["before pp", "before tg", "after pp", "after tg"]
    assert [xs for xs, _ in series.values()] == [[0, 256, 512]] * 2 + [[0, 512]] * 2
    assert "(-d)" in ax.get_xlabel() and ax.get_xscale() == "linear"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "256", "512"]


def test_a_sweep_of_several_sizes_at_several_depths_is_one_line_per_test(monkeypatch, tmp_path):
    bench_in(tmp_path, monkeypatch, FakeBackend())
    path = _bench(tmp_path, "both", "-p", "16,64", "-n", "8", "-d", "0,128", "-r", "1")
    series = _series(_figure(path)[1])
    assert series.keys() == {"pp16", "pp64", "tg8"} and all(xs == [0, 128] for xs, _ in series.values())


def test_the_terminal_gets_a_plotext_chart(size_sweep):
    result = run("bench", "plot", str(size_sweep))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "\x1b[" not in out  # no colour codes when stdout is not a terminal
    assert out.startswith("a (fake 2M Q4_K_M) on Test CPU")
    assert re.search(r"o+ pp", out) and re.search(r"x+ tg", out)  # the legend, a marker per series
    grid = "\n".join(line for line in out.splitlines() if "│" in line or "┤" in line)
    assert "o" in grid.replace(" pp", "") and "x" in grid.replace(" tg", "")  # each series' points
    ticks = next(line for line in out.splitlines() if "128" in line).split()
    assert ticks == ["16", "32", "64", "128"]


def test_a_serving_run_is_drawn_with_its_percentiles_slo_and_knee(serving_run, tmp_path):
    fig, ax = _figure(serving_run)
    series = _series(ax)
    assert list(series) == ["median", "p90", "p99", "SLO ttft 100000 ms", "knee at 80 req/s"]
    assert all(len(series[k][0]) == 3 for k in ("median", "p90", "p99"))  # one point per rate
    records = json.loads(serving_run.read_text())["results"]
    assert sorted(series["median"][0]) == sorted(r["output_throughput"] for r in records)
    assert series["SLO ttft 100000 ms"][1] == [100000, 100000]
    assert "TTFT (ms)" == ax.get_ylabel() and "output throughput" in ax.get_xlabel()
    assert fig._suptitle.get_text() == "m on openai-compatible"  # the model and the server
    out = tmp_path / "serve.svg"
    result = run("bench", "plot", str(serving_run), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    ids, texts = _svg(out)
    assert {"series:median", "series:p90", "series:p99", "slo", "knee"} <= ids
    assert "SLO ttft 100000 ms" in texts and "knee at 80 req/s" in texts


def test_several_serving_runs_overlay_on_the_terminal(serving_run, tmp_path):
    doc = json.loads(serving_run.read_text())
    for row in doc["results"]:  # a second run, twice as fast
        row["output_throughput"] *= 2
        row.update({k: v / 2 for k, v in row.items() if k.endswith("_ms") and isinstance(v, float)})
    other = tmp_path / "again.json"
    other.write_text(json.dumps(doc))
    result = run("bench", "plot", str(serving_run), str(other), "--metric", "e2el")
    assert result.exit_code == 0, result.stderr
    for label in ("serve median", "serve p90", "serve p99", "again median", "again p90", "again p99"):
        assert label in result.stdout
    assert "E2EL (ms)" in result.stdout
    _, ax = _figure(serving_run, other, metric="e2el")
    assert len([k for k in _series(ax) if k.split()[-1] in ("median", "p90", "p99")]) == 6


def test_bad_plot_input_is_one_line(tmp_path):
    (tmp_path / "x.json").write_text("not json at all\n{")
    result = run("bench", "plot", str(tmp_path / "x.json"))
    assert result.exit_code == 2 and "is not a benchmark result" in result.stderr
    (tmp_path / "empty.json").write_text(json.dumps({"results": []}))
    assert "no results to draw" in run("bench", "plot", str(tmp_path / "empty.json")).stderr
    (tmp_path / "ok.json").write_text(json.dumps({"results": [{"avg_ts": 1.0, "n_prompt": 8, "n_gen": 0}]}))
    jpg = run("bench", "plot", str(tmp_path / "ok.json"), "-o", str(tmp_path / "out.jpg"))
    assert jpg.exit_code == 2 and ".png, .svg or .pdf" in jpg.stderr and not (tmp_path / "out.jpg").exists()
    metric = run("bench", "plot", str(tmp_path / "ok.json"), "--metric", "speed")
    assert metric.exit_code == 2 and "--metric" in metric.stderr


def test_without_the_plot_extra_one_line_says_how_to_install_it(size_sweep, tmp_path):
    """A Python where matplotlib and plotext cannot be imported: exit 1 and the pip command."""
    code = ("import sys; sys.modules['matplotlib'] = sys.modules['plotext'] = None; "
            "from llmcli.cli.app import main; sys.argv = ['llmcli'] + sys.argv[1:]; main()")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for args in ([str(size_sweep)], [str(size_sweep), "-o", str(tmp_path / "x.png")]):
        done = subprocess.run([sys.executable, "-c", code, "bench", "plot", *args], capture_output=True,
                              text=True, env=env, timeout=120)  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert "pip install 'llmcli[plot]'" in done.stderr and done.stdout == ""
    assert not (tmp_path / "x.png").exists()


def test_several_models_in_one_run_are_told_apart(monkeypatch, tmp_path):
    bench_in(tmp_path, monkeypatch, FakeBackend())
    path = _bench(tmp_path, "models", "-m", "a.gguf,b.gguf", "-p", "16,32", "-n", "8", "-r", "1")
    fig, ax = _figure(path)
    series = _series(ax)
    assert list(series) == ["a pp", "a tg", "b pp", "b tg"]
    assert series["a pp"][0] == [16, 32] and series["b tg"][0] == [8]
    assert fig._suptitle.get_text().startswith("a vs b on Test CPU")


def _batch_file(tmp_path: Path) -> Path:
    """A --scenario batch result (its rows as `bench --scenario batch -o json` writes them)."""
    rows = [{"scenario": "batch", "test": f"batch np{n} pp32 tg16", "model_filename": "a.gguf",
             "n_parallel": n, "n_prompt": 32, "n_gen": 16, "repetitions": 2, "avg_ts": 100.0 * n,
             "stddev_ts": 2.0, "avg_seq_ts": 100.0 - n, "stddev_seq_ts": 1.0, "n_threads": 2}
            for n in (1, 2, 4)]  # fmt: skip
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"results": rows, "environment": {"cpu_info": "Test CPU"}}))
    return path


def test_a_sweep_and_a_batch_run_are_drawn_in_a_panel_each(size_sweep, tmp_path):
    batch = _batch_file(tmp_path)
    out = tmp_path / "x.png"
    result = run("bench", "plot", str(size_sweep), str(batch), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(b"\x89PNG") and result.stdout == ""
    fig = plot.figure(charts.bench_chart([(p.stem, *charts.load(p)) for p in (size_sweep, batch)]))
    assert [ax.get_title() for ax in fig.axes] == ["local", "batch (--scenario batch)"]
    local, batched = (_series(ax) for ax in fig.axes)
    assert list(local) == ["pp", "tg"] and local["pp"][0] == [16, 32, 64, 128]  # the sweep, whole
    assert batched["aggregate"] == ([1, 2, 4], [100, 200, 400])  # the batch run, whole
    assert batched["per sequence"][1] == [99, 98, 96]
    assert "sequences decoded together" in fig.axes[1].get_xlabel()
    # the order of the files does not matter, and the terminal gets both panels
    text = run("bench", "plot", str(batch), str(size_sweep))
    assert text.exit_code == 0, text.stderr
    assert "local" in text.stdout and "batch (--scenario batch)" in text.stdout


def test_a_file_with_nothing_to_draw_beside_others_is_refused(size_sweep, tmp_path):
    (tmp_path / "empty.json").write_text(json.dumps({"results": []}))
    out = tmp_path / "x.png"
    result = run("bench", "plot", str(size_sweep), str(tmp_path / "empty.json"), "-o", str(out))
    assert result.exit_code == 2 and "no results to draw in empty" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()
