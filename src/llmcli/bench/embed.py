"""`--scenario embed`: embedding throughput, texts/s and tokens/s, as `llmcli embed` runs it.

The texts are a file's lines (`-f FILE`) or generated sentences (`--texts N`, the same every run).
Each model is loaded once per thread count and batch size; an untimed warm-up pass, then every
repetition embeds all the texts through `llmcli.embed.runs.Model.embed` (tokenizing, the batched
decodes, pooling and normalisation: what `embed` does between loading the model and printing), and
its wall clock gives one sample of texts/s and of tokens/s. The load is timed apart.

`benchmarks/embed.py` uses `sentences` and `measure` to set llmcli beside llama.cpp's
`llama-embedding` on the same file and model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.bench import stats
from llmcli.bench.runner import Finished, Measurer, Step, now_iso
from llmcli.errors import UsageError

DEFAULT_TEXTS = 1000

SUBJECTS = ("The cat", "A scientist", "My neighbour", "The old train", "A small bird", "The committee")
VERBS = ("watched", "described", "ignored", "repaired", "followed", "questioned")
OBJECTS = ("the river at dawn", "a broken clock", "the new policy", "an empty stadium", "the last letter")


def sentences(n: int) -> list[str]:
    """`n` short sentences, all different, the same in every run (about 12 tokens each for MiniLM)."""
    out = []
    for i in range(n):
        s, v, o = SUBJECTS[i % 6], VERBS[(i // 6) % 6], OBJECTS[(i // 36) % 5]
        out.append(f"{s} {v} {o} on day {i}.")
    return out


def read_texts(path: Path) -> list[str]:
    """The non-blank lines of a UTF-8 file: one text each."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise UsageError(f"{path} has no text to embed (no non-blank line)")
    return lines


@dataclass
class EmbedResult:
    """One model, thread count and batch size: its load and its timed repetitions."""

    model_ref: str
    model_path: str
    pooling: str
    n_threads: int
    batch_tokens: int | None  # None: the model's context
    n_texts: int
    n_tokens: int
    load_ns: int
    test_time: str
    warmup: bool
    samples_ns: list[int] = field(default_factory=list)
    other_load: float | None = None  # the share of the CPU other processes used while it was timed

    def record(self) -> dict[str, Any]:
        texts_s = [self.n_texts * 1e9 / ns for ns in self.samples_ns if ns > 0]
        tokens_s = [self.n_tokens * 1e9 / ns for ns in self.samples_ns if ns > 0]
        ns = [float(v) for v in self.samples_ns]
        return {
            "scenario": "embed",
            "test": f"embed {self.n_texts} texts",
            "model": self.model_ref,
            "model_path": self.model_path,
            "model_filename": Path(self.model_path).name,
            "pooling": self.pooling,
            "n_threads": self.n_threads,
            "batch_tokens": self.batch_tokens,
            "n_texts": self.n_texts,
            "n_tokens": self.n_tokens,
            "test_time": self.test_time,
            "warmup": self.warmup,
            "repetitions": len(self.samples_ns),
            "load_ms": round(self.load_ns / 1e6, 3),
            "avg_ns": round(stats.mean(ns)),
            "stddev_ns": round(stats.stdev(ns)),
            "avg_texts_s": round(stats.mean(texts_s), 3),
            "stddev_texts_s": round(stats.stdev(texts_s), 3),
            "avg_ts": round(stats.mean(tokens_s), 3),
            "stddev_ts": round(stats.stdev(tokens_s), 3),
            "samples_ns": list(self.samples_ns),
            "samples_texts_s": [round(v, 3) for v in texts_s],
            "samples_ts": [round(v, 3) for v in tokens_s],
            "other_load": None if self.other_load is None else round(self.other_load, 3),
        }


Progress = Callable[[str], None]


