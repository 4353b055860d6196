"""The serving benchmark's open-loop load, goodput, percentiles, datasets and rate sweep: the arrival
schedule and the parsers as units, then `bench -m ENDPOINT` against the misbehaving server of
tests/servers.py (threaded; `serial` makes it answer one request at a time, so a queue can grow)."""

from __future__ import annotations

import json
import math
import random

import pytest
from helpers import run
from servers import Behaviour

from llmcli.bench import serve, serve_load, serve_results
from llmcli.bench.serve_load import arrivals
from llmcli.bench.serve_results import Case, Load, RequestResult
from llmcli.errors import UsageError

# -- arrivals -----------------------------------------------------------------------------------


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def test_arrivals_are_seeded_poisson_at_the_rate():
    first = arrivals(4000, 5.0, 1.0, 0.0, random.Random(7))
    assert first == arrivals(4000, 5.0, 1.0, 0.0, random.Random(7))  # repeatable
    assert first != arrivals(4000, 5.0, 1.0, 0.0, random.Random(8))
    assert first[0] == 0.0 and first == sorted(first)
    gaps = _gaps(first)
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(1 / 5.0, rel=0.08)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
    assert sd / mean == pytest.approx(1.0, rel=0.1)  # exponential gaps: coefficient of variation 1


def test_burstiness_shapes_the_gaps_not_the_rate():
    def cv(b: float) -> tuple[float, float]:
        gaps = _gaps(arrivals(4000, 2.0, b, 0.0, random.Random(3)))
        mean = sum(gaps) / len(gaps)
        return mean, math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean

    (bursty_mean, bursty), (steady_mean, steady) = cv(0.25), cv(4.0)
    assert bursty_mean == pytest.approx(0.5, rel=0.15) and steady_mean == pytest.approx(0.5, rel=0.1)
    assert bursty == pytest.approx(2.0, rel=0.15) and steady == pytest.approx(0.5, rel=0.1)  # 1/sqrt(B)


def test_an_infinite_rate_sends_everything_at_once():
    assert arrivals(5, math.inf, 1.0, 0.0, random.Random(1)) == [0.0] * 5


def test_ramp_up_rises_linearly_to_the_rate():
    times = arrivals(3000, 10.0, 1.0, 20.0, random.Random(5))
    in_ramp = sum(1 for t in times if t < 20.0)
    assert in_ramp == pytest.approx(10.0 * 20.0 / 2, rel=0.1)  # half the arrivals of the full rate
    early, late = sum(1 for t in times if t < 10.0), sum(1 for t in times if 10.0 <= t < 20.0)
    assert late == pytest.approx(3 * early, rel=0.25)  # rate*t^2/(2*ramp): 25 by 10 s, 100 by 20 s
    after = [t for t in times if 20.0 <= t < 60.0]
    assert len(after) == pytest.approx(10.0 * 40.0, rel=0.1)


# -- goodput, saturation, lengths, parsers ------------------------------------------------------


def test_goodput_counts_requests_that_meet_every_slo():
    fast = RequestResult(True, ttft_s=0.05, latency_s=0.5, output_tokens=10)  # tpot 50 ms
    slow_start = RequestResult(True, ttft_s=0.5, latency_s=0.9, output_tokens=10)
    one_token = RequestResult(True, ttft_s=0.05, latency_s=0.05, output_tokens=1)  # no TPOT
    failed = RequestResult(False, "boom")
    slo = {"ttft": 100.0, "tpot": 60.0}
    assert [serve_results.meets(r, slo) for r in (fast, slow_start, one_token)] == [True, False, True]
    rep = serve_results.Repetition(2.0, [fast, slow_start, one_token, failed], sent=4)
    result = serve_results.ServeResult(Case(8, 10, None, 4, 2.0), "m", "u", "vllm", "t", [rep],
                                       load=Load(slo_ms=slo))
    record = result.record()
    assert record["goodput_share"] == 0.5 and record["request_goodput"] == 1.0  # 2 good in 2 s
    assert record["slo_ms"] == slo and record["request_rate"] == 2.0 and record["concurrency"] is None
    assert record["test"] == "serve p8 n10 r2"
    plain = serve_results.ServeResult(Case(8, 10, 2, 4), "m", "u", "vllm", "t", [rep]).record()
    assert plain["goodput_share"] is None and plain["test"] == "serve p8 n10 c2"  # the names of before


