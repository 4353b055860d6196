"""Retrieval measured against known answers: a frozen copy of eight of llmcli's own docs
(tests/data/retrieval/*.md) and 30 questions (tests/data/retrieval/questions.jsonl), each with the
file and line that answers it (and the phrase on that line, checked first, so that a corpus edited
by hand cannot silently move an answer). The questions are paraphrased, not quoted, so that words
alone do not always find them.

The corpus is embedded once (`llmcli embed -i ... --collection`, in a data directory of its own)
with all-MiniLM-L6-v2 (tests/minilm.py: built once, cached), then every question is searched
three ways (`--search text|vector|hybrid`, llmcli.embed.retrieve, as `ask` searches) and, with
`--rerank MODEL` where the loader has a reranker, hybrid then reranked. A question counts as found
at rank r when the r-th passage is from its file and its lines hold the answer's line.

Figures per method: recall@5 (the share of questions found in the first five), MRR (the mean of
1/r, 0 where not in the first ten) and the time per query (the question embedded, searched, and
reranked: the median, in ms). The load average of the machine is printed beside them.

    python benchmarks/retrieval.py [--chunk 256] [--overlap 32] [--rerank MODEL] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
DATA = ROOT / "tests" / "data" / "retrieval"
DEPTH = 10


def questions() -> list[dict]:
    out = [json.loads(line) for line in (DATA / "questions.jsonl").read_text().splitlines() if line.strip()]
    for q in out:
        line = (DATA / q["file"]).read_text().splitlines()[q["line"] - 1]
        if q["phrase"] not in line:
            raise SystemExit(f"{q['file']}:{q['line']} no longer holds {q['phrase']!r}: fix questions.jsonl")
    return out


def rank_of(q: dict, hits) -> int | None:
    for r, hit in enumerate(hits, 1):
        if hit.source and Path(hit.source).name == q["file"] and hit.lines[0] <= q["line"] <= hit.lines[1]:
            return r
    return None


def figures(ranks: list[int | None], ms: list[float]) -> dict:
    n = len(ranks)
    return {
        "recall@1": sum(1 for r in ranks if r is not None and r <= 1) / n,
        "recall@5": sum(1 for r in ranks if r is not None and r <= 5) / n,
        "mrr": sum(1 / r for r in ranks if r is not None) / n,
        "ms_per_query": statistics.median(ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--overlap", type=int, default=32)
    parser.add_argument("--rerank", metavar="MODEL", help="also hybrid then reranked by MODEL")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args()
    import minilm

    qs = questions()
    model = minilm.path()
    with tempfile.TemporaryDirectory() as home:
        os.environ["LLMCLI_DATA_DIR"] = home
        os.environ["LLMCLI_CONFIG"] = str(Path(home) / "config.toml")
        results = _run(args, qs, model)
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"questions": len(qs), "chunk": args.chunk, "overlap": args.overlap,
                          "load_average": load, "methods": results}, indent=2))  # fmt: skip
        return
    print(
        f"{len(qs)} questions over {len(list(DATA.glob('*.md')))} files of llmcli's docs; all-MiniLM-L6-v2, "
        f"--chunk {args.chunk} --overlap {args.overlap}; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"{'method':<18} {'recall@1':>9} {'recall@5':>9} {'MRR':>7} {'ms/query':>9}")
    for name, f in results.items():
        print(
            f"{name:<18} {f['recall@1']:>9.3f} {f['recall@5']:>9.3f} {f['mrr']:>7.3f} "
            f"{f['ms_per_query']:>9.1f}"
        )


def _run(args, qs: list[dict], model: Path) -> dict:
    from helpers import run

    from llmcli.embed import collections as store
    from llmcli.embed import retrieve
    from llmcli.embed.runs import Model

    files = [str(p) for p in sorted(DATA.glob("*.md"))]
    started = time.perf_counter()
    inputs = [flag for f in files for flag in ("-i", f)]
    result = run("embed", "-m", str(model), *inputs, "--collection", "bench", "--chunk", str(args.chunk),
                 "--overlap", str(args.overlap))  # fmt: skip
    if result.exit_code != 0:
        raise SystemExit(result.stderr)
    print(f"{result.stderr.strip()} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    engine = Model(str(model), threads=args.threads)
    reranker = None
    if args.rerank:
        from llmcli import loader

        reranker = loader.load_reranker(args.rerank, threads=args.threads)
    out: dict[str, dict] = {}
    try:
        with store.connect() as db:
            methods = ["text", "vector", "hybrid"] + (["hybrid+rerank"] if reranker else [])
            for method in methods:
                ranks, ms = [], []
                for q in qs:
                    t = time.perf_counter()
                    vector = engine.embed([q["question"]]).matrix[0] if method != "text" else None
                    mode = method.split("+")[0]
                    hits = retrieve.search(db, "bench", q["question"], vector, mode, DEPTH)
                    if reranker is not None and method.endswith("rerank"):
                        hits = retrieve.rerank(reranker, q["question"], hits, DEPTH)
                    ms.append((time.perf_counter() - t) * 1000)
                    ranks.append(rank_of(q, hits))
                out[method] = figures(ranks, ms)
    finally:
        engine.close()
        if reranker is not None:
            reranker.close()
    return out


if __name__ == "__main__":
    main()
