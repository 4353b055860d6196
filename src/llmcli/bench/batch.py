"""`--scenario batch`: many sequences decoded together, as `llmcli batch` runs them, against N.

For every model, GPU layers, context setting, prompt length (-p), answer length (-n) and number of
sequences N (`--parallel`, default 1,2,4,8,16), N prompts of -p random token ids each (BOS first)
are answered greedily, -n tokens at most, by the batch decoder `llmcli batch` uses
(`llmcli.engine.batched.BatchDecoder`: one llama.cpp context, one `llama_batch` per step, a
sequence id each). Per repetition:

- aggregate decode tokens/s: N times the decode speed of the sequence that ended first (all N
  decoded together throughout its decode): the speed of steps of N sequences, decode only, as
  llama-batched-bench's S_TG (N x tg over the tg steps' time);
- per-sequence decode tokens/s: each sequence's tokens after its first over its own first->last
  time, averaged over the N sequences (what one user of a batch sees);
- aggregate prefill tokens/s: the N prompts' tokens over the time to the last sequence's first token.

Each N's aggregate is also shown as a ratio to N = 1's with the same model, context and sizes. An
end-of-generation token does not stop a sequence (`BatchItem.past_eog`): every one decodes -n
tokens, as llama-batched-bench's do; `ended_early` says how many stopped short all the same.

One engine is loaded per model and context setting; one batch decoder per N, kept for its
repetitions (each sequence's cache is cleared as it ends). Ctrl-C stops after the repetition in
progress: the decoder runs every sequence of a repetition to its end.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from llmcli.bench import stats, traffic
from llmcli.bench.results import ModelSummary, _context_fields, _roofline, _round
from llmcli.bench.runner import Backend, Finished, Interrupted, Measurer, Step, now_iso
from llmcli.bench.sweep import ContextSpec, Sweep, answer_settings
from llmcli.contract import EngineOptions, SamplingParams
from llmcli.errors import UsageError

DEFAULT_PARALLEL = [1, 2, 4, 8, 16, 32, 64]
DEFAULT_N_PROMPT = 32  # llama-batched-bench's -npp in the figures
CTX_MARGIN = 8  # cells past prompt + answer in each sequence's share of the context


@dataclass(frozen=True)
class BatchCase:
    model: str  # the resolved model key
    n_gpu_layers: int
    context: ContextSpec
    n_prompt: int
    n_gen: int
    parallel: int


@dataclass
class BatchSample:
    """One repetition: N sequences answered together."""

    decode_ts: float | None  # aggregate; None when no sequence generated two tokens
    seq_decode_ts: float | None  # mean over the sequences of each one's own speed
    prefill_ts: float | None
    completion_tokens: int  # all sequences together
    ended_early: int  # sequences that stopped at an end-of-generation token before -n


@dataclass
class BatchBenchResult:
    """One N of one model, context and sizes, over the repetitions; `baseline` is N = 1's."""

    model: ModelSummary
    case: BatchCase
    gpu_layers_offloaded: int
    n_ctx: int  # the batch context: N shares of prompt + answer + margin
    test_time: str
    samples: list[BatchSample] = field(default_factory=list)
    warmup: bool = True
    other_load: float | None = None
    baseline: BatchBenchResult | None = None

    @property
    def name(self) -> str:
        c = self.case
        return f"batch np{c.parallel} pp{c.n_prompt} tg{c.n_gen}"

    def _values(self, name: str) -> list[float]:
        return [v for s in self.samples if (v := getattr(s, name)) is not None]

    @property
    def avg_ts(self) -> float:
        return stats.mean(self._values("decode_ts"))

    @property
    def vs_one(self) -> float | None:
        base = self.baseline
        if base is None or not base._values("decode_ts") or not self._values("decode_ts") or not base.avg_ts:
            return None
        return self.avg_ts / base.avg_ts

    def record(self, measured_gbps: float | None = None) -> dict[str, Any]:
        c = self.case
        agg, seq, pre = self._values("decode_ts"), self._values("seq_decode_ts"), self._values("prefill_ts")
        # every step reads the weights once for all N sequences: steps/s is one sequence's speed
        gbps = traffic.effective_gbps(self.model.weight_bytes_per_token, stats.mean(seq)) if seq else None
        return {
            "scenario": "batch",
            "test": self.name,
            **self.model.record(),
            **_context_fields(c.context, c.n_gpu_layers, self.gpu_layers_offloaded),
            "n_parallel": c.parallel,
            "n_prompt": c.n_prompt,
            "n_gen": c.n_gen,
            "n_ctx": self.n_ctx,
            "test_time": self.test_time,
            "repetitions": len(self.samples),
            "warmup": self.warmup,
            "completion_tokens": [s.completion_tokens for s in self.samples],
            "ended_early": [s.ended_early for s in self.samples],
            "avg_ts": round(stats.mean(agg), 6),
            "stddev_ts": round(stats.stdev(agg), 6),
            "cv": round(stats.cv(agg), 6),
            "samples_ts": [round(v, 6) for v in agg],
            "avg_seq_ts": round(stats.mean(seq), 6),
            "stddev_seq_ts": round(stats.stdev(seq), 6),
            "samples_seq_ts": [round(v, 6) for v in seq],
            "avg_prefill_ts": round(stats.mean(pre), 6),
            "stddev_prefill_ts": round(stats.stdev(pre), 6),
            "samples_prefill_ts": [round(v, 6) for v in pre],
            "vs_one": _round(self.vs_one, 4),
            "effective_gbps": None if gbps is None else round(gbps, 3),
            "roofline_fraction": _roofline(gbps, measured_gbps, self.gpu_layers_offloaded),
            "other_cpu_load": _round(self.other_load, 3),
        }


