"""Speculative decoding, side by side in one run: effective decode speed and acceptance.

For each model (the bundled Gemma 3 270M and SmolLM2-135M-Instruct) and each prompt (a copy-heavy
one: a ~2,000-character source file followed by "the same file again, unchanged:"; and one with
nothing to copy; with `--prompts repeat,edit`, the same file in a request to repeat it, or to fix
a typo and print it again; and with `--prompts loop`, a chat request whose greedy answer loops with
a period shorter than k), in a shuffled order each round over several rounds, on the same threads,
greedy:
- plain: llmcli's engine, no speculation;
- lookup: llmcli's engine, prompt lookup with every default (adaptive k decided by the batch costs
  calibrated once and stored, verification in any batch size that pays);
- lookup-exact: the same with --spec-exact (only batch sizes bit-identical to one-token steps);
- lookup-cold: the default on an engine loaded for that one answer, as one `llmcli generate`
  runs: the stored cost table and no acceptance evidence (the others keep theirs from the warm-up
  and the rounds before, as a chat session does);
- lookup-first: the same with an empty cache dir, as the first run on a machine: it decides by the
  assumed costs (nothing is measured before its first token; `generate` measures after the
  answer, which is not timed here); `load_s` is its whole load, as a user waits for it;
- llama-lookup: llama.cpp's own prompt-lookup tool, built from the installed release's vendored
  tree (tests/llamacpp_tools.py), `-n N --temp 0 -t T --spec-draft-n-max K` with llmcli's largest
  k (16 by default; `--draft-max`);
- llama-lookup-8: the same at k=8 (what earlier sittings compared with);
- llama-lookup-default: the same without `--spec-draft-n-max` (its default k, 3 in 0.3.36);
- self-draft: llama.cpp's llama-speculative-simple with the target as its own draft (its
  acceptance at temperature 0 should be 100%), and llmcli's `--spec-type draft` the same way
  with --no-spec-exact; self-draft-exact: llmcli's with --spec-exact (it drafts only where the
  target's batches are bit-identical to its steps: past 256 cells on an f16 cache, not at all
  on this CPU; on a q8_0 cache, everywhere).

llmcli's decode speed is measured by wall clock in the consumer: tokens after the first / time
from the first token to the last (what a user waits for, Python and sampling included), counted
as llama.cpp's tools count theirs: through the end of the target pass that takes the answer past
N tokens. llama-lookup drafts its full k whatever is left of -n and reports every token of the
batch in which it passed -n; an answer cut at exactly N would end on short batches sized to what
is left, which it never runs. Its "decoded N tokens in S seconds" span starts at the first
sample after the prompt, so it counts one token more than ours, which favours it slightly.
Medians over the rounds; each ratio (to plain, to llama-lookup) is the median of the
ratios within a round, where the runs sat side by side, with its range over the rounds.

With `--cache-type q8_0` every runner (llama.cpp's tools too, `-ctk q8_0 -ctv q8_0 -fa on`) uses a
q8_0 KV cache, where --spec-exact's batches stay exact past 256 cells (docs/SPECULATIVE.md).

Run under the exclusive CPU lock on a quiet machine:
    flock /tmp/cpu.lock python benchmarks/speculative.py --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTHING_TO_COPY = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle. "
    "Describe the weather, the sea and what she decides to do.\n\nStory:"
)
# Gemma 3 270M is a base model: greedy, it soon repeats itself on the story prompt (90% of its
# trigrams had occurred before in 192 tokens), which is something to copy after all. Code that it
# writes fresh repeats itself least (23%); SmolLM2 writes the story fresh (61%, common trigrams).
NOTHING_TO_COPY_FOR = {
    "gemma3-270m": (
        "Here is a Python function that parses an ISO date string and returns a tuple:\n\n```python\n"
    ),
}


# Small models answering greedily fall into loops, often with a period shorter than k (SmolLM2
# repeats one word to the end here, Gemma three): prompt lookup carries the period on.
LOOP = (
    "Repeat this list exactly, twice: alpha beta gamma delta epsilon zeta eta theta iota kappa lambda "
    "mu nu xi omicron pi rho sigma tau"
)


def chat_prompt(engine, text: str) -> str:
    """`text` as a user turn in the model's chat template (unchanged for a base model)."""
    from llmcli import prompting, templates

    if prompting.is_base(engine):
        return text
    return templates.render(prompting.prompt_format(engine), [{"role": "user", "content": text}])


