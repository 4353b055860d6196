"""Served models: client overhead, the serving benchmark against independent measurements, Ctrl-C.

Run under the EXCLUSIVE cpu lock on the shared machine:

    flock /tmp/cpu.lock env PYTHONPATH=src python benchmarks/served.py

It starts llama-server (built from the installed release's vendored llama.cpp, see
tests/llamacpp_tools.py) with the bundled SmolLM2-135M-Instruct, `-np 4`, on a free loopback port,
and measures:

1. client overhead: `--requests` sequential requests through llmcli's generate path
   (`ServedEngine.stream_messages`, exactly what `generate --stats` reports): llmcli's decode speed
   against llama-server's own `timings.predicted_per_second` for the same request. Target: within 3%.
2. the serving benchmark at concurrency 1, 2 and 4: `llmcli bench -m URL -c 1,2,4 -o json` (a
   subprocess, as a user runs it) alternating, `--rounds` times, with an independent minimal client
   written here with the standard library only (http.client, threads, its own SSE parsing and its
   own prompts), and with llama-server's `/metrics` counters read before and after each llmcli run
   (tokens predicted: must equal llmcli's count; and the server-side output throughput, tokens
   predicted / llmcli's wall time). The order alternates from round to round (llmcli first, then
   the minimal client first), and the ratio reported is the median of the per-round ratios.
   Target: output tok/s and request throughput within 5%.
3. Ctrl-C: `llmcli generate` with a long answer, SIGINT after the first text: time to the process'
   exit and until the server reports no request processing (`/metrics`). Target: under 0.5 s.

Prints a report and (with --json FILE) writes every number.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def metrics(root: str) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(root + "/metrics", timeout=10) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name.strip()] = float(value)
    return out


# -- 1. client overhead ----------------------------------------------------------------------


def client_overhead(ref: str, requests: int, n_gen: int) -> dict:
    from llmcli.contract import Done, SamplingParams
    from llmcli.loader import served_endpoint
    from llmcli.served.engine import ServedEngine

    endpoint = served_endpoint(ref)
    assert endpoint is not None
    engine = ServedEngine(endpoint)
    rows = []
    try:
        for i in range(requests):
            params = SamplingParams(temperature=0.0, max_tokens=n_gen, seed=i)
            messages = [{"role": "user", "content": f"Tell me a long story about a {random.choice(WORDS)}."}]
            done = None
            for event in engine.stream_messages(messages, params):
                if isinstance(event, Done):
                    done = event
            assert done is not None
            s = done.stats
            server = s.server.get("predicted_per_second")
            n = s.completion_tokens
            rows.append(
                {
                    "n": n,
                    "client_tps": s.decode_tps,
                    "server_tps": server,
                    "ratio": s.decode_tps / server if server else None,
                }
            )
    finally:
        engine.close()
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    return {
        "rows": rows,
        "median_ratio": statistics.median(ratios),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
    }


# -- 2. the independent minimal client ------------------------------------------------------------

WORDS = (
    "river stone garden window music letter island winter doctor forest bridge morning market "
    "teacher picture station mountain summer story animal"
).split()


def minimal_client(
    host: str,
    port: int,
    model: str,
    tokens: list[int],
    n_prompt: int,
    n_gen: int,
    concurrency: int,
    requests: int,
    seed: int,
) -> dict:
    """A closed loop of `requests` streamed completions, `concurrency` at a time, stdlib only."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(requests):
        start = rng.randrange(0, len(tokens) - n_prompt)
        prompts.append(tokens[start : start + n_prompt])
    results: list[dict] = []
    lock = threading.Lock()
    index = [0]

    def one(prompt: list[int]) -> dict:
        body = json.dumps(
            {
                "model": model,
                "prompt": prompt,
                "max_tokens": n_gen,
                "stream": True,
                "stream_options": {"include_usage": True},
                "temperature": 0.0,
                "ignore_eos": True,
                "cache_prompt": False,
            }
        )
        conn = http.client.HTTPConnection(host, port, timeout=300)
        sent = time.monotonic()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        first = last = None
        tokens_out = None
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            doc = json.loads(line[6:])
            if doc.get("usage"):
                tokens_out = doc["usage"]["completion_tokens"]
            for choice in doc.get("choices") or []:
                if choice.get("text"):
                    now = time.monotonic()
                    first = first or now
                    last = now
        end = time.monotonic()
        conn.close()
        return {"ttft": first - sent, "latency": end - sent, "tokens": tokens_out, "decode": last - first}

    def worker() -> None:
        while True:
            with lock:
                i = index[0]
                if i >= requests:
                    return
                index[0] += 1
            r = one(prompts[i])
            with lock:
                results.append(r)

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    out_tokens = sum(r["tokens"] for r in results)
    return {
        "wall_s": wall,
        "request_throughput": len(results) / wall,
        "output_throughput": out_tokens / wall,
        "median_ttft_ms": statistics.median(r["ttft"] for r in results) * 1000,
        "output_tokens": out_tokens,
    }


