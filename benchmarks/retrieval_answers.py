"""Answers with retrieval against without, end to end: the share of the 30 questions of the
retrieval corpus (tests/data/retrieval/questions.jsonl) whose answer contains the known fact.

Each question is asked twice, as a user runs llmcli: once without retrieval (`llmcli generate -m
MODEL "question"`) and once with it (`llmcli ask bench "question"`, the eight docs embedded as
passages with all-MiniLM-L6-v2 into a data directory of its own, hybrid search by default), both
greedy (`--temperature 0`, `-s 0`) and at most `-n` tokens. An answer is right when it contains the
question's fact (its `fact` field: one or a few alternatives taken from the answer's line, matched
case-insensitively, a digit or letter at either end of a fact not running on into the text, so
`5` is not found in `512`). Each fact is checked against the answer's line (or the one after it)
first, so the corpus cannot drift away from its facts. An `ask` that finds no passage (exit 8)
counts as not right, and its row says so.

Printed: a row per question (right or not, without and with, and whether the passages `ask` put
in front of the model held the answer's line: "given"), the shares, the time taken and the
load average of the machine; `--json` prints one JSON document instead.

    python benchmarks/retrieval_answers.py -m MODEL [--limit N] [-n 64] [--search hybrid]
        [--chunk 256] [--overlap 32] [--rerank MODEL] [--threads N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
DATA = ROOT / "tests" / "data" / "retrieval"
NOTHING_FOUND = 8  # `ask`'s exit code when no passage is above the threshold


def questions() -> list[dict]:
    """The questions, each fact checked against the lines that answer it."""
    out = [json.loads(line) for line in (DATA / "questions.jsonl").read_text().splitlines() if line.strip()]
    for q in out:
        lines = (DATA / q["file"]).read_text(encoding="utf-8").splitlines()
        if q["phrase"] not in lines[q["line"] - 1]:
            raise SystemExit(f"{q['file']}:{q['line']} no longer holds {q['phrase']!r}: fix questions.jsonl")
        facts = q.get("fact")
        if not facts:
            raise SystemExit(f"{q['question']!r} has no fact: fix questions.jsonl")
        if not contains(" ".join(lines[q["line"] - 1 : q["line"] + 1]), facts):
            raise SystemExit(f"{q['file']}:{q['line']} holds none of {facts}: fix questions.jsonl")
    return out


def _pattern(fact: str) -> str:
    start = r"(?<!\w)" if fact[0].isalnum() else ""
    end = r"(?!\w)" if fact[-1].isalnum() else ""
    return start + re.escape(fact) + end


def contains(text: str, facts: list[str]) -> bool:
    """Whether `text` holds one of `facts`, case-insensitively, not inside a longer word or number."""
    return any(re.search(_pattern(f), text, re.IGNORECASE) for f in facts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", "--answer", dest="model", metavar="MODEL", required=True,
                        help="the generative model that answers (any llmcli model reference)")  # fmt: skip
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N questions")
    parser.add_argument("-n", "--max-tokens", type=int, default=64, metavar="N", help="tokens per answer")
    parser.add_argument("--search", choices=["text", "vector", "hybrid"], default="hybrid")
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--overlap", type=int, default=32)
    parser.add_argument(
        "--rerank", metavar="MODEL", help="`ask --rerank MODEL` for the answers with retrieval"
    )
    parser.add_argument("-t", "--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args()
    import minilm

    qs = questions()[: args.limit]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as home:
        os.environ["LLMCLI_DATA_DIR"] = home
        os.environ["LLMCLI_CONFIG"] = str(Path(home) / "config.toml")
        _embed(args, minilm.path())
        rows = [_row(args, q) for q in qs]
    seconds = time.perf_counter() - started
    load = os.getloadavg()
    n = len(rows)
    shares = {key: sum(r[key]["right"] for r in rows) / n for key in ("without", "with")}
    if args.json:
        print(json.dumps({"model": args.model, "questions": n, "max_tokens": args.max_tokens,
                          "search": args.search, "rerank": args.rerank, "chunk": args.chunk,
                          "overlap": args.overlap, "share_right": shares, "seconds": round(seconds, 1),
                          "load_average": load, "rows": rows}, indent=2))  # fmt: skip
        return
    print(f"{'#':>2} {'without':>7} {'with':>6} {'given':>5}  question")
    for i, r in enumerate(rows, 1):
        marks = ["yes" if r[k]["right"] else ("none" if r[k]["exit"] == NOTHING_FOUND else "no")
                 for k in ("without", "with")]  # fmt: skip
        given = "yes" if r["with"]["given"] else "no"
        print(f"{i:>2} {marks[0]:>7} {marks[1]:>6} {given:>5}  {r['question']}")
    print(
        f"{args.model}: {n} questions, -n {args.max_tokens}, temperature 0; answer contains the fact: "
        f"without retrieval {shares['without']:.0%} ({sum(r['without']['right'] for r in rows)}/{n}), "
        f"with `ask --search {args.search}{' --rerank' if args.rerank else ''}` {shares['with']:.0%} "
        f"({sum(r['with']['right'] for r in rows)}/{n}), the answer's line among the passages given "
        f"{sum(r['with']['given'] for r in rows)}/{n}; {seconds:.0f} s; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def _embed(args, embedder: Path) -> None:
    from helpers import run

    inputs = [flag for f in sorted(DATA.glob("*.md")) for flag in ("-i", str(f))]
    result = run("embed", "-m", str(embedder), *inputs, "--collection", "bench", "--chunk", str(args.chunk),
                 "--overlap", str(args.overlap), *_threads(args))  # fmt: skip
    if result.exit_code != 0:
        raise SystemExit(result.stderr)
    print(result.stderr.strip(), file=sys.stderr)


def _threads(args) -> list[str]:
    return ["-t", str(args.threads)] if args.threads else []


def _row(args, q: dict) -> dict:
    from helpers import run

    common = ["-m", args.model, "--temperature", "0", "-s", "0", "-n", str(args.max_tokens), "--json",
              *_threads(args)]  # fmt: skip
    out: dict = {"question": q["question"], "fact": q["fact"]}
    asked = {
        "without": ("generate", q["question"], *common),
        "with": (
            "ask",
            "bench",
            q["question"],
            "--search",
            args.search,
            *common,
            *(["--rerank", args.rerank] if args.rerank else []),
        ),  # fmt: skip
    }
    for key, argv in asked.items():
        result = run(*argv)
        if result.exit_code not in (0, NOTHING_FOUND):
            raise SystemExit(f"llmcli {argv[0]} failed ({result.exit_code}): {result.stderr.strip()}")
        doc = json.loads(result.stdout) if result.exit_code == 0 else {}
        text = doc.get("text", "")
        out[key] = {"right": contains(text, q["fact"]), "exit": result.exit_code, "text": text}
        if key == "with":
            out[key]["given"] = _given(q, (doc.get("retrieval") or {}).get("passages", []))
    return out


def _given(q: dict, passages: list[dict]) -> bool:
    """Whether the passages put in front of the model hold the answer's line."""
    return any(p.get("source") and Path(p["source"]).name == q["file"] and p["lines"]
               and p["lines"][0] <= q["line"] <= p["lines"][1] for p in passages)  # fmt: skip


if __name__ == "__main__":
    main()
