"""Replay the adaptive-k policy offline on recorded greedy answers, to tune it without timing noise.

Step 1 (needs the models, a few seconds each): record each prompt and the plain greedy answer,
    python benchmarks/spec_policy_replay.py record --out /tmp/answers.json
Step 2 (pure Python, deterministic): replay prompt lookup + `KPolicy` over the recorded answer,
with a table of what a batch of n positions costs relative to one step,
    python benchmarks/spec_policy_replay.py replay /tmp/answers.json

Each replay step proposes from the history, lets the policy choose k, accepts the drafted tokens
while they equal the recorded answer (that is what greedy verification does), charges the cost of
a k+1 batch, and feeds the policy exactly what the engine would: the batch cost, the verification
result, every emitted token (with the check of undrafted proposals). Reported: effective speed in
plain-step units (1.0 = plain decoding), passes, and how often each k was chosen, next to fixed k.
The default cost tables are shapes measured on a two-core machine (`batch_cost` in `--json`);
`--costs 1,1.7,2.3,...` gives another.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

COSTS = {  # relative cost of a batch of 1..9 positions
    "gemma3-270m": [1.0, 1.7, 2.3, 2.5, 3.0, 3.5, 4.0, 4.5, 5.1],
    "smollm2-135m": [1.0, 1.35, 1.6, 1.8, 2.0, 2.2, 2.4, 2.6, 2.8],
}


def record(out: Path, tokens: int) -> None:
    import speculative

    from llmcli.engine.base import Done, EngineOptions, SamplingParams
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub import default_model

    answers = {}
    for name in COSTS:
        engine = LlamaEngine(str(default_model.model_path(name)), EngineOptions(ctx_size=4096))
        prompts = {
            "copy": speculative.copy_prompt(),
            "nothing-to-copy": speculative.NOTHING_TO_COPY_FOR.get(name, speculative.NOTHING_TO_COPY),
        }
        for label, prompt in prompts.items():
            engine.reset()
            ids = engine.tokenize(prompt, add_bos=engine.add_bos)
            events = engine.stream(ids, SamplingParams(temperature=0, max_tokens=tokens))
            done = next(e for e in events if isinstance(e, Done))
            answers[f"{name}/{label}"] = {"prompt": list(ids), "answer": list(done.tokens)}
        engine.close()
    out.write_text(json.dumps(answers))
    print(f"recorded {len(answers)} answers in {out}")


def replay(prompt: list[int], answer: list[int], costs: list[float], policy, k_max: int = 8,
           ngram: tuple[int, int] = (3, 1)) -> tuple[float, int, dict[int, int]]:  # fmt: skip
    from llmcli.engine.spec import NgramProposer

    proposer = NgramProposer(*ngram)
    proposer.extend(prompt)
    policy.shadows = []
    i = passes = 0
    spent = 0.0
    chosen: dict[int, int] = {}
    while i < len(answer):
        draft, n = proposer.propose(k_max)
        source = ("lookup", n)
        k = policy.choose(source, len(draft)) if draft else 0
        if k == 0 and draft:
            policy.watch(source, draft)
        draft, tail = draft[:k], draft[k:]
        chosen[k] = chosen.get(k, 0) + 1
        kept = 0
        while kept < len(draft) and i + kept < len(answer) and draft[kept] == answer[i + kept]:
            kept += 1
        policy.observe_batch(len(draft) + 1, costs[len(draft)])
        if draft:
            policy.observe_draft(source, len(draft), kept)
        for j, token in enumerate(answer[i : i + kept + 1]):
            if j == kept and kept == len(draft) and draft and tail:  # as the engine: after the batch
                policy.watch(source, tail, offset=kept)
            proposer.append(token)
            policy.emitted(token)
        i += kept + 1
        passes += 1
        spent += costs[len(draft)]
    return len(answer) / spent, passes, dict(sorted(chosen.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--tokens", type=int, default=256)
    rep = sub.add_parser("replay")
    rep.add_argument("answers", type=Path)
    rep.add_argument("--costs", help="relative costs of 1..9 positions, comma-separated")
    rep.add_argument("--requests", type=int, default=2, help="answers replayed on one policy, in a row")
    args = ap.parse_args()
    if args.command == "record":
        record(args.out, args.tokens)
        return

    from llmcli.engine.spec import KPolicy

    for key, item in json.loads(args.answers.read_text()).items():
        model = key.split("/")[0]
        costs = [float(x) for x in args.costs.split(",")] if args.costs else COSTS[model]
        k_max = len(costs) - 1
        policy = KPolicy(k_max=k_max)
        runs = [replay(item["prompt"], item["answer"], costs, policy, k_max) for _ in range(args.requests)]
        fixed = {
            k: replay(item["prompt"], item["answer"], costs, KPolicy(k_max=k, k_min=k, adaptive=False), k)[0]
            for k in (1, 2, 4, k_max)
        }
        print(key)
        for speed, passes, chosen in runs:
            print(f"  adaptive  {speed:.3f}x plain  {passes} passes  k chosen {chosen}")
        print("  fixed k   " + "  ".join(f"k={k}: {s:.3f}x" for k, s in fixed.items()))


if __name__ == "__main__":
    main()