@dataclass
class BatchOptions:
    reps: int = 5
    warmup: bool = True
    seed: int = 1234


def parse_parallel(values: list[str] | None) -> list[int]:
    """--parallel's list (comma lists and ranges, as the other sweep lists), each from 1 to 256."""
    from llmcli.bench.sweep import parse_ints

    found = parse_ints("--parallel", values, DEFAULT_PARALLEL, minimum=1)
    if too_many := [n for n in found if n > 256]:
        raise UsageError(f"--parallel: at most 256 sequences, got {too_many[0]}")
    return list(dict.fromkeys(found))


def expand(sweep: Sweep, parallel: list[int]) -> list[BatchCase]:
    """Cases ordered so that one engine serves consecutive ones, N = 1 (the baseline) first."""
    lengths, contexts = answer_settings(sweep, "batch")
    prompts = [p for p in sweep.n_prompt if p > 0] or [DEFAULT_N_PROMPT]
    return [
        BatchCase(str(model), ngl, context, p, n, np_)
        for model in sweep.models
        for ngl in sweep.gpu_layers
        for context in contexts
        for p in prompts
        for n in lengths
        for np_ in sorted(parallel)
    ]


def ctx_per_seq(case: BatchCase) -> int:
    return case.n_prompt + case.n_gen + CTX_MARGIN


def memory_options(case: BatchCase) -> EngineOptions:
    """What the memory check weighs: the engine's context and the batch's together."""
    return case.context.engine_options(case.n_gpu_layers, ctx_per_seq(case) * (case.parallel + 1))


class Batch(Measurer):
    """One engine per model and context setting, its own context sized for the longest sequence
    (the batch's context is the decoder's); one batch decoder per N, kept for its repetitions.
    Each N's result is compared with N = 1's."""

    def __init__(self, models: dict[str, ModelSummary], backend: Backend, options: BatchOptions,
                 delay_s: float = 0.0) -> None:  # fmt: skip
        self.models, self.backend, self.options = models, backend, options
        self.reps, self.delay_s = options.reps, delay_s
        self.baselines: dict[tuple, BatchBenchResult] = {}

    def key(self, case: BatchCase) -> tuple:
        return (case.model, case.n_gpu_layers, case.context)

    def open(self, cases: list[BatchCase]) -> Any:
        longest = max(ctx_per_seq(c) for c in cases)
        first = cases[0]
        return self.backend.chat_engine(self.models[first.model],
                                        first.context.engine_options(first.n_gpu_layers, longest))

    def close(self, engine: Any) -> None:
        engine.close()
        self.backend.release(engine)

    def measure(self, case: BatchCase, engine: Any, step: Step) -> Iterator[Finished]:
        result = _run_case(case, self.models[case.model], engine, self.backend, self.options, step)
        where = (case.model, case.n_gpu_layers, case.context, case.n_prompt, case.n_gen)
        if case.parallel == 1:
            self.baselines[where] = result
        result.baseline = self.baselines.get(where)
        yield Finished(result.name, [result], result)


