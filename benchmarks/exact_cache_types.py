"""Which KV cache type to pick for exact speculation on long prompts on the CPU, measured side by side.

With an f16 (or f32) cache, llama.cpp's CPU flash attention computes a single query over 512 or
more cells by splitting the keys across threads and several queries without splitting, so
`--spec-exact` finds no batch of two bit-identical to one-token steps there and drafts nothing.
The split is taken only when K and V are f16 or f32 of one type (ggml-cpu ops.cpp,
`use_split_kv_path`), so a bf16 cache (the size of f16) and a q8_0 cache (half of it) take the
same path for a step and a batch. This script runs, on the copy-heavy prompt, in one shuffled
sitting per model:

- plain decoding with an f16, a bf16 and a q8_0 cache (what each type costs plain decoding), and
- prompt lookup with the exact default (`--spec-exact`) on each of them,

and reports each runner's median decode speed, its ratio to plain f16 and to plain decoding on
the same cache type (medians of ratios within a round), what it drafted and accepted, and
whether its text is that cache type's plain text at every round.

Run: python benchmarks/exact_cache_types.py [--models gemma3-270m,smollm2-135m] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TYPES = ("f16", "bf16", "q8_0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gemma3-270m,smollm2-135m")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--types", default=",".join(TYPES), help="KV cache types, comma-separated")
    ap.add_argument("--json", type=Path, help="also write every measurement here")
    args = ap.parse_args()

    sys.path.insert(0, str(HERE))
    import speculative as bench  # the copy prompt, the chat template and the measured run

    from llmcli.contract import EngineOptions, SpecOptions
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub import default_model

    types = args.types.split(",")
    results: dict = {}
    for name in args.models.split(","):
        path = str(default_model.model_path(name))

        def engine(kv_type: str, spec: SpecOptions | None = None, path: str = path) -> LlamaEngine:
            kv = None if kv_type == "f16" else kv_type
            options = EngineOptions(ctx_size=4096, threads=args.threads, flash_attn=True, type_k=kv,
                                    type_v=kv, speculative=spec or SpecOptions())  # fmt: skip
            return LlamaEngine(path, options)

        runners = {}
        for t in types:
            runners[f"plain {t}"] = engine(t)
            runners[f"lookup {t}"] = engine(t, SpecOptions(kind="lookup"))
        prompt = bench.prompts_for(name)["copy"]
        calls = {
            key: (lambda r=r, p=prompt: bench.llmcli_run(r, p, args.tokens)) for key, r in runners.items()
        }
        rows = bench.shuffled_rounds(calls, args.rounds)
        for r in runners.values():
            r.close()
        results[name] = rows
        report(name, rows, types)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


def report(name: str, rows: dict[str, list[dict]], types: list[str]) -> None:
    from speculative import paired

    print(f"\n{name} · copy prompt · median of {len(rows['plain f16'])} rounds")
    print("| runner | tok/s | vs plain f16 | vs plain, same type | drafted / accepted | text = plain's |")
    print("| --- | --- | --- | --- | --- | --- |")
    for key, xs in rows.items():
        kind, kv_type = key.split()
        plain = rows[f"plain {kv_type}"]
        tps = statistics.median(x["tps"] for x in xs)

        def ratio(ys: list[dict], xs: list[dict] = xs) -> str:
            r = paired(xs, ys)
            return f"{statistics.median(r):.2f}× ({min(r):.2f}–{max(r):.2f})" if r else "n/a"

        same = sum(x["text"] == p["text"] for x, p in zip(xs, plain, strict=True))
        drafted = sum(x["drafted"] for x in xs) // len(xs)
        accepted = sum(x["accepted"] for x in xs) // len(xs)
        own = ratio(plain) if kind != "plain" else "1"
        print(f"| {key} | {tps:.1f} | {ratio(rows['plain f16'])} | {own} | {drafted} / {accepted} | "
              f"{same}/{len(xs)} |")  # fmt: skip


if __name__ == "__main__":
    main()