def measure(ref: str, texts: list[str], *, threads: int, batch_tokens: int | None, reps: int, warmup: bool,
            progress: Progress = lambda line: None, debug: bool = False) -> EmbedResult:  # fmt: skip
    """Load `ref` (a local embedding GGUF), then embed all of `texts` `reps` times (after one untimed
    pass when `warmup`); each repetition's wall clock is one sample."""
    from llmcli.embed.runs import Model
    from llmcli.engine import cpu_load

    clock = time.perf_counter_ns
    started = now_iso()
    t0 = clock()
    model = Model(ref, threads=threads, batch_tokens=batch_tokens, debug=debug)
    load_ns = clock() - t0
    try:
        if model.local is None:
            raise UsageError("--scenario embed measures a local embedding model, not a served one")
        label = f"{Path(ref).name}, {len(texts)} texts, {threads} threads"
        if warmup:
            progress(f"{label}: warm-up")
            model.embed(texts)
        samples, tokens = [], 0
        before = cpu_load.snapshot()
        for rep in range(reps):
            progress(f"{label}: repetition {rep + 1}/{reps}")
            t0 = clock()
            tokens = model.embed(texts).tokens
            samples.append(clock() - t0)
        other = cpu_load.other_share(before, cpu_load.snapshot())
        return EmbedResult(ref, str(model.local.path.resolve()), model.pooling, threads, batch_tokens,
                           len(texts), tokens, load_ns, started, warmup, samples, other)  # fmt: skip
    finally:
        model.close()


@dataclass
class Request:
    models: list[str]
    texts: list[str]
    source: str  # the file's path, or "generated"
    threads: list[int]
    batch_tokens: list[int | None]
    reps: int = 5
    warmup: bool = True
    delay_s: float = 0.0


@dataclass(frozen=True)
class EmbedCase:
    model: str
    threads: int
    batch_tokens: int | None


class Embed(Measurer):
    """Each model, thread count and batch size loaded and measured in turn (`measure`)."""

    def __init__(self, request: Request, progress: Progress, debug: bool) -> None:
        self.request, self.progress, self.debug = request, progress, debug
        self.reps, self.delay_s = request.reps, request.delay_s

    def measure(self, case: EmbedCase, held: Any, step: Step) -> Iterator[Finished]:
        r = self.request
        result = measure(case.model, r.texts, threads=case.threads, batch_tokens=case.batch_tokens,
                         reps=r.reps, warmup=r.warmup, progress=self.progress, debug=self.debug)  # fmt: skip
        yield Finished(f"embed {result.n_texts} texts", [result], None)


def check_models(refs: list[str]) -> None:
    """Refuse, in one line and before anything is measured, a model that is not a local embedding
    model: a served one, or a generative one (it writes text and has no pooling for vectors)."""
    from llmcli.hub.resolve import resolve_model
    from llmcli.loader import check_embedding, served_endpoint

    for ref in refs:
        if served_endpoint(ref) is not None:
            raise UsageError("--scenario embed measures a local embedding model, not a served one")
        path = resolve_model(ref).path
        check_embedding(path, purpose=", and --scenario embed measures an embedding model",
                        hint=f"measure it with llmcli bench -m {path}")  # fmt: skip


def run(request: Request, progress: Progress = lambda line: None, debug: bool = False) -> dict[str, Any]:
    """Every model, thread count and batch size measured in turn, in bench's one loop
    (`runner.drive`): the run's document (`-o json`). Ctrl-C stops it (KeyboardInterrupt)."""
    from llmcli.bench.machine import collect
    from llmcli.bench.results import BenchRun
    from llmcli.bench.runner import drive

    check_models(request.models)
    r = request
    cases = [EmbedCase(m, t, b) for m in r.models for t in r.threads for b in r.batch_tokens]
    run = drive(cases, BenchRun({}, {}, len(cases), now_iso()), Embed(request, progress, debug))
    if run.interrupted:
        raise KeyboardInterrupt
    return {
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "environment": collect(),
        "settings": {
            "scenario": "embed", "repetitions": request.reps, "warmup": request.warmup,
            "delay_s": request.delay_s, "texts": request.source, "n_texts": len(request.texts),
            "n_threads": request.threads, "batch_tokens": request.batch_tokens,
        },  # fmt: skip
        "results": [result.record() for result in run.results],
    }
