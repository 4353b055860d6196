"""llmcli's engine on llama-lookup's own batches: is a gap between the two tools the engine's, or
the choice of what to draft?

llama-lookup is run once with -v, and the drafts it verified (its `drafted [...]` debug lines, one
per target pass) are read back. Then, side by side in a shuffled order each round, greedy, on the
same threads:
- llama-lookup: llama.cpp's tool, `-n N --temp 0 -t T --spec-draft-n-max K`, as
  benchmarks/speculative.py runs it;
- same-batches: llmcli's engine verifying exactly those drafts, one per target pass, in the same
  order (a scripted proposer, fixed k). Where the two answers are the same (the accepted counts
  say so), both tools run the same batches, of the same sizes, on the same tokens: a difference in
  speed is the engine's (the per-token loop and the Python around llama_decode), not the drafts';
- lookup-fast: llmcli's own prompt lookup with adaptive k and `--no-spec-exact`, on the same
  answer: what its choice of drafts gives.

Speeds are counted as benchmarks/speculative.py counts them; each ratio is the median of the
ratios within a round, with its range, and the geometric mean over the rounds.

    flock /tmp/cpu.lock python benchmarks/spec_schedule.py --rounds 12
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

DRAFTED = re.compile(r"drafted \[ ?(.*?) ?\]\n", re.S)  # one debug line (or more: a piece may hold \n)
TOKEN_ID = re.compile(r"':(\d+)(?=, '|$)", re.S)  # 'piece':id, the pieces quoted


def drafts_from_log(log: str) -> list[list[int]]:
    """The drafts llama-lookup verified, one per target pass, from its -v log. The first debug
    line shows the empty draft before the first sample (the prompt's own logits give it): it is
    no pass. ValueError when the log has none or they do not add up to its n_drafted."""
    blocks = DRAFTED.findall(log)
    if not blocks:
        raise ValueError("no 'drafted [...]' lines: run llama-lookup with -v")
    drafts = [[int(x) for x in TOKEN_ID.findall(block.strip())] for block in blocks[1:]]
    total = re.findall(r"n_drafted\s*=\s*(\d+)", log)
    if total and sum(map(len, drafts)) != int(total[-1]):
        raise ValueError(f"read {sum(map(len, drafts))} drafted tokens, llama-lookup drafted {total[-1]}")
    return drafts


class ScriptedProposer:
    """Stands in for prompt lookup: each call proposes the next of the given drafts, so the
    engine verifies them pass for pass (the engine asks once a pass). Past the last, nothing."""

    def __init__(self, drafts: list[list[int]]) -> None:
        self.drafts = drafts
        self.calls = 0

    def extend(self, tokens: list[int]) -> None:
        pass

    def append(self, token: int) -> None:
        pass

    def propose(self, k: int) -> tuple[list[int], int]:
        draft = self.drafts[self.calls] if self.calls < len(self.drafts) else []
        self.calls += 1
        return list(draft[:k]), 4 if draft else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompt", default="copy", help="copy, repeat, edit, nothing-to-copy or loop")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT / "tests"))
    import llamacpp_tools
    import speculative

    import llmcli.engine.speculation.proposal as spec_module
    from llmcli.contract import EngineOptions, SpecOptions
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub import default_model

    path = str(default_model.model_path(args.model))
    k, n = args.draft_max, args.tokens
    engine_options = {"ctx_size": 4096, "threads": args.threads}
    fast = SpecOptions(kind="lookup", draft_max=k, exact=False)
    own = LlamaEngine(path, EngineOptions(**engine_options, speculative=fast))
    prompt = speculative.prompts_for(args.model)[args.prompt]
    if args.prompt in speculative.CHAT_REQUESTS:
        prompt = speculative.chat_prompt(own, prompt)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt + "\n")  # llama.cpp's -f drops one trailing newline: the same prompt
    tool = str(llamacpp_tools.ensure("llama-lookup")["llama-lookup"])
    argv = [tool, "-m", path, "-f", f.name, "-n", str(n), "--temp", "0", "-t", str(args.threads),
            "--spec-draft-n-max", str(k), *llamacpp_tools.weights_args("llama-lookup")]  # fmt: skip
    traced = subprocess.run([*argv, "-v"], capture_output=True, text=True, timeout=900)
    drafts = drafts_from_log(traced.stderr + traced.stdout)
    print(f"llama-lookup's schedule: {len(drafts)} passes, drafts of {[len(d) for d in drafts]}")

    scripted = SpecOptions(kind="lookup", draft_max=k, exact=False, adaptive=False)
    same = LlamaEngine(path, EngineOptions(**engine_options, speculative=scripted))
    real = spec_module.NgramProposer

    def same_batches() -> dict:
        # each request makes its proposer anew, from the module's name: a scripted one for this run
        spec_module.NgramProposer = lambda *a, **kw: ScriptedProposer(drafts)  # type: ignore[misc,assignment]
        try:
            return speculative.llmcli_run(same, prompt, n, k)
        finally:
            spec_module.NgramProposer = real

    calls = {
        "llama-lookup": lambda: speculative.tool_run(argv, prompt),
        "same-batches": same_batches,
        "lookup-fast": lambda: speculative.llmcli_run(own, prompt, n, k),
    }
    rows = speculative.shuffled_rounds(calls, args.rounds)
    reference = rows["llama-lookup"]
    print(f"\n{args.model} · {args.prompt} prompt · {args.rounds} rounds, k={k}, -t {args.threads}")
    print(f"  {'runner':<14} {'tok/s':>7} {'vs llama-lookup':>20} {'geo mean':>9} {'accepted/drafted':>17} "
          f"{'passes':>7}")  # fmt: skip
    for key, xs in rows.items():
        ratios = speculative.paired(xs, reference)
        geo = math.exp(statistics.mean(map(math.log, ratios))) if ratios else 0.0
        spread = f"{statistics.median(ratios):.3f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        accepted = statistics.median(x["accepted"] for x in xs)
        share = f"{accepted:.0f}/{statistics.median(x['drafted'] for x in xs):.0f}"
        passes = [x["passes"] for x in xs if x.get("passes")]
        print(f"  {key:<14} {statistics.median(x['tps'] for x in xs):>7.1f} {spread:>20} {geo:>8.3f}x "
              f"{share:>17} {statistics.median(passes) if passes else len(drafts):>7}")  # fmt: skip
    apart = sum(x["accepted"] != y["accepted"] for x, y in zip(rows["same-batches"], reference, strict=True))
    if apart:
        print(f"  the answers differ in {apart} of {args.rounds} rounds: not the same batches there")
    same.close()
    own.close()


if __name__ == "__main__":
    main()
