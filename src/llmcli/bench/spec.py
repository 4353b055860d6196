"""`--scenario spec`: speculative decoding measured end to end, as `generate` runs it.

For every model, GPU layers, context setting and answer length (-n), the plain case (no
speculation: the baseline) and then every point of the speculative sweep (`--spec-type`,
`--spec-draft-n-max` = k, `--spec-draft-n-min`, `--spec-ngram-max/-min`, `--spec-adaptive`,
`--spec-exact`, `-md`) generate the same prompt greedily through `Engine.stream`, with the prompt
built as generate builds it (the chat template for an instruct model, plain text for a base one).
Per repetition: the time to first token (from building the prompt to the first generated token),
llama.cpp's prefill speed, the wall-clock decode speed (tokens after the first over the time from
the first to the last, as the chat scenario measures it: sampling, verification and
detokenization included), and the engine's counts: tokens drafted and accepted, target passes,
the k the adaptive policy chose. Each case's speed is also shown as a ratio to the plain case with
the same model, context and length, and its text is compared with the plain text (greedy: with
`--spec-exact` on, they must be identical).

One engine is loaded per model, context setting and proposer setting (they are load-time options)
and kept for all answer lengths; the KV cache is cleared before every run, so each run evaluates
the whole prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from llmcli import defaults, prompting
from llmcli.bench.results import ModelSummary, SpecResult, SpecSample
from llmcli.bench.runner import Backend, Finished, Interrupted, Measurer, Step, now_iso
from llmcli.bench.sweep import ContextSpec, Sweep, answer_settings
from llmcli.contract import Done, SamplingParams, SpecOptions, Token
from llmcli.errors import InvalidModelError, LlmcliError, UsageError

# A copy-heavy default: a short source file, then a request to repeat it. Prompt lookup finds most
# of the answer in the prompt. It is kept short (about 200 tokens with SmolLM2's template) so that
# the prompt and a 128-token answer stay in the cache size where --spec-exact allows batches on CPU
# builds; use --prompt-file for a longer document.
SOURCE = '''def moving_average(values, window):
    """The mean of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out
