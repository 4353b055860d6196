"""llmcli's serving benchmark against GuideLLM's, on one vLLM server, in alternating rounds.

    env PYTHONPATH=src python benchmarks/guidellm_agreement.py [--url http://127.0.0.1:P/v1] [--rounds 3]

Without --url it starts vLLM as the tests do (tests/servers.py `start_vllm`, compiled, as
vllm_agreement.py does). GuideLLM comes from its own cached venv (tests/guidellm_tools.py). Both
clients send `--requests` streamed `/v1/completions` requests of `-p` prompt tokens asking exactly
`-n` tokens (ignore_eos), temperature 0, `-c` at a time in a closed loop, each a subprocess as a
user runs it; which goes first alternates from round to round, and each run has its own seed (the
round's), so no run's prompts repeat an earlier one's. Printed: a table per client (medians over
rounds), each round's ratio, and on the last line `llmcli/guidellm output tok/s at c=C: R`.

What each counts as output tokens/s (read from each one's source):
- llmcli: the server's usage tokens of the completed requests / the repetition's wall time, from
  just before the first request is sent to the end of the last one (one untimed warm-up request
  before it, with a prompt of its own).
- GuideLLM 0.8.1: `metrics.output_tokens_per_second.successful.mean`: a time-weighted mean of the
  token rate, which comes to the usage tokens of the completed requests / (the last request's end
  - the first request's send), the window its scheduler measures with no warm-up or cool-down set
  (the default); no warm-up request. The script checks that identity on every run.
Its "TPOT" is (last token - request sent) / tokens; its "ITL" (mean gap after the first token) is
what llmcli and vLLM call TPOT, so the table's TPOT column for GuideLLM is its ITL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

METRICS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "median_tpot_ms")


def scenario(url: str, model: str, folder: Path, args, seed: int, out: Path) -> dict:
    """A GuideLLM scenario (what `guidellm run -c FILE` reads) for one run."""
    return {
        "spec": {
            "backend": {"kind": "openai_http", "target": url.removesuffix("/v1"), "model": model,
                        "request_format": "/v1/completions", "extras": {"body": {"temperature": 0}}},
            "profile": {"kind": "concurrent", "streams": [args.c]},
            "constraints": [{"kind": "max_requests", "count": args.requests}],
            "tokenizer": {"kind": "huggingface_auto", "model": str(folder)},
            "data": [{"kind": "synthetic_text", "prompt_tokens": args.p, "output_tokens": args.n}],
            "seed": {"kind": "static", "value": seed},
            "outputs": [{"kind": "json", "path": str(out)}],
        }
    }  # fmt: skip


def read_guidellm(report: dict) -> dict:
    """The figures of GuideLLM's JSON report (one benchmark), and the throughput recomputed from
    its totals and measured window, which must agree with its own."""
    (bench,) = report["benchmarks"]
    m = bench["metrics"]
    ok = {k: m[k]["successful"] for k in ("output_tokens_per_second", "time_to_first_token_ms",
                                          "inter_token_latency_ms", "output_token_count")}  # fmt: skip
    sched = bench["scheduler_metrics"]
    window = sched["measure_end_time"] - sched["measure_start_time"]
    tokens = ok["output_token_count"]["total_sum"]
    recomputed = tokens / window if window > 0 else float("nan")
    return {
        "output_throughput": ok["output_tokens_per_second"]["mean"],
        "mean_ttft_ms": ok["time_to_first_token_ms"]["mean"],
        "median_ttft_ms": ok["time_to_first_token_ms"]["median"],
        "median_tpot_ms": ok["inter_token_latency_ms"]["median"],
        "completed": m["request_totals"]["successful"],
        "output_tokens": tokens,
        "window_s": window,
        "tokens_over_window": recomputed,
    }


def run_guidellm(command: Path, url: str, model: str, folder: Path, args, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        path = Path(tmp) / "scenario.json"
        path.write_text(json.dumps(scenario(url, model, folder, args, seed, out)))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        cmd = [str(command), "run", "-c", str(path), "--disable-console"]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        if done.returncode != 0 or not out.is_file():
            raise SystemExit(f"guidellm failed ({done.returncode}):\n{(done.stderr or done.stdout)[-3000:]}")
        got = read_guidellm(json.loads(out.read_text()))
    if abs(got["tokens_over_window"] / got["output_throughput"] - 1) > 0.01:
        raise SystemExit(f"GuideLLM's throughput is not tokens / window here: {got}")
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a vLLM server already running (the API base, .../v1)")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("-p", type=int, default=64, help="prompt tokens")
    parser.add_argument("-n", type=int, default=32, help="output tokens")
    parser.add_argument("-c", type=int, default=4, help="concurrency")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1, help="round r's runs use seed + r")
    parser.add_argument("--json", metavar="FILE", help="write every number here")
    args = parser.parse_args()

    import guidellm_tools
    import vllm_tools
    from vllm_agreement import run_llmcli

    command, folder = guidellm_tools.command(), vllm_tools.smollm2()
    server = None
    url = args.url
    if url is None:
        from servers import start_vllm

        server = start_vllm(Path(tempfile.mkdtemp(prefix="guidellm-agreement-")), eager=False)
        url = server.url
    runs: dict[str, list[dict]] = {"llmcli": [], "guidellm": []}
    try:
        for round_ in range(args.rounds):
            seed = args.seed + round_
            for who in ["llmcli", "guidellm"] if round_ % 2 == 0 else ["guidellm", "llmcli"]:
                if who == "llmcli":
                    llmcli_args = SimpleNamespace(p=args.p, n=args.n, requests=args.requests, seed=seed)
                    got = run_llmcli(url, args.model, {"c": args.c, "rate": None}, llmcli_args)
                else:
                    got = run_guidellm(command, url, args.model, folder, args, seed)
                runs[who].append(got)
                print(f"round {round_ + 1} {who}: {got}", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
    report(runs, args)


def report(runs: dict[str, list[dict]], args) -> None:
    from vllm_agreement import round_ratios

    print(f"SmolLM2-135M on vLLM (CPU), -p {args.p} -n {args.n}, {args.requests} requests at "
          f"concurrency {args.c}, {args.rounds} rounds (medians); GuideLLM {_version()}'s TPOT column "
          "is its ITL (the mean gap after the first token, what llmcli and vLLM call TPOT)\n")  # fmt: skip
    print("| client | output tok/s | mean TTFT ms | median TTFT ms | median TPOT ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    med = {who: {m: statistics.median(r[m] for r in rs) for m in METRICS} for who, rs in runs.items()}
    for who in ("llmcli", "guidellm"):
        v = med[who]
        print(f"| {who} | {v['output_throughput']:.1f} | {v['mean_ttft_ms']:.1f} | "
              f"{v['median_ttft_ms']:.1f} | {v['median_tpot_ms']:.1f} |")  # fmt: skip
    ratio = {m: med["llmcli"][m] / med["guidellm"][m] for m in METRICS}
    print(f"| llmcli / GuideLLM | {ratio['output_throughput']:.3f} | {ratio['mean_ttft_ms']:.3f} | "
          f"{ratio['median_ttft_ms']:.3f} | {ratio['median_tpot_ms']:.3f} |")  # fmt: skip
    per_round = round_ratios(runs["llmcli"], runs["guidellm"])
    print("\nper round, llmcli / GuideLLM output tok/s: " + ", ".join(f"{r:.3f}" for r in per_round))
    print("both count the server's usage tokens of the completed requests over the run's span: llmcli "
          "from just before its first request is sent to the end of its last (after one untimed "
          "warm-up request), GuideLLM from its first request's send to its last request's end (no "
          "warm-up request)")  # fmt: skip
    if args.json:
        everything = {"runs": runs, "medians": med, "per_round": per_round}
        Path(args.json).write_text(json.dumps(everything, indent=2))
    print(f"llmcli/guidellm output tok/s at c={args.c}: {ratio['output_throughput']:.3f}")


def _version() -> str:
    import guidellm_tools

    return guidellm_tools.VERSION


if __name__ == "__main__":
    main()