def copy_source(whole_lines: bool = False) -> str:
    source = (ROOT / "src" / "llmcli" / "engine" / "text.py").read_text(encoding="utf-8")[:2000]
    return source[: source.rfind("\n") + 1] if whole_lines else source


def copy_prompt() -> str:
    return copy_source() + "\n\nThe same file again, unchanged:\n\n"


# The same file as a request (a user turn for an instruct model, raw for a base one): repeat it,
# or edit it and print it again. Greedy, SmolLM2 does not copy after the raw prompt above (it
# repeats its last line), where after `repeat` about 70% of its answer is the file's text; Gemma
# copies 96% of the file after `edit`.
REPEAT = "{source}\n\nRepeat the file above exactly, unchanged."
EDIT = (
    "Here is a Python file:\n\n```python\n{source}```\n\n"
    "Fix the typo in the docstring and print the whole file again."
)
CHAT_REQUESTS = ("loop", "repeat", "edit")  # sent as a user turn, as `generate` sends them


def prompts_for(model: str) -> dict[str, str]:
    """Every prompt by its label, as text (a key in CHAT_REQUESTS still goes into a user turn)."""
    fresh = NOTHING_TO_COPY_FOR.get(model, NOTHING_TO_COPY)
    return {"copy": copy_prompt(), "nothing-to-copy": fresh, "loop": LOOP, **copy_requests()}


def copy_requests() -> dict[str, str]:
    """The `repeat` and `edit` requests' text, on the file cut at whole lines."""
    source = copy_source(whole_lines=True)
    return {"repeat": REPEAT.format(source=source), "edit": EDIT.format(source=source)}


def llmcli_run(engine, prompt: str, n: int, k_max: int = 8) -> dict:
    """One greedy answer, measured as llama.cpp's tools measure theirs: through the end of the
    target pass that takes the count past `n` (llama-lookup drafts its full k whatever is left and
    stops after the batch in which it passed -n). Asked for exactly `n`, the last passes would be
    short ones, sized to what is left, which a whole batch past `n` is not."""
    from llmcli.contract import Done, SamplingParams, Token

    engine.reset()
    tokens = engine.tokenize(prompt, add_bos=engine.add_bos)
    marks: list[tuple[float, int, int]] = []  # (when, tokens so far, target passes so far)
    done = None
    params = SamplingParams(temperature=0, max_tokens=n + k_max + 2)
    for event in engine.stream(tokens, params):
        if isinstance(event, Token):
            marks.append((time.perf_counter(), event.n_tokens, event.passes))
        elif isinstance(event, Done):
            done = event
    assert done is not None and marks
    end = next((i for i, m in enumerate(marks) if m[1] > n), len(marks) - 1)
    if marks[end][2]:  # speculative: the rest of that pass's tokens (accepted, then its own sample)
        while end + 1 < len(marks) and marks[end + 1][2] == marks[end][2]:
            end += 1
    first, last = marks[0], marks[end]
    s = done.stats
    count = last[1]
    return {
        "tps": (count - first[1]) / (last[0] - first[0]) if last[0] > first[0] else 0.0,
        "tokens": count,
        "drafted": s.drafted_tokens,  # drafted and accepted: the whole answer, a pass or two past `n`
        "accepted": s.accepted_tokens,
        "passes": last[2] or None,
        "text": done.text,
        "k_chosen": (s.speculative or {}).get("k_chosen"),
        "batch_cost": (s.speculative or {}).get("batch_cost"),
    }


@contextlib.contextmanager
def first_run() -> Iterator[None]:
    """An engine made inside starts as on a machine where llmcli never ran: an empty cache dir, so
    no batch costs stored by earlier runs."""
    before = os.environ.get("LLMCLI_CACHE_DIR")
    with tempfile.TemporaryDirectory() as empty:
        os.environ["LLMCLI_CACHE_DIR"] = empty
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("LLMCLI_CACHE_DIR", None)
            else:
                os.environ["LLMCLI_CACHE_DIR"] = before