def _run_case(case, model, engine, backend, options: BatchOptions, step: Step) -> BatchBenchResult:
    from llmcli.engine.batched import BatchDecoder

    decoder = BatchDecoder(engine, case.parallel, ctx_per_seq=ctx_per_seq(case))
    try:
        result = BatchBenchResult(
            model=model, case=case, gpu_layers_offloaded=getattr(engine.info, "gpu_layers", 0),
            n_ctx=ctx_per_seq(case) * decoder.parallel, test_time=now_iso(), warmup=options.warmup,
        )  # fmt: skip
        rng = random.Random(options.seed)
        if options.warmup:
            step(result.name, "warmup", 0, options.reps)
            once(decoder, engine, case, rng, backend.clock, step.stop)
        before = backend.load_snapshot()
        for rep in range(options.reps):
            step(result.name, "rep", rep + 1, options.reps)
            result.samples.append(once(decoder, engine, case, rng, backend.clock, step.stop))
        result.other_load = backend.other_load(before, backend.load_snapshot())
        return result
    finally:
        decoder.close()


def prompts(engine, case: BatchCase, rng: random.Random) -> list[list[int]]:
    """N prompts of random token ids (BOS first where the model has one), as llama-bench draws them."""
    bos = engine.tokenize("", add_bos=True)[:1] if engine.add_bos else []
    out = []
    for _ in range(case.parallel):
        tokens = [rng.randrange(engine.n_vocab) for _ in range(case.n_prompt)]
        tokens[: len(bos)] = bos
        out.append(tokens)
    return out


def once(decoder, engine, case: BatchCase, rng: random.Random, clock: Callable[[], int],
         stop=None) -> BatchSample:  # fmt: skip
    """One repetition: the N prompts answered together, greedily, -n tokens each at most."""
    from llmcli.engine.batched import BatchItem

    if stop is not None and stop.is_set():
        raise Interrupted
    params = SamplingParams(temperature=0.0, seed=0, max_tokens=case.n_gen)
    items = [
        BatchItem(i, tokens, params, past_eog=True) for i, tokens in enumerate(prompts(engine, case, rng))
    ]
    decoder.trace = []
    start = clock()
    ends: list[tuple[int, float, int]] = []  # (end ns, decode ms, tokens) per sequence
    early = 0
    for result in decoder.run(items):
        now = clock()
        if result.done is None:
            raise UsageError(f"the batch decoder refused a prompt: {result.error}")
        s = result.done.stats
        ends.append((now, s.decode_ms, s.completion_tokens))
        early += result.done.finish_reason == "stop" and s.completion_tokens < case.n_gen
    trace, decoder.trace = decoder.trace, None
    return sample(start, ends, case, early, trace)


def sample(start: int, ends: list[tuple[int, float, int]], case: BatchCase, early: int,
           trace: list[tuple[float, int, int]] | None = None) -> BatchSample:  # fmt: skip
    """The speeds of one repetition from each sequence's end (clock ns), own decode time and tokens.

    The aggregate is N times the speed of the sequence that ended first: all N sequences decoded
    together throughout its decode, so it is the speed of steps of N (llama-batched-bench's S_TG),
    where a sequence stopping early would leave later steps smaller. Where none stops early they
    end in the same step, and it is every sequence's tokens after its first over the decode time.
    A sequence that ended at its first token never decoded: N counts the others.

    With the decoder's `trace` (ms, sequences decoding, prompt tokens of each step), the aggregate
    is the speed of the steps that decoded all N and prefilled nothing, as llama-batched-bench
    times its TG steps apart from PP: the first sequence's decode also spans the steps that
    prefilled the others' prompts, which at large N is much of it."""
    firsts = [end - ms * 1e6 for end, ms, _ in ends]
    decoding = [e for e in ends if e[2] > 1 and e[1] > 0]  # one that ended at its first token never decoded
    agg = None
    if decoding:
        _, first_ms, first_n = min(decoding, key=lambda e: e[0])
        agg = len(decoding) * (first_n - 1) * 1000 / first_ms
    pure = [(ms, n) for ms, n, prompt in trace or () if prompt == 0 and n == len(ends) and ms > 0]
    if pure and not early:
        agg = sum(n for _, n in pure) * 1000 / sum(ms for ms, _ in pure)
    own = [(n - 1) * 1000 / ms for _, ms, n in decoding]
    prefill_ns = max(firsts) - start
    return BatchSample(
        decode_ts=agg,
        seq_decode_ts=stats.mean(own) if own else None,
        prefill_ts=case.n_prompt * len(ends) * 1e9 / prefill_ns if prefill_ns > 0 else None,
        completion_tokens=sum(n for _, _, n in ends), ended_early=early,
    )  # fmt: skip