def test_a_growing_queue_is_saturation_a_steady_one_is_not():
    # (seconds, due so far, finished so far) at each arrival
    steady = [(i * 0.1, i + 1, max(0, i - 2)) for i in range(40)]
    growing = [(i * 0.1, i + 1, i // 4) for i in range(40)]
    assert not serve._growing_without_bound(steady, 40)
    assert serve._growing_without_bound(growing, 40)
    assert not serve._growing_without_bound(growing[:6], 40)  # too early to say


def test_random_lengths_stay_in_their_range_and_repeat_with_the_seed():
    case = Case(100, 20, 1, 300)
    drawn = serve_load.lengths(case, Load(range_ratio=0.5), random.Random(2))
    assert drawn == serve_load.lengths(case, Load(range_ratio=0.5), random.Random(2))
    assert all(50 <= p <= 150 and 10 <= n <= 30 for p, n in drawn)
    assert len({p for p, _ in drawn}) > 20  # spread, not one length
    assert set(serve_load.lengths(case, Load(), random.Random(2))) == {(100, 20)}


def test_parsers():
    assert serve_load.parse_goodput("ttft:200,tpot:50 e2el:3000") == {"ttft": 200, "tpot": 50, "e2el": 3000}
    for bad in ("ttft", "ttft:x", "latency:5", "tpot:-1", ""):
        with pytest.raises(UsageError):
            serve_load.parse_goodput(bad)
    assert serve_load.parse_rates(["1,2.5", "inf"]) == [1.0, 2.5, math.inf]
    assert serve_load.parse_rates(None) == [math.inf]
    for bad in (["0"], ["-1"], ["fast"], ["nan"]):
        with pytest.raises(UsageError):
            serve_load.parse_rates(bad)
    assert serve_load.parse_percentiles("99,50,90,99.9") == (90.0, 99.0, 99.9)  # the median is always there
    with pytest.raises(UsageError):
        serve_load.parse_percentiles("100")


def _sharegpt(path, n: int = 6):
    convs = [
        {"id": "skip-no-reply", "conversations": [{"from": "human", "value": "alone"}]},
        {"id": "skip-gpt-first", "conversations": [{"from": "gpt", "value": "hi"}]},
    ]
    for i in range(n):
        convs.append(
            {
                "id": str(i),
                "conversations": [
                    {"from": "system", "value": "be kind"},
                    {"from": "human", "value": f"question {i}: " + "tell me about rivers " * (i + 1)},
                    {"from": "gpt", "value": "rivers flow " * (3 * i + 4)},
                    {"from": "human", "value": "a later turn, never used"},
                ],
            }
        )
    path.write_text(json.dumps(convs))
    return path


def test_a_sharegpt_file_gives_first_human_turns_and_their_replies(tmp_path):
    pairs = serve_load.load_conversations(str(_sharegpt(tmp_path / "c.json")))
    assert len(pairs) == 6
    assert all(p.startswith("question ") and r.startswith("rivers flow") for p, r in pairs)
    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    for bad in ("bad.json", "missing.json"):
        with pytest.raises(UsageError):
            serve_load.load_conversations(str(tmp_path / bad))


# -- against a server ---------------------------------------------------------------------------


def _bench(ref: str, *args: str):
    result = run("bench", "-m", ref, "-p", "8", "-n", "5", "-r", "1", "--no-warmup", *args, "-o", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_open_loop_goodput_and_percentiles_against_a_server(fault_server, tmp_path):
    fault_server.state.behaviour = Behaviour(delay_s=0.01)
    args = ["--request-rate", "50", "--requests", "6", "--goodput", "e2el:60000", "--percentiles", "95"]
    doc = _bench(fault_server.ref, *args)
    assert doc["settings"]["sweep"]["request_rate"] == [50.0] and doc["settings"]["slo_ms"] == {"e2el": 60000}
    (row,) = doc["results"]
    assert row["test"] == "serve p8 n5 r50" and row["request_rate"] == 50.0 and row["concurrency"] is None
    assert row["completed"] == 6 and row["goodput_share"] == 1.0 and row["request_goodput"] > 0
    assert "p95_ttft_ms" in row and "p90_ttft_ms" not in row and row["median_ttft_ms"] <= row["p95_ttft_ms"]
    (tmp_path / "a.json").write_text(json.dumps(doc))
    strict = _bench(fault_server.ref, "--request-rate", "50", "--requests", "6", "--goodput", "ttft:0.001")
    assert strict["results"][0]["goodput_share"] == 0.0  # no request answers within a microsecond
    (tmp_path / "b.json").write_text(json.dumps(strict))
    compared = run("bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", "json")
    assert compared.exit_code == 0, compared.stderr
    assert [c["test"] for c in json.loads(compared.stdout)["comparisons"]] == ["serve p8 n5 r50"]


def test_a_rate_with_a_concurrency_cap_never_exceeds_the_cap(fault_server):
    fault_server.state.behaviour = Behaviour(delay_s=0.05)
    doc = _bench(fault_server.ref, "--request-rate", "inf", "-c", "2", "--requests", "8")
    (row,) = doc["results"]
    assert row["completed"] == 8 and row["concurrency"] == 2
    assert fault_server.state.most_in_flight == 2  # all due at once, two at a time
    fault_server.state.most_in_flight = 0
    doc = _bench(fault_server.ref, "--request-rate", "inf", "--requests", "6")
    assert doc["results"][0]["completed"] == 6 and fault_server.state.most_in_flight == 6  # no cap


def test_a_sharegpt_dataset_sends_its_prompts_with_the_replies_lengths(fault_server, tmp_path):
    fault_server.state.behaviour = Behaviour(delay_s=0.01)
    path = _sharegpt(tmp_path / "convs.json")
    result = run("bench", "-m", fault_server.ref, "--dataset", str(path), "--requests", "5", "-r", "1",
                 "--no-warmup", "--seed", "3", "-o", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)["results"]
    assert row["dataset"] == "convs.json" and row["test"] == "serve convs.json c1" and row["completed"] == 5
    sent = [r["body"] for r in fault_server.state.requests if r["path"].endswith("/completions")]
    timed = [b for b in sent if b.get("max_tokens", 0) > 1][-5:]  # calibration asks for one token
    assert all(b["prompt"].startswith("question ") for b in timed)
    assert all(b["max_tokens"] >= 4 for b in timed)  # shorter replies are left out, as vLLM does
    first = [b["prompt"] for b in timed]
    fault_server.state.requests.clear()
    again = run("bench", "-m", fault_server.ref, "--dataset", str(path), "--requests", "5", "-r", "1",
                "--no-warmup", "--seed", "3", "-o", "json")  # fmt: skip
    assert again.exit_code == 0
    resent = [
        r["body"]["prompt"]
        for r in fault_server.state.requests
        if r["body"] and r["body"].get("max_tokens", 0) > 1
    ]
    assert resent[-5:] == first  # seeded: the same conversations in the same order


def test_random_dataset_with_a_range_asks_for_varied_lengths(fault_server):
    fault_server.state.behaviour = Behaviour(delay_s=0.0)
    result = run("bench", "-m", fault_server.ref, "-p", "8", "-n", "40", "--range-ratio", "0.5", "--requests",
                 "12", "-r", "1", "--no-warmup")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    asked = {
        r["body"]["max_tokens"]
        for r in fault_server.state.requests
        if r["body"] and r["body"].get("max_tokens", 0) > 1
    }
    assert len(asked) > 3 and all(20 <= n <= 60 for n in asked)


def test_the_sweep_stops_a_saturated_rate_early_and_finds_the_rate_that_holds(fault_server):
    # one request at a time, each about 5 x 20 ms: at most about 10 requests a second
    fault_server.state.behaviour = Behaviour(delay_s=0.02, serial=True)
    args = ["--sweep-rate", "--request-rate", "40", "--requests", "24", "--goodput", "e2el:500"]
    result = run("bench", "-m", fault_server.ref, "-p", "8", "-n", "5", "-r", "1", "--no-warmup", *args,
                 "-o", "json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    answer = doc["settings"]["sweep_rate"]
    first = doc["results"][0]
    assert first["request_rate"] == 40.0 and first["saturated"] is True
    assert first["completed"] < 24  # stopped before sending them all
    assert answer["saturated_at"] is not None and answer["saturated_at"] <= 40.0
    assert "grew without bound" in result.stderr
    held, failed = answer["highest_rate_held"], answer["lowest_rate_failed"]
    assert held is not None and failed is not None and held < failed <= 40.0
    shares = {step["rate"]: step["goodput_share"] for step in answer["steps"]}
    assert shares[held] >= 0.9
    assert [r["request_rate"] for r in doc["results"]] == [step["rate"] for step in answer["steps"]]
    assert f"sweep: the highest rate that held 90% of requests within e2el ≤ 500 ms: {held:g} req/s" in (
        result.stderr
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--sweep-rate"], "--sweep-rate needs SLOs"),
        (["--ramp-up", "5"], "--burstiness and --ramp-up shape arrivals"),
        (["--request-rate", "inf", "--ramp-up", "5"], "--ramp-up needs a finite --request-rate"),
        (["--goodput", "ttft"], "--goodput"),
        (["--dataset", "/nonexistent.json"], "cannot read"),
        (["--request-rate", "0"], "--request-rate must be above 0"),
    ],
)
def test_bad_load_flags_are_one_line(fault_server, args, says):
    result = run("bench", "-m", fault_server.ref, *args)
    assert result.exit_code == 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr


def test_load_flags_on_a_local_model_are_refused():
    result = run("bench", "--request-rate", "2", "--goodput", "ttft:100")
    assert result.exit_code == 2
    assert "--request-rate, --goodput: for a served model" in result.stderr