def tool_run(argv: list[str], prompt: str | None = None) -> dict:
    """One run of a llama.cpp tool: its speed and draft counts, and with `prompt` the answer's text
    (its stdout after the echoed prompt)."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    log = proc.stderr + proc.stdout
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {log[-800:]}")
    decoded = re.findall(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
    drafted = re.findall(r"n_drafted\s*=\s*(\d+)", log)
    accepted = re.findall(r"n_accept\s*=\s*(\d+)", log)
    if not decoded:
        raise RuntimeError(f"no speed line from {argv[0]}: {log[-800:]}")
    at = proc.stdout.find(prompt) if prompt else -1
    return {
        "tps": float(decoded[-1][2]),
        "tokens": int(decoded[-1][0]),
        "drafted": int(drafted[-1]) if drafted else 0,
        "accepted": int(accepted[-1]) if accepted else 0,
        "answer": proc.stdout[at + len(prompt) :] if prompt and at >= 0 else None,
    }


def same_answer(a: str | None, b: str | None) -> bool:
    """Whether two answers agree as far as the shorter goes (each tool stops at its own count,
    and llama.cpp's tools print a few newlines after the answer)."""
    if a is None or b is None:
        return False
    a, b = a.rstrip(), b.rstrip()
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft-max", type=int, default=None,
                    help="k for llmcli's prompt lookup and llama-lookup (default: llmcli's, 16); "
                    "llama-lookup-8 and llama-lookup-default run beside them")  # fmt: skip
    ap.add_argument("--models", default="gemma3-270m,smollm2-135m",
                    help="comma-separated; empty for none (with --pair)")  # fmt: skip
    ap.add_argument("--pair", action="store_true",
                    help="also the draft pair: Qwen2.5-Coder 1.5B target, 0.5B draft (tests/qwen.py), on "
                    "a code prompt, against llama-speculative-simple at its default k and at 16")  # fmt: skip
    ap.add_argument("--no-tools", action="store_true", help="skip llama.cpp's tools")
    ap.add_argument("--prompts", default="copy,nothing-to-copy",
                    help="comma-separated: copy, repeat, edit, nothing-to-copy, loop")  # fmt: skip
    ap.add_argument("--runners", help="only these runners, comma-separated (plain is always run)")
    ap.add_argument("--json", type=Path, help="also write every measurement here")
    ap.add_argument("--cache-type", default="f16",
                    help="KV cache type of K and V for every runner, llama.cpp's tools too (-ctk/-ctv; "
                    "not f16: flash attention on everywhere); bf16 or q8_0 keeps --spec-exact batches "
                    "exact at long contexts")  # fmt: skip
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT / "tests"))
    from llmcli import defaults
    from llmcli.contract import EngineOptions, SpecOptions
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub import default_model

    tools = {}
    if not args.no_tools:
        import llamacpp_tools

        tools = llamacpp_tools.ensure("llama-lookup", "llama-speculative-simple")
    kv = {} if args.cache_type == "f16" else {"type_k": args.cache_type, "type_v": args.cache_type,
                                               "flash_attn": True}  # fmt: skip
    results: dict = {}
    for name in filter(None, args.models.split(",")):
        every = prompts_for(name)
        prompts = {key: every[key] for key in args.prompts.split(",")}
        path = str(default_model.model_path(name))
        k = args.draft_max or defaults.SPEC_DRAFT_N_MAX

        def engine(spec=None, path=path):
            return LlamaEngine(path, EngineOptions(ctx_size=4096, threads=args.threads, **kv,
                                                   speculative=spec or SpecOptions()))  # fmt: skip

        fast = SpecOptions(kind="lookup", draft_max=k)  # the default: warm, cold and first
        runners = {
            "plain": engine(),
            "lookup": engine(fast),
            "lookup-exact": engine(SpecOptions(kind="lookup", draft_max=k, exact=True)),
            "self-draft": engine(
                SpecOptions(kind="draft", draft_max=4, model_draft=path, exact=False, adaptive=False)
            ),  # fmt: skip
            # the same with the exactness probe: drafts only where the target's batches are exact
            "self-draft-exact": engine(
                SpecOptions(kind="draft", draft_max=4, model_draft=path, exact=True, adaptive=False)
            ),  # fmt: skip
        }
        for r in runners.values():  # the warm runners decide by this machine's measured costs
            if getattr(r, "costs_pending", False):
                r.calibrate()
        for key in CHAT_REQUESTS:  # as `generate` sends a request to an instruct model
            if key in prompts:
                prompts[key] = chat_prompt(runners["plain"], prompts[key])
        for label, prompt in prompts.items():
            with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
                f.write(prompt + "\n")  # llama.cpp's -f drops one trailing newline: the same prompt
                prompt_file = f.name
            calls = {
                key: (lambda r=r, p=prompt, k=k: llmcli_run(r, p, args.tokens, k))
                for key, r in runners.items()
            }

            def cold(p=prompt, k=k, fast=fast, first=False):  # one `llmcli generate`
                with first_run() if first else contextlib.nullcontext():
                    fresh = engine(fast)
                    try:
                        return llmcli_run(fresh, p, args.tokens, k)
                    finally:
                        fresh.close()

            calls["lookup-cold"] = cold
            calls["lookup-first"] = lambda cold=cold: cold(first=True)
            if tools:
                common = ["-f", prompt_file, "-n", str(args.tokens), "--temp", "0", "-t", str(args.threads),
                          *llamacpp_tools.weights_args("llama-lookup")]  # fmt: skip
                if kv:
                    common += ["-ctk", args.cache_type, "-ctv", args.cache_type, "-fa", "on"]
                lookup_argv = [str(tools["llama-lookup"]), "-m", path, *common, "--spec-draft-n-max", str(k)]
                self_argv = [str(tools["llama-speculative-simple"]), "-m", path, "-md", path, *common,
                             "--spec-draft-n-max", "4", "--spec-type", "draft-simple"]  # fmt: skip
                calls["llama-lookup"] = lambda a=lookup_argv, p=prompt: tool_run(a, p)
                if k != 8:  # the k earlier sittings compared at
                    argv8 = [*lookup_argv[:-1], "8"]
                    calls["llama-lookup-8"] = lambda a=argv8, p=prompt: tool_run(a, p)
                # what a user gets from llama-lookup without the flag: its default n_max (3 in 0.3.36)
                default_argv = [str(tools["llama-lookup"]), "-m", path, *common]
                calls["llama-lookup-default"] = lambda a=default_argv, p=prompt: tool_run(a, p)
                calls["llama-spec-self"] = lambda a=self_argv, p=prompt: tool_run(a, p)
            if args.runners:
                wanted = {"plain", *args.runners.split(",")}
                calls = {key: call for key, call in calls.items() if key in wanted}
            rows = shuffled_rounds(calls, args.rounds)
            results[f"{name}/{label}"] = rows
            report(name, label, rows)
        for r in runners.values():
            r.close()
    if args.pair:
        results.update(pair(args, tools, kv))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