'''
DEFAULT_PROMPT = f"{SOURCE}\nThe same file again, unchanged:\n"


@dataclass
class SpecSweep:
    """Parsed values of the speculative flags; every list sweeps."""

    kinds: list[str] = field(default_factory=lambda: ["none", "lookup"])
    draft_max: list[int] = field(default_factory=lambda: [defaults.SPEC_DRAFT_N_MAX])
    draft_min: list[int] = field(default_factory=lambda: [defaults.SPEC_DRAFT_N_MIN])
    ngram_max: list[int] = field(default_factory=lambda: [defaults.SPEC_NGRAM_MAX])
    ngram_min: list[int] = field(default_factory=lambda: [defaults.SPEC_NGRAM_MIN])
    adaptive: list[bool] = field(default_factory=lambda: [True])
    exact: list[bool] = field(default_factory=lambda: [False])
    model_draft: str | None = None  # as the user named it
    model_draft_path: str | None = None  # resolved by `check`
    gpu_layers_draft: int | None = None
    ctx_size_draft: int | None = None
    type_k_draft: str | None = None  # -ctkd (None: the target's)
    type_v_draft: str | None = None

    def points(self) -> list[SpecOptions]:
        """The plain baseline first, then every speculative setting (k = 0 is the baseline)."""
        points = [SpecOptions()]
        seen = {_key(points[0])}
        for kind in self.kinds:
            if kind == "none":
                continue
            ngrams = [(a, b) for a in self.ngram_max for b in self.ngram_min]
            if kind != "lookup":
                ngrams = [(0, 0)]
            for k in self.draft_max:
                for n_min in self.draft_min:
                    for ng_max, ng_min in ngrams:
                        for adaptive in self.adaptive:
                            for exact in self.exact:
                                point = self._point(kind, k, n_min, ng_max, ng_min, adaptive, exact)
                                if point is not None and _key(point) not in seen:
                                    seen.add(_key(point))
                                    points.append(point)
        return points

    def _point(self, kind, k, n_min, ng_max, ng_min, adaptive, exact) -> SpecOptions | None:
        if k == 0:
            return SpecOptions()  # nothing drafted: the plain case
        if kind == "lookup" and ng_min > ng_max:
            return None
        point = SpecOptions(kind=kind, draft_max=k, draft_min=min(n_min, k), adaptive=adaptive, exact=exact)
        if kind == "lookup":
            point = replace(point, ngram_max=ng_max, ngram_min=ng_min)
        else:
            point = replace(point, model_draft=self.model_draft_path or self.model_draft,
                            model_draft_ref=self.model_draft, gpu_layers_draft=self.gpu_layers_draft,
                            ctx_size_draft=self.ctx_size_draft, type_k_draft=self.type_k_draft,
                            type_v_draft=self.type_v_draft)  # fmt: skip
        point.validate()
        return point


def _key(spec: SpecOptions) -> tuple:
    return tuple(sorted(spec.settings().items())) if spec.enabled else ("none",)


def label(spec: SpecOptions) -> str:
    """A short name for a proposer setting: "plain", "lookup k=8", "draft k=4 fixed exact"."""
    if not spec.enabled:
        return "plain"
    parts = [f"{spec.kind} k={spec.draft_max}"]
    if spec.draft_min != defaults.SPEC_DRAFT_N_MIN:
        parts.append(f"min={spec.draft_min}")
    default_ngrams = (defaults.SPEC_NGRAM_MAX, defaults.SPEC_NGRAM_MIN)
    if spec.kind == "lookup" and (spec.ngram_max, spec.ngram_min) != default_ngrams:
        parts.append(f"ngram={spec.ngram_min}-{spec.ngram_max}")
    if not spec.adaptive:
        parts.append("fixed")
    if spec.exact:
        parts.append("exact")
    return " ".join(parts)


@dataclass(frozen=True)
class SpecCase:
    model: str  # the resolved model key
    n_gpu_layers: int
    context: ContextSpec
    n_gen: int
    spec_index: int  # into `SpecPlan.points`


@dataclass
class SpecOptionsRun:
    """How every case runs: repetitions, warm-up, context size, the prompt."""

    reps: int = 5
    warmup: bool = True
    ctx_size: int | None = None
    prompt: str = DEFAULT_PROMPT
    prompt_source: str = "default"
    points: list[SpecOptions] = field(default_factory=lambda: [SpecOptions()])


def expand(sweep: Sweep, points: list[SpecOptions]) -> list[SpecCase]:
    """Cases ordered so that one engine serves consecutive ones: model, GPU layers, context settings,
    proposer setting (the plain baseline first), answer length."""
    lengths, contexts = answer_settings(sweep, "spec")
    return [
        SpecCase(str(model), ngl, context, n, i)
        for model in sweep.models
        for ngl in sweep.gpu_layers
        for context in contexts
        for i in range(len(points))
        for n in lengths
    ]


def check(spec: SpecSweep, models: dict[str, ModelSummary], backend: Backend, offline: bool) -> None:
    """Resolve the draft model and refuse it, before anything runs, when it is not a valid GGUF
    file or its vocabulary differs from a target's."""
    if "draft" not in spec.kinds:
        return
    from llmcli.hub.resolve import resolve_model

    if not spec.model_draft:
        raise UsageError("--spec-type draft needs a draft model: -md/--model-draft REF")
    try:
        resolved = resolve_model(spec.model_draft, offline=offline)
    except LlmcliError as exc:  # say which of the two references it is
        raise exc.about("draft model") from None
    spec.model_draft_path = str(resolved.path)
    try:
        draft = backend.inspect(spec.model_draft_path, resolved.ref)  # the GGUF header, validated
    except InvalidModelError as exc:  # say which of the two files it is (inspect names the file)
        raise exc.about("draft model") from None
    if draft.pooling:
        raise UsageError(f"draft model {draft.filename} is an embedding model ({draft.architecture}, "
                         f"{draft.pooling} pooling): it proposes no tokens",
                         hint="-md needs a small generative model of the same vocabulary")  # fmt: skip
    for path in models:
        backend.check_draft(path, spec.model_draft_path)


class Spec(Measurer):
    """One engine per model, context and proposer setting (load-time options), calibrated once and
    kept for every answer length; each case's result is compared with its plain baseline."""

    def __init__(self, models: dict[str, ModelSummary], backend: Backend, options: SpecOptionsRun,
                 delay_s: float = 0.0) -> None:  # fmt: skip
        self.models, self.backend, self.options = models, backend, options
        self.reps, self.delay_s = options.reps, delay_s
        self.baselines: dict[tuple, SpecResult] = {}

    def key(self, case: SpecCase) -> tuple:
        return (case.model, case.n_gpu_layers, case.context, case.spec_index)

    def open(self, cases: list[SpecCase]):
        case = cases[0]
        options = case.context.engine_options(case.n_gpu_layers, self.options.ctx_size,
                                              self.options.points[case.spec_index])  # fmt: skip
        engine = self.backend.chat_engine(self.models[case.model], options)
        try:
            if engine.costs_pending:  # measured here: what later runs decide by
                engine.calibrate()
            fmt, tokens = _prompt(engine, self.options.prompt)
            for each in cases:
                _check_fits(each, len(tokens), engine.n_ctx)
        except BaseException:
            self.close((engine, ""))
            raise
        return engine, fmt

    def close(self, held) -> None:
        engine = held[0]
        engine.close()
        self.backend.release(engine)

    def measure(self, case: SpecCase, held, step: Step) -> Iterator[Finished]:
        engine, fmt = held
        result = _run_case(case, self.models[case.model], engine, fmt, self.backend, self.options, step)
        where = (case.model, case.n_gpu_layers, case.context, case.n_gen)
        if result.plain:
            self.baselines[where] = result
        else:
            result.baseline = self.baselines.get(where)
        yield Finished(result.name, [result], result)


def _prompt(engine, text: str) -> tuple[str, list[int]]:
    """The prompt's tokens as generate builds them: a user turn through the chat template, or plain
    text for a base model."""
    how, _ = prompting.generate_format(engine, raw=False, fallback_template=False)
    if how == "raw":
        return how, prompting.raw_tokens(engine, text)
    return how, prompting.chat_tokens(engine, prompting.messages_for(text, None))


def _check_fits(case: SpecCase, prompt_tokens: int, n_ctx: int) -> None:
    if prompt_tokens + case.n_gen > n_ctx:
        raise UsageError(
            f"the prompt ({prompt_tokens} tokens) and -n {case.n_gen} do not fit the context of "
            f"{n_ctx} tokens",
            hint="use a larger --ctx-size, a shorter prompt or a smaller -n",
        )


def _run_case(case, model, engine, fmt, backend, options: SpecOptionsRun, step: Step) -> SpecResult:
    spec = options.points[case.spec_index]
    result = SpecResult(
        model=model, context=case.context, n_gpu_layers=case.n_gpu_layers,
        gpu_layers_offloaded=getattr(engine.info, "gpu_layers", 0), n_ctx=engine.n_ctx,
        max_tokens=case.n_gen, spec=spec, label=label(spec), prompt_source=options.prompt_source,
        prompt_format=fmt, test_time=now_iso(), warmup=options.warmup,
    )  # fmt: skip
    if options.warmup:
        step(result.name, "warmup", 0, options.reps)
        once(engine, options.prompt, fmt, case.n_gen, backend.clock, step.stop)
    before = backend.load_snapshot()
    for rep in range(options.reps):
        step(result.name, "rep", rep + 1, options.reps)
        result.samples.append(once(engine, options.prompt, fmt, case.n_gen, backend.clock, step.stop))
    result.other_load = backend.other_load(before, backend.load_snapshot())
    return result


def once(engine, text: str, fmt: str, n_gen: int, clock: Callable[[], int], stop=None) -> SpecSample:
    """One greedy generation of the prompt from an empty cache."""
    if stop is not None and stop.is_set():
        raise Interrupted
    engine.reset()
    start = clock()
    if fmt == "raw":
        tokens = prompting.raw_tokens(engine, text)
    else:
        tokens = prompting.chat_tokens(engine, prompting.messages_for(text, None))
    first = last = None
    n_first = n_last = 0
    done: Done | None = None
    for event in engine.stream(tokens, SamplingParams(temperature=0.0, seed=0, max_tokens=n_gen)):
        if isinstance(event, Token):
            if event.n_tokens == n_last and first is not None:
                continue  # held-back text released at the end: no new token
            last, n_last = clock(), event.n_tokens
            if first is None:
                first, n_first = last, event.n_tokens
        elif isinstance(event, Done):
            done = event
    if done is None or done.finish_reason == "interrupted":
        raise Interrupted
    decode_ts = None
    if first is not None and last is not None and last > first and n_last > n_first:
        decode_ts = (n_last - n_first) * 1e9 / (last - first)
    s = done.stats
    report = s.speculative or {}
    return SpecSample(
        prompt_tokens=len(tokens), completion_tokens=s.completion_tokens, decode_tokens=s.decode_tokens,
        ttft_ns=(first if first is not None else clock()) - start, prefill_ts=s.prefill_tps,
        decode_ts=decode_ts, drafted=s.drafted_tokens, accepted=s.accepted_tokens,
        target_passes=s.passes, k_chosen=dict(report.get("k_chosen") or {}),
        exact_positions=report.get("exact_positions"), text=done.text,
    )  # fmt: skip
