"""`llmcli bench plot`: real result files (a serving run against the misbehaving server of
tests/servers.py, local runs on the fake backend) drawn as SVG and as a text chart; the images are
checked for their size, one line per series, the SLO line and the goodput knee."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from helpers import bench_in, run
from servers import Behaviour

from llmcli.bench.fake import FakeBackend

SVG = "{http://www.w3.org/2000/svg}"


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


def _svg(path):
    root = ET.parse(path).getroot()
    series = [e for e in root.iter(f"{SVG}polyline") if e.get("class") == "series"]
    return root, series


def test_a_serving_run_is_drawn_with_its_percentiles_slo_and_knee(serving_run, tmp_path):
    out = tmp_path / "serve.svg"
    result = run("bench", "plot", str(serving_run), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    root, series = _svg(out)
    assert (root.get("width"), root.get("height")) == ("760", "460")
    assert [s.get("data-label") for s in series] == ["serve median", "serve p90", "serve p99"]
    assert all(len(s.get("points").split()) == 3 for s in series)  # one point per rate
    slo = [e for e in root.iter(f"{SVG}line") if e.get("class") == "slo"]
    knee = [e for e in root.iter(f"{SVG}circle") if e.get("class") == "knee"]
    assert len(slo) == 1 and len(knee) == 1
    texts = "".join(e.text or "" for e in root.iter(f"{SVG}text"))
    assert "SLO ttft 100000 ms" in texts and "knee at 80 req/s" in texts


def test_several_runs_overlay_and_the_terminal_gets_a_text_chart(serving_run, tmp_path):
    doc = json.loads(serving_run.read_text())
    for row in doc["results"]:  # a second run, twice as fast
        row["output_throughput"] *= 2
        row.update({k: v / 2 for k, v in row.items() if k.endswith("_ms") and isinstance(v, float)})
    other = tmp_path / "again.json"
    other.write_text(json.dumps(doc))
    result = run("bench", "plot", str(serving_run), str(other), "--metric", "e2el")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "E2EL against output throughput"
    legend = [line.strip() for line in lines if re.match(r"  [*o+x#@<-] ", line)]
    assert legend[:6] == ["* serve median", "o serve p90", "+ serve p99", "x again median", "# again p90",
                          "@ again p99"]  # fmt: skip
    grid = "\n".join(line for line in lines[1:] if "|" in line)
    assert "*" in grid and "x" in grid  # each run's median (on top where percentiles meet it)
    out = tmp_path / "both.svg"
    assert run("bench", "plot", str(serving_run), str(other), "-o", str(out)).exit_code == 0
    assert len(_svg(out)[1]) == 6


def test_a_local_sweep_is_drawn_against_the_swept_setting(monkeypatch, tmp_path):
    bench_in(tmp_path, monkeypatch, FakeBackend())
    files = []
    for name, depth in (("before", "0,256,512"), ("after", "0,512")):
        result = run("bench", "-p", "64", "-n", "16", "-d", depth, "-r", "2", "-o", "json")
        assert result.exit_code == 0, result.stderr
        (tmp_path / f"{name}.json").write_text(result.stdout)
        files.append(str(tmp_path / f"{name}.json"))
    out = tmp_path / "local.svg"
    result = run("bench", "plot", *files, "-o", str(out))
    assert result.exit_code == 0, result.stderr
    root, series = _svg(out)
    labels = [s.get("data-label") for s in series]
    assert labels == ["before pp", "before tg", "after pp", "after tg"]
    assert [len(s.get("points").split()) for s in series] == [3, 3, 2, 2]
    texts = [e.text for e in root.iter(f"{SVG}text")]
    assert "n_depth" in texts


def test_bad_plot_input_is_one_line(tmp_path):
    (tmp_path / "x.json").write_text("not json at all\n{")
    result = run("bench", "plot", str(tmp_path / "x.json"))
    assert result.exit_code == 2 and "is not a benchmark result" in result.stderr
    (tmp_path / "empty.json").write_text(json.dumps({"results": []}))
    assert "no results to draw" in run("bench", "plot", str(tmp_path / "empty.json")).stderr
    (tmp_path / "ok.json").write_text(json.dumps({"results": [{"avg_ts": 1.0, "n_prompt": 8, "n_gen": 0}]}))
    png = run("bench", "plot", str(tmp_path / "ok.json"), "-o", str(tmp_path / "out.png"))
    assert png.exit_code == 2 and "SVG" in png.stderr and not (tmp_path / "out.png").exists()
