"""Replay the adaptive-k policy offline on recorded greedy answers, to tune it without timing noise
(or with a noise model whose seed is fixed, so two policies meet the same machine).

Step 1 (needs the models, about a minute): record each prompt and the plain greedy answer,
    python benchmarks/spec_policy_replay.py record --out /tmp/answers.json
The prompts: benchmarks/speculative.py's copy, nothing-to-copy, repeat and edit prompts, and six
more (reformat JSON, rename a variable in a file, summarise with quotes, explain, count,
translate), each built as `generate` builds it (the chat template for an instruct model, plain
text for a base model).

Step 2 (pure Python, deterministic): replay prompt lookup + `KPolicy` over the recorded answers,
with a table of what a batch of n positions costs relative to one step,
    python benchmarks/spec_policy_replay.py replay /tmp/answers.json
    python benchmarks/spec_policy_replay.py replay /tmp/answers.json --noise --seeds 12

Each replay step proposes from the history, lets the policy choose k, accepts the drafted tokens
while they equal the recorded answer (that is what greedy verification does), charges the cost of
a k+1 batch, and feeds the policy exactly what the engine does: the batch cost, the verification
result, every emitted token (with the check of undrafted proposals, and of the undrafted rest of a
fully accepted draft). Reported: speed relative to plain decoding on the same machine, per answer
and as a geometric mean, next to fixed k and to an oracle that knows the answer and picks each
pass's k for the most tokens per unit of cost (the best any k policy could do with these proposals).

`--noise` models a shared two-core machine: a slow drift of the machine's speed (an AR(1) process on
its logarithm, --drift per step, 0.95 memory: about ±13%), per-batch jitter (--jitter), and
attention that costs more per position as the context grows (--depth, per 1,000 tokens). Plain
decoding is charged under the same noise. The cost tables are shapes measured on a two-core
machine with batch sizes interleaved (`batch_cost` in `--json` shows the engine's in-flight
view); `--costs 1,1.7,2.3,...` gives another. `--requests 1` replays fresh engines (one answer
each; the default 2 keeps a policy across two answers, as a chat does), and `--stored` lets each
policy start from stored batch costs (the table itself), as a fresh engine does after earlier runs.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

# fmt: off
COSTS = {  # relative cost of a batch of 1..17 positions, so a largest k of 16 (the default): all
    # logit rows read, as verification reads them; sizes interleaved, 12 rounds, about 530 cells of an
    # f16 cache, two threads, AMD EPYC (AVX2), 2026-12-04. Gemma's repacked Q4_K weights go through
    # a GEMM four rows at a time, so even sizes cost less than the odd ones below them.
    "gemma3-270m": [1.0, 1.95, 3.03, 2.48, 3.72, 3.03, 4.38, 4.21, 5.37, 5.26, 6.12, 5.77, 6.51, 5.95,
                    7.32, 7.31, 7.82],
    "smollm2-135m": [1.0, 1.62, 2.26, 2.6, 3.15, 3.53, 4.04, 4.34, 5.0, 5.39, 5.95, 6.31, 6.89, 7.21,
                     8.04, 8.11, 8.89],
}
# fmt: on


def more_prompts() -> dict[str, str]:
    data = {
        "name": "llmcli",
        "version": "0.1.0",
        "models": [
            {"id": f"m{i}", "size": i * 1000, "tags": ["gguf", "q4"], "ok": i % 2 == 0} for i in range(6)
        ],
    }
    code = (ROOT / "src" / "llmcli" / "engine" / "sse.py").read_text(encoding="utf-8")[:1200]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")[:1500]
    return {
        "json": "Reformat this JSON with 2-space indentation:\n" + json.dumps(data) + "\n",
        "rename": "Rename the variable `line` to `row` in this code and print the whole file:\n```python\n"
        + code
        + "\n```\n",
        "summary": "Summarize the following document, quoting its key sentences:\n\n" + readme + "\n",
        "explain": "Explain how a transformer language model works, step by step.",
        "numbers": "List the numbers from 1 to 80 separated by commas.",
        "french": "Translate into French: The weather was cold and the sea was rough, so the keeper "
        "stayed inside and wrote letters to her sister.",
    }


def record(out: Path, tokens: int) -> None:
    import speculative

    from llmcli.contract import Done, EngineOptions, SamplingParams
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub import default_model

    answers = {}
    for name in COSTS:
        engine = LlamaEngine(str(default_model.model_path(name)), EngineOptions(ctx_size=4096))
        texts = {  # the benchmark's two prompts are completions, as benchmarks/speculative.py runs them
            "copy": speculative.copy_prompt(),
            "nothing-to-copy": speculative.NOTHING_TO_COPY_FOR.get(name, speculative.NOTHING_TO_COPY),
        }
        for label, text in {**more_prompts(), **speculative.copy_requests()}.items():
            texts[label] = speculative.chat_prompt(engine, text)
        for label, text in texts.items():
            engine.reset()
            ids = engine.tokenize(text, add_bos=engine.add_bos)
            events = engine.stream(ids, SamplingParams(temperature=0, max_tokens=tokens))
            done = next(e for e in events if isinstance(e, Done))
            answers[f"{name}/{label}"] = {"prompt": list(ids), "answer": list(done.tokens)}
        engine.close()
    out.write_text(json.dumps(answers))
    print(f"recorded {len(answers)} answers in {out}")


class Machine:
    """What a batch costs: the table, and with noise the drift, jitter and depth of a busy machine."""

    def __init__(self, costs: list[float], seed: int | None, drift: float, jitter: float, depth: float):
        self.costs, self.depth = costs, depth
        self.rng = random.Random(seed) if seed is not None else None
        self.drift, self.jitter, self.log_speed = drift, jitter, 0.0

    def batch(self, positions: int, context: int) -> float:
        cost = self.costs[positions - 1]
        if self.rng is None:
            return cost
        self.log_speed = 0.95 * self.log_speed + self.rng.gauss(0, self.drift)
        cost *= 1 + self.depth * positions * context / 1000
        return cost * math.exp(self.log_speed + self.rng.gauss(0, self.jitter))


def replay(prompt: list[int], answer: list[int], machine: Machine, policy, k_max: int = 8,
           ngram: tuple[int, int] | None = None) -> tuple[float, int, dict[int, int]]:  # fmt: skip
    """Seconds (cost units) to produce the answer, passes, and how often each k was chosen."""
    from llmcli.engine.speculation.proposal import NgramProposer

    proposer = NgramProposer(*ngram) if ngram else NgramProposer()
    proposer.extend(prompt)
    policy.shadows = []
    i = passes = 0
    spent = 0.0
    chosen: dict[int, int] = {}
    while i < len(answer):
        proposal, n = proposer.propose(k_max)
        source = ("lookup", n)
        k = policy.choose(source, len(proposal), watched=True) if proposal else 0
        if k == 0 and proposal:
            policy.watch(source, proposal)
        draft, tail = proposal[:k], proposal[k:]
        chosen[k] = chosen.get(k, 0) + 1
        kept = agreed(draft, answer, i)
        seconds = machine.batch(len(draft) + 1, len(prompt) + i)
        policy.observe_batch(len(draft) + 1, seconds)
        if draft:
            policy.observe_draft(source, len(draft), kept)
        for j, token in enumerate(answer[i : i + kept + 1]):
            if j == kept and draft and kept == len(draft) and tail:  # as the engine: after the batch
                policy.watch(source, tail, offset=kept)
            proposer.append(token)
            policy.emitted(token)
        i += kept + 1
        passes += 1
        spent += seconds
    return spent, passes, dict(sorted(chosen.items()))


def agreed(tokens: list[int], answer: list[int], i: int) -> int:
    """How many of `tokens` the answer has from position `i` on: what greedy verification keeps."""
    kept = 0
    while kept < len(tokens) and i + kept < len(answer) and tokens[kept] == answer[i + kept]:
        kept += 1
    return kept


def plain_seconds(prompt: list[int], answer: list[int], machine: Machine) -> float:
    return sum(machine.batch(1, len(prompt) + i) for i in range(len(answer)))


def oracle_speed(prompt: list[int], answer: list[int], costs: list[float], k_max: int = 8) -> float:
    """Speed relative to plain decoding (no noise) of a policy that knows the answer: the same
    proposals, and at each pass the k that gives the most tokens per unit of cost, counting only
    the proposed tokens that will be accepted. What any policy choosing k from the past could reach
    at best with these proposals and costs."""
    from llmcli.engine.speculation.proposal import NgramProposer

    proposer = NgramProposer()
    proposer.extend(prompt)
    i, spent = 0, 0.0
    while i < len(answer):
        proposal, _ = proposer.propose(k_max)
        good = agreed(proposal, answer, i)
        k = max(range(good + 1), key=lambda k: ((k + 1) / costs[k], -k))
        spent += costs[k]
        for token in answer[i : i + k + 1]:
            proposer.append(token)
        i += k + 1
    return len(answer) * costs[0] / spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--tokens", type=int, default=192)
    rep = sub.add_parser("replay")
    rep.add_argument("answers", type=Path)
    rep.add_argument("--costs", help="relative costs of 1..k+1 positions, comma-separated (k: the largest)")
    rep.add_argument("--requests", type=int, default=2, help="answers replayed on one policy, in a row")
    rep.add_argument("--noise", action="store_true", help="a busy machine (see the module's help)")
    rep.add_argument("--stored", action="store_true", help="the policy starts from stored batch costs")
    rep.add_argument("--seeds", type=int, default=12, help="noise seeds averaged over")
    rep.add_argument("--drift", type=float, default=0.04)
    rep.add_argument("--jitter", type=float, default=0.05)
    rep.add_argument("--depth", type=float, default=0.02)
    rep.add_argument("--only", help="answers whose key contains this")
    args = ap.parse_args()
    if args.command == "record":
        record(args.out, args.tokens)
        return

    from llmcli.engine.speculation.proposal import KPolicy

    seeds: list[int | None] = list(range(args.seeds)) if args.noise else [None]
    ratios = []
    for key, item in json.loads(args.answers.read_text()).items():
        if args.only and args.only not in key:
            continue
        model = key.split("/")[0]
        costs = [float(x) for x in args.costs.split(",")] if args.costs else COSTS[model]
        k_max = len(costs) - 1
        prompt, answer = item["prompt"], item["answer"]

        def speed(make_policy, k: int, prompt=prompt, answer=answer, costs=costs):
            """Mean speed over seeds (plain = 1.0 on the same machine), passes and k of the last."""
            values = []
            for seed in seeds:
                policy = make_policy()
                for request in range(args.requests):
                    s = None if seed is None else seed * 1000 + request
                    noise = (args.drift, args.jitter, args.depth)
                    spent, passes, chosen = replay(prompt, answer, Machine(costs, s, *noise), policy, k)
                    values.append(plain_seconds(prompt, answer, Machine(costs, s, *noise)) / spent)
            return statistics.mean(values), passes, chosen

        def adaptive_policy(k_max=k_max, costs=costs) -> KPolicy:
            policy = KPolicy(k_max=k_max)
            if args.stored:  # as a fresh engine finds the costs earlier runs stored
                policy.stored = {n + 1: c / costs[0] for n, c in enumerate(costs)}
            return policy

        adaptive = speed(adaptive_policy, k_max)
        sizes = sorted({1, 2, 4, 8, k_max})
        fixed = {k: speed(lambda k=k: KPolicy(k_max=k, k_min=k, adaptive=False), k)[0] for k in sizes}
        ratios.append(adaptive[0])
        print(f"{key:30} adaptive {adaptive[0]:.3f}x plain  {adaptive[1]} passes  k chosen {adaptive[2]}")
        print(f"{'':30} fixed    " + "  ".join(f"k={k}: {s:.3f}x" for k, s in fixed.items()))
        best = oracle_speed(prompt, answer, costs, k_max)
        print(f"{'':30} oracle   {best:.3f}x (adaptive reaches {adaptive[0] / best:.0%} of it; no noise)")
    if ratios:
        geo = math.exp(statistics.mean(math.log(r) for r in ratios))
        print(
            f"adaptive over {len(ratios)} answers: geometric mean {geo:.3f}x plain, lowest {min(ratios):.3f}x"
        )


if __name__ == "__main__":
    main()
