"""Chat: time to first token per turn with and without KV-cache reuse, and the readout's cost.

1. An 8-turn scripted conversation on the default model (greedy, answers capped so that turn 8
   carries about 1,500 tokens of history). Run twice side by side: with the cache reused (what
   chat does) and with the cache reset before every turn (what a tool without reuse does).
   Reported: TTFT of turn 8 / TTFT of turn 1 for each.
2. Decode speed of the same reply streamed through the live readout (status line redrawn on a
   timer, writing to /dev/null as a terminal would receive it) versus the plain `generate` path.

Usage: python benchmarks/chat_reuse.py [--turns 8] [--answer-tokens 160] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

QUESTIONS = [
    "Tell me about the ocean and the creatures that live in its deepest parts.",
    "Now describe the mountains and the rivers that flow down from them to the sea.",
    "What do sailors say about storms in the southern seas in the old stories?",
    "Describe a harbour town at dawn, with its fishermen and their boats and nets.",
    "How do tides work, and why are there two high tides almost every single day?",
    "Tell me a story about a lighthouse keeper who lived alone on a rocky island.",
    "What is the difference between a sea, an ocean, a bay and a gulf, exactly?",
    "Summarize everything we have talked about so far in a few short sentences.",
]


def conversation_ttfts(engine, turns: int, answer_tokens: int, reuse: bool) -> list[dict]:
    from llmcli.contract import SamplingParams
    from llmcli.conversation import Conversation
    from llmcli.loader import Loaded
    from llmcli.repl.chat_session import ChatSession

    engine.reset()
    params = SamplingParams(temperature=0, max_tokens=answer_tokens, seed=1)
    session = ChatSession(Loaded(engine, "default", engine.path), params, Conversation())
    rows = []
    for i in range(turns):
        if not reuse:
            engine.reset()
        result = session.send(QUESTIONS[i % len(QUESTIONS)], lambda event: None)
        s = result.done.stats
        rows.append(
            {"turn": i + 1, "prompt": s.prompt_tokens, "cached": s.cached_tokens, "ttft_ms": s.ttft_ms}
        )
    return rows


def decode_rate(engine, sink_factory, tokens: int) -> float:
    from llmcli.contract import SamplingParams, Token

    engine.reset()
    prompt = engine.tokenize("Once upon a time, by the sea,", special=False, add_bos=True)
    sink = sink_factory()
    sink.start()
    stamps = []
    for event in engine.stream(prompt, SamplingParams(temperature=0, max_tokens=tokens, seed=1)):
        sink(event)
        if isinstance(event, Token):
            stamps.append(time.perf_counter())
    sink.stop()
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--answer-tokens", type=int, default=160)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--decode-tokens", type=int, default=128)
    args = ap.parse_args()

    from llmcli.contract import EngineOptions
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub import default_model
    from llmcli.render.stream import PlainSink
    from llmcli.repl.readout import LiveReadout

    engine = LlamaEngine(default_model.model_path("gemma3-270m"), EngineOptions(ctx_size=4096))
    conversation_ttfts(engine, 2, 8, reuse=True)  # warm-up: first-use costs stay out of turn 1
    with_reuse = conversation_ttfts(engine, args.turns, args.answer_tokens, reuse=True)
    without = conversation_ttfts(engine, args.turns, args.answer_tokens, reuse=False)

    devnull = open("/dev/null", "w")  # noqa: SIM115
    plain, live = [], []
    decode_rate(engine, lambda: PlainSink(devnull), 16)  # warm-up
    for _ in range(args.runs):
        plain.append(decode_rate(engine, lambda: PlainSink(devnull), args.decode_tokens))
        live.append(decode_rate(engine, lambda: LiveReadout(devnull, columns=100), args.decode_tokens))
    report = {
        "with_reuse": with_reuse,
        "without_reuse": without,
        "ttft_ratio_turn_last_over_first_with_reuse": with_reuse[-1]["ttft_ms"] / with_reuse[0]["ttft_ms"],
        "ttft_ratio_turn_last_over_first_without_reuse": without[-1]["ttft_ms"] / without[0]["ttft_ms"],
        "decode_tok_s_plain": plain,
        "decode_tok_s_live_readout": live,
        "readout_over_plain": statistics.median(live) / statistics.median(plain),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
