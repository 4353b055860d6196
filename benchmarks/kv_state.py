"""Saved KV states (issue 15): warm resume, --prompt-cache in a pipeline, and the cost of saving.

1. Resume: a Gemma chat whose history is about 3,000 tokens. Side by side, `--runs` times:
   - running: the next turn of a chat process that already holds the history in its cache;
   - resumed: a fresh engine that restores the state saved after the previous turn (the TTFT
     includes reading and checking the file);
   - re-prefill: a fresh engine without a state (what `--resume` did before).
   Also the peak memory the restore adds, against the state file's size.
2. Pipeline: `--calls` `llmcli generate` processes sharing a 2,000-token document, each with its
   own question, with `--prompt-cache FILE` and without, alternating: total wall time and the
   share of prompt tokens reused.
3. Saving after each turn, for 1k and 4k tokens of history: milliseconds and bytes per save.

Usage: PYTHONPATH=src python benchmarks/kv_state.py [--runs 3] [--calls 20] [--parts 1,2,3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PARAGRAPH = (
    "The river rises in the hills above the town, where three streams meet in a wide pool under "
    "the alders. In spring the snow melts and the water runs fast and brown past the old mill, the "
    "bridge and the market square, and the children count the logs that float down to the sea. "
)


def gemma() -> str:
    from llmcli.hub.default_model import model_path

    return str(model_path("gemma3-270m"))


def engine(path: str, ctx: int):
    from llmcli.contract import EngineOptions
    from llmcli.engine.llama import LlamaEngine

    return LlamaEngine(path, EngineOptions(ctx_size=ctx, threads=2))


def session(eng, messages):
    from llmcli.contract import SamplingParams
    from llmcli.conversation import Conversation, Message
    from llmcli.loader import Loaded
    from llmcli.repl.chat_session import ChatSession

    conv = Conversation(messages=[Message(role, text) for role, text in messages])
    params = SamplingParams(temperature=0, max_tokens=16, seed=1)
    return ChatSession(Loaded(eng, "gemma3-270m", Path(eng.path)), params, conv)


def history(eng, target: int) -> list[tuple[str, str]]:
    messages: list[tuple[str, str]] = []
    i = 0
    while True:
        messages += [("user", f"Question {i}: tell me more. " + PARAGRAPH * 2), ("assistant", PARAGRAPH * 3)]
        s = session(eng, messages)
        if len(s.render_tokens(s.conversation.template_messages())) >= target:
            return messages
        i += 1


def rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def part_resume(path: str, runs: int) -> None:
    from llmcli import kvstore

    ctx = 4096
    probe = engine(path, ctx)
    msgs = history(probe, 3000)
    probe.close()
    rows: dict[str, list[float]] = {"running": [], "resumed": [], "re-prefill": []}
    extra_mb: list[float] = []
    state_bytes = 0
    tmp = Path(tempfile.mkdtemp())
    for _ in range(runs):
        # the running chat: turn N (the whole history), then turn N+1 from the cache
        a = engine(path, ctx)
        s = session(a, msgs)
        s.send("What happened at the mill?", lambda e: None)
        saved = kvstore.save(a, tmp / "s.kv", cap=None, reload=True)  # as a session chat does
        state_bytes = saved.bytes
        turn_n = list(s.conversation.messages)
        r = s.send("And at the bridge?", lambda e: None)
        rows["running"].append(r.done.stats.ttft_ms)
        prompt_tokens, cached_running = r.done.stats.prompt_tokens, r.done.stats.cached_tokens
        a.close()
        # a fresh process that restores the state saved after turn N
        b = engine(path, ctx)
        s = session(b, [(m.role, m.content) for m in turn_n])
        s.kv_restore = tmp / "s.kv"
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
        base = rss_kb("VmRSS")
        r = s.send("And at the bridge?", lambda e: None)
        extra_mb.append((rss_kb("VmHWM") - base) / 1024)
        rows["resumed"].append(r.done.stats.ttft_ms)
        cached_resumed = r.done.stats.cached_tokens
        b.close()
        # today's --resume: a fresh process that prefills everything
        c = engine(path, ctx)
        s = session(c, [(m.role, m.content) for m in turn_n])
        r = s.send("And at the bridge?", lambda e: None)
        rows["re-prefill"].append(r.done.stats.ttft_ms)
        c.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(
        f"resume: history {prompt_tokens} prompt tokens; reused: running {cached_running}, "
        f"resumed {cached_resumed}; state file {state_bytes / 1e6:.1f} MB; {runs} runs, medians"
    )
    for k, v in med.items():
        print(f"  {k:11s} ttft {v:8.1f} ms   ({', '.join(f'{x:.0f}' for x in rows[k])})")
    print(f"  resumed / running {med['resumed'] / med['running']:.2f}x; "
          f"re-prefill / resumed {med['re-prefill'] / med['resumed']:.1f}x")  # fmt: skip
    print(f"  peak memory added by the restoring turn: {max(extra_mb):.0f} MB "
          f"(state file {state_bytes / 2**20:.0f} MB; budget file + 300 MB)")  # fmt: skip


def part_pipeline(path: str, calls: int) -> None:
    tmp = Path(tempfile.mkdtemp())
    probe = engine(path, 4096)
    doc = ""
    while len(probe.tokenize(doc)) < 2000:
        doc += PARAGRAPH
    doc_tokens = len(probe.tokenize(doc))
    probe.close()
    env = dict(os.environ, LLMCLI_CACHE_DIR=str(tmp / "cache"))
    base = [sys.executable, "-m", "llmcli", "generate", "-m", path, "--raw", "-t", "2", "--temperature", "0",
            "-n", "8", "-c", "4096", "--json"]  # fmt: skip
    totals = {"without": 0.0, "with": 0.0}
    usage = {"without": [0, 0], "with": [0, 0]}
    for i in range(calls):
        prompt = doc + f"\n\nQuestion {i}: what does the river carry past the mill, in {i + 2} words?"
        for mode in ("with", "without") if i % 2 else ("without", "with"):
            extra = ["--prompt-cache", str(tmp / "doc.kv")] if mode == "with" else []
            started = time.perf_counter()
            out = subprocess.run(base + extra + [prompt], capture_output=True, text=True, env=env, check=True)
            totals[mode] += time.perf_counter() - started
            u = json.loads(out.stdout)["usage"]
            usage[mode][0] += u["cached_tokens"]
            usage[mode][1] += u["prompt_tokens"]
    print(f"pipeline: {calls} generate calls sharing a {doc_tokens}-token document, alternating")
    for mode in ("without", "with"):
        cached, prompt = usage[mode]
        print(f"  {mode:7s} --prompt-cache: total {totals[mode]:6.1f} s, reused {cached}/{prompt} prompt "
              f"tokens ({cached / prompt:.0%})")  # fmt: skip
    print(f"  speed-up {totals['without'] / totals['with']:.2f}x")


def part_save(path: str, runs: int) -> None:
    from llmcli import kvstore
    from llmcli.contract import SamplingParams

    tmp = Path(tempfile.mkdtemp())
    print("saving after a turn (Gemma, f16 KV):")
    for n in (1000, 4000):
        e = engine(path, 4608)
        text = PARAGRAPH * (n // 50)
        tokens = e.tokenize(text, add_bos=True)[:n]
        started = time.perf_counter()
        list(e.stream(tokens, SamplingParams(temperature=0, max_tokens=16)))
        turn_ms = (time.perf_counter() - started) * 1000
        times, size = [], 0
        for _ in range(runs):
            saved = kvstore.save(e, tmp / f"s{n}.kv", cap=None, reload=True)
            times.append(saved.ms)
            size = saved.bytes
        ms = statistics.median(times)
        print(f"  {n:5d} tokens of history: {ms:6.1f} ms per save (median of {runs}), {size / 1e6:6.1f} MB "
              f"written; the turn that produced it took {turn_ms:.0f} ms")  # fmt: skip
        e.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--parts", default="1,2,3")
    args = ap.parse_args()
    path = gemma()
    parts = set(args.parts.split(","))
    if "1" in parts:
        part_resume(path, args.runs)
    if "3" in parts:
        part_save(path, args.runs)
    if "2" in parts:
        part_pipeline(path, args.calls)


if __name__ == "__main__":
    main()