PAIR_PROMPT = (
    "Write a Python module with a function that parses a CSV file of orders (id, customer, amount, "
    "date), groups the orders by customer and month, and prints a table of totals. Include type "
    "hints and docstrings."
)


def pair(args, tools: dict, kv: dict) -> dict:
    """The draft pair: llmcli's default `-md` (adaptive k from the calibrated costs, the draft's
    step included) against plain decoding and llama-speculative-simple at its default k and at 16,
    on a code request through the chat template."""
    import qwen

    from llmcli.contract import EngineOptions, SpecOptions
    from llmcli.engine.llama import LlamaEngine

    target, draft = str(qwen.path_1_5b()), str(qwen.path())

    def engine(spec=None):
        return LlamaEngine(target, EngineOptions(ctx_size=4096, threads=args.threads, **kv,
                                                 speculative=spec or SpecOptions()))  # fmt: skip

    spec = SpecOptions(kind="draft", model_draft=draft)
    runners = {"plain": engine(), "draft": engine(spec)}
    if runners["draft"].costs_pending:
        runners["draft"].calibrate()
    prompt = chat_prompt(runners["plain"], PAIR_PROMPT)
    calls = {
        key: (lambda r=r: llmcli_run(r, prompt, args.tokens, spec.draft_max)) for key, r in runners.items()
    }

    def cold():  # one `llmcli generate -m 1.5b -md 0.5b`, from the stored costs
        fresh = engine(spec)
        try:
            return llmcli_run(fresh, prompt, args.tokens, spec.draft_max)
        finally:
            fresh.close()

    calls["draft-cold"] = cold

    def first():  # the first `llmcli generate -m 1.5b -md 0.5b` on a machine: the assumed costs
        with first_run():
            return cold()

    calls["draft-first"] = first
    if tools:
        import llamacpp_tools

        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(prompt + "\n")
        common = ["-f", f.name, "-n", str(args.tokens), "--temp", "0", "-t", str(args.threads),
                  *llamacpp_tools.weights_args("llama-speculative-simple")]  # fmt: skip
        base = [str(tools["llama-speculative-simple"]), "-m", target, "-md", draft, *common,
                "--spec-type", "draft-simple"]  # fmt: skip
        calls["llama-spec"] = lambda: tool_run(base, prompt)
        calls["llama-spec-16"] = lambda: tool_run([*base, "--spec-draft-n-max", "16"], prompt)
    if args.runners:
        wanted = {"plain", *args.runners.split(",")}
        calls = {key: call for key, call in calls.items() if key in wanted}
    rows = shuffled_rounds(calls, args.rounds)
    report("qwen2.5-coder 1.5B + 0.5B draft", "code", rows, reference_key="llama-spec")
    for r in runners.values():
        r.close()
    return {"qwen-pair/code": rows}