def llmcli_bench(ref: str, n_prompt: int, n_gen: int, concurrency: int, requests: int, seed: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [
        sys.executable,
        "-m",
        "llmcli",
        "-q",
        "bench",
        "-m",
        ref,
        "-p",
        str(n_prompt),
        "-n",
        str(n_gen),
        "-c",
        str(concurrency),
        "--requests",
        str(requests),
        "-r",
        "1",
        "--no-warmup",
        "--seed",
        str(seed),
        "-o",
        "json",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    if result.returncode != 0:
        raise SystemExit(f"llmcli bench failed: {result.stderr}")
    return json.loads(result.stdout)["results"][0]


def serving(server, n_prompt: int, n_gen: int, levels: list[int], requests: int, rounds: int) -> dict:
    import urllib.request

    host, port = "127.0.0.1", int(server.url.split(":")[2].split("/")[0])
    text = " ".join(random.Random(7).choice(WORDS) for _ in range(6000))
    request = urllib.request.Request(
        server.root + "/tokenize",
        json.dumps({"content": text}).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        tokens = json.loads(response.read())["tokens"]
    # warm the server once
    minimal_client(host, port, server.model, tokens, n_prompt, n_gen, 1, 2, 0)
    report: dict = {}
    for c in levels:
        rows = []
        for k in range(rounds):
            if k % 2:  # alternate which client goes first
                theirs = minimal_client(
                    host, port, server.model, tokens, n_prompt, n_gen, c, requests, 200 + k
                )
            before = metrics(server.root)
            ours = llmcli_bench(server.ref, n_prompt, n_gen, c, requests, 100 + k)
            after = metrics(server.root)
            if not k % 2:
                theirs = minimal_client(
                    host, port, server.model, tokens, n_prompt, n_gen, c, requests, 200 + k
                )
            predicted = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
            wall = ours["duration_s"]
            rows.append(
                {
                    "llmcli_output_tps": ours["output_throughput"],
                    "llmcli_request_tps": ours["request_throughput"],
                    "llmcli_median_ttft_ms": ours["median_ttft_ms"],
                    "llmcli_output_tokens": ours["total_output_tokens"],
                    "metrics_tokens_predicted": predicted,
                    "metrics_output_tps": predicted / wall,
                    "minimal_output_tps": theirs["output_throughput"],
                    "minimal_request_tps": theirs["request_throughput"],
                    "minimal_median_ttft_ms": theirs["median_ttft_ms"],
                    "output_ratio": ours["output_throughput"] / theirs["output_throughput"],
                    "request_ratio": ours["request_throughput"] / theirs["request_throughput"],
                }
            )
        med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        med["output_ratio_vs_minimal"] = med["output_ratio"]  # the median of the per-round ratios
        med["request_ratio_vs_minimal"] = med["request_ratio"]
        med["output_ratio_vs_metrics"] = med["llmcli_output_tps"] / med["metrics_output_tps"]
        report[str(c)] = {"rounds": rows, "median": med}
    return report


# -- 3. Ctrl-C --------------------------------------------------------------------------------


def ctrl_c(server, runs: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    rows = []
    for _ in range(runs):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmcli",
                "generate",
                "-m",
                server.ref,
                "-n",
                "2000",
                "--temperature",
                "0",
                "Write a very long story.",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert proc.stdout is not None
        proc.stdout.read(1)  # the first text
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        exited = None
        idle = None
        while exited is None or idle is None:
            now = time.monotonic()
            if exited is None and proc.poll() is not None:
                exited = now - sent
            if idle is None and metrics(server.root).get("llamacpp:requests_processing", 1) == 0:
                idle = now - sent
            if now - sent > 30:
                break
            time.sleep(0.01)
        proc.stdout.read()
        proc.wait()
        rows.append({"exit_s": exited, "server_idle_s": idle, "returncode": proc.returncode})
    return {
        "rows": rows,
        "max_exit_s": max(r["exit_s"] or 99 for r in rows),
        "max_server_idle_s": max(r["server_idle_s"] or 99 for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--requests", type=int, default=16, help="requests per serving case (and overhead runs)"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="alternations of llmcli bench and the minimal client"
    )
    parser.add_argument("-p", type=int, default=128, help="prompt tokens")
    parser.add_argument("-n", type=int, default=64, help="output tokens")
    parser.add_argument("--overhead-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2, help="llama-server threads")
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()

    import tempfile

    from servers import start_llama_server

    with tempfile.TemporaryDirectory() as tmp:
        server = start_llama_server(Path(tmp), slots=4, ctx=8192, threads=args.threads)
        try:
            overhead = client_overhead(server.ref, args.requests, args.overhead_tokens)
            o = overhead
            print(
                f"client overhead, {args.requests} requests of {args.overhead_tokens} tokens: "
                f"llmcli decode / server predicted_per_second median {o['median_ratio']:.4f} "
                f"(range {o['min_ratio']:.4f}-{o['max_ratio']:.4f})",
                flush=True,
            )
            serve = serving(server, args.p, args.n, [1, 2, 4], args.requests, args.rounds)
            print(f"serving p{args.p} n{args.n}, {args.requests} requests, medians of {args.rounds} rounds:")
            print(
                "  c  llmcli out t/s  minimal out t/s  ratio   req/s llmcli  minimal  ratio  "
                "/metrics out t/s  ratio  tokens llmcli=/metrics  ttft ms llmcli/minimal"
            )
            for c, entry in serve.items():
                m = entry["median"]
                same = all(
                    r["llmcli_output_tokens"] == r["metrics_tokens_predicted"] for r in entry["rounds"]
                )
                print(
                    f"  {c}  {m['llmcli_output_tps']:14.1f}  {m['minimal_output_tps']:15.1f}  "
                    f"{m['output_ratio_vs_minimal']:.3f}  {m['llmcli_request_tps']:11.3f}  "
                    f"{m['minimal_request_tps']:7.3f}  {m['request_ratio_vs_minimal']:.3f}  "
                    f"{m['metrics_output_tps']:16.1f}  {m['output_ratio_vs_metrics']:.3f}  {str(same):>22}  "
                    f"{m['llmcli_median_ttft_ms']:.0f}/{m['minimal_median_ttft_ms']:.0f}",
                    flush=True,
                )
            interrupt = ctrl_c(server, 3)
            print(
                f"Ctrl-C: process exit after SIGINT max {interrupt['max_exit_s']:.3f} s; server idle after "
                f"max {interrupt['max_server_idle_s']:.3f} s ({len(interrupt['rows'])} runs)"
            )
        finally:
            server.stop()
    if args.json:
        args.json.write_text(
            json.dumps({"overhead": overhead, "serving": serve, "ctrl_c": interrupt}, indent=2)
        )


if __name__ == "__main__":
    main()
