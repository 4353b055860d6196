"""What does watching a reasoning model's tags cost per token?

One model, one process, the same prompt tokens and greedy decoding, so every runner decodes the
same tokens; runs in rotating order:
- plain: `engine.stream` with nothing watched (a model without reasoning takes this path);
- watched: the path of a reasoning model with a budget: the decode loop's tracker (a splitter fed
  every token, the budget asked before every pick; the budget here is never reached) and the split
  into Reasoning and Token events above it (engine/local.py);
- control: plain again, to show how far two identical runners drift apart in this run.

Decode speed = tokens after the first / time from the first token to the end (wall clock in the
consumer). Reported as medians and the ratios of medians against plain. A micro figure follows:
microseconds per token of the tracker and the splitter alone, over the same text.

The model: Qwen2.5-Coder-0.5B-Instruct with a template that opens a block (tests/qwen.py), so the
output is all reasoning, watched from the first token to the last.

Usage: PYTHONPATH=src:tests python benchmarks/reasoning_overhead.py [--runs 9] [--tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def decode_speed(events) -> tuple[float, str]:
    first = None
    n = 0
    text = []
    for event in events:
        kind = type(event).__name__
        if kind in ("Token", "Reasoning"):
            if first is None:
                first = time.perf_counter()
            n = event.n_tokens
            text.append(event.text)
        elif kind == "Done":
            end = time.perf_counter()
            n = event.stats.completion_tokens
    assert first is not None and n > 1
    return (n - 1) / (end - first), "".join(text)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    import qwen

    from llmcli import reasoning
    from llmcli.contract import EngineOptions, SamplingParams
    from llmcli.engine import local
    from llmcli.engine.llama import LlamaEngine

    path = qwen.with_template(ROOT / "tests" / "data" / "templates" / "qwen2.5-think-preopened.jinja")
    engine = LlamaEngine(str(path), EngineOptions(ctx_size=2048, threads=args.threads))
    fmt = engine.info.reasoning
    assert fmt is not None and fmt.preopened
    prompt = engine.tokenize(
        "<|im_start|>user\nWrite a long story about a lighthouse keeper.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )
    plain = SamplingParams(temperature=0, max_tokens=args.tokens, seed=1)
    budgeted = SamplingParams(temperature=0, max_tokens=args.tokens, seed=1, reasoning_budget=1 << 30)

    def run_plain():
        engine.reset()
        return decode_speed(engine.stream(prompt, plain))

    def run_watched():
        engine.reset()
        events = engine.stream(prompt, budgeted, reasoning="reasoning")
        return decode_speed(local.split_reasoning(events, reasoning.Splitter(fmt, "reasoning")))

    runners = {"plain": run_plain, "watched": run_watched, "control": run_plain}
    names = list(runners)
    speeds: dict[str, list[float]] = {name: [] for name in names}
    texts: dict[str, str] = {}
    run_plain()  # warm-up
    for r in range(args.runs):
        order = names[r % 3 :] + names[: r % 3]
        for name in order:
            speed, text = runners[name]()
            speeds[name].append(speed)
            texts[name] = text
    assert texts["plain"] == texts["watched"], "the same tokens must be decoded"
    median = {name: statistics.median(values) for name, values in speeds.items()}
    print(f"model {path.name}, {args.tokens} tokens, {args.runs} runs each, threads {args.threads}")
    for name in names:
        print(f"  {name:8s} decode {median[name]:7.2f} tok/s (median; min {min(speeds[name]):.2f}, "
              f"max {max(speeds[name]):.2f})")  # fmt: skip
    print(f"  watched / plain  {median['watched'] / median['plain']:.4f}")
    print(f"  control / plain  {median['control'] / median['plain']:.4f}  (the noise floor of this run)")

    # micro: the tracker and the splitter over the same pieces, as the loop and local.py feed them
    pieces = [engine.detokenize([t]) for t in engine.tokenize(texts["plain"])] * 20
    started = time.perf_counter()
    tracker = reasoning.Tracker(fmt, "reasoning", 1 << 30)
    splitter = reasoning.Splitter(fmt, "reasoning")
    for piece in pieces:
        tracker.due()
        tracker.feed(piece)
        splitter.feed(piece)
    per_token_us = (time.perf_counter() - started) / len(pieces) * 1e6
    step_us = 1e6 / median["plain"]
    share = per_token_us / step_us
    print(f"  tracker + splitter alone: {per_token_us:.2f} us a token ({share:.3%} of a decode step)")
    engine.close()


if __name__ == "__main__":
    main()