def shuffled_rounds(calls: dict[str, Callable[[], dict]], rounds: int) -> dict[str, list[dict]]:
    """Each call once to warm up (graph building, the exactness probe, the page cache), then
    `rounds` rounds of every call, each round in a new order, the same for every sitting: no runner
    always follows the same one (or a subprocess). Returns each call's measurements by key."""
    for call in calls.values():
        call()
    rows: dict[str, list[dict]] = {key: [] for key in calls}
    order = list(calls)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for key in order:
            rows[key].append(calls[key]())
    return rows


def paired(xs: list[dict], ys: list[dict]) -> list[float]:
    """Speed ratios of runs made in the same round: a slow spell of the machine hits both sides."""
    return [x["tps"] / y["tps"] for x, y in zip(xs, ys, strict=True) if y["tps"]]


def report(model: str, label: str, rows: dict[str, list[dict]], reference_key: str = "llama-lookup") -> None:
    """Medians over the rounds; "vs plain" and "vs llama-lookup" are medians of the ratios within
    each round (with their range), which a machine whose speed drifts between rounds disturbs less
    than a ratio of medians."""
    texts = {x["text"] for x in rows["plain"]}
    reference = rows.get(reference_key)
    theirs = [x.get("answer") for x in reference] if reference else []
    print(f"\n{model} · {label} prompt · median of {len(rows['plain'])} rounds")
    print(f"  {'runner':<16} {'tok/s':>8} {'vs plain':>18} {'vs ' + reference_key:>18} "
          f"{'accepted/drafted':>18} {'tok/pass':>9}  same text  as {reference_key}")  # fmt: skip
    for key, xs in rows.items():
        tps = statistics.median(x["tps"] for x in xs)

        def ratio(ys: list[dict] | None, xs=xs) -> str:
            if ys is None or ys is xs:
                return "-"
            r = paired(xs, ys)
            return f"{statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})" if r else "-"

        d = statistics.median(x["drafted"] for x in xs)
        a = statistics.median(x["accepted"] for x in xs)
        share = f"{a:.0f}/{d:.0f} ({100 * a / d:.0f}%)" if d else "-"
        passes = [x["tokens"] / x["passes"] for x in xs if x.get("passes")]
        per_pass = f"{statistics.median(passes):.2f}" if passes else "-"
        same = ("yes" if {x["text"] for x in xs} == texts else "no") if "text" in xs[0] else "n/a"
        # rounds whose answer is llama-lookup's answer of that round (a ratio between two
        # different answers compares the answers as much as the tools)
        mine = [x.get("text", x.get("answer")) for x in xs]
        alike = "-" if xs is reference or not theirs else f"{sum(map(same_answer, mine, theirs))}/{len(xs)}"
        print(f"  {key:<16} {tps:>8.1f} {ratio(rows['plain']):>18} {ratio(reference):>18} {share:>18} "
              f"{per_pass:>9}  {same:<9}  {alike}")  # fmt: skip
        ks = [x.get("k_chosen") for x in xs if x.get("k_chosen")]
        if ks:
            print(f"  {'':<16} k chosen (last run): {ks[-1]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
