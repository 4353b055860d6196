"""`--scenario chat`: the end-to-end path a user feels, turn by turn, with the KV cache reused and not.

A scripted conversation goes through exactly what `llmcli chat` does: the model's chat template (or
the architecture's fallback), the real tokenizer, `Engine.stream` with greedy sampling and a token
limit. For every turn it records the time to first token (from rendering the prompt to the first
generated token) and the wall-clock decode speed (tokens after the first over the time from the
first to the last), so sampling and detokenization are included, unlike in the pp/tg tests.

Two cache modes: `reuse` keeps the KV cache between turns, so each turn evaluates only the new
messages; `fresh` clears it before every turn, so each turn re-evaluates the whole history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from llmcli import prompting
from llmcli.bench.results import ChatTurnResult, ModelSummary
from llmcli.bench.runner import Backend, Finished, Interrupted, Measurer, Step, now_iso
from llmcli.bench.sweep import Case, Sweep, TestSpec, answer_settings
from llmcli.contract import Done, SamplingParams, Token
from llmcli.conversation import Conversation

MODES = ("reuse", "fresh")
SYSTEM = "You are a helpful assistant. Answer in a few sentences."
TURNS = (
    "What is the difference between a CPU and a GPU?",
    "Why does that matter for running language models at home?",
    "Give me three tips to make a small model run faster on a laptop.",
    "Summarize our conversation in one sentence.",
)


@dataclass
class TurnSample:
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ttft_ns: int
    decode_ts: float | None  # None when fewer than two tokens were generated


@dataclass
class ChatOptions:
    reps: int = 5
    warmup: bool = True
    ctx_size: int | None = None
    system: str = SYSTEM
    turns: tuple[str, ...] = TURNS


def planned(cases: list[Case], options: ChatOptions) -> int:
    """Results a complete run produces: one per case, cache mode and turn."""
    return len(cases) * len(MODES) * len(options.turns)


def expand(sweep: Sweep) -> list[Case]:
    """Chat cases: every model, GPU layers and context setting, for each answer length in -n."""
    lengths, contexts = answer_settings(sweep, "chat")
    return [
        Case(str(model), ngl, context, TestSpec(0, n))
        for model in sweep.models
        for ngl in sweep.gpu_layers
        for context in contexts
        for n in lengths
    ]


class Chat(Measurer):
    """Both cache modes of every case, each on a fresh engine; each mode's turns are kept as soon as
    the mode finishes."""

    def __init__(self, models: dict[str, ModelSummary], backend: Backend, options: ChatOptions,
                 delay_s: float = 0.0) -> None:  # fmt: skip
        self.models, self.backend, self.options = models, backend, options
        self.reps, self.delay_s = options.reps, delay_s

    def open(self, cases: list[Case]) -> Any:
        case = cases[0]
        return self.backend.chat_engine(self.models[case.model],
                                        case.context.engine_options(case.n_gpu_layers, self.options.ctx_size))

    def close(self, engine: Any) -> None:
        engine.close()
        self.backend.release(engine)

    def measure(self, case: Case, engine: Any, step: Step) -> Iterator[Finished]:
        options, backend, model = self.options, self.backend, self.models[case.model]
        started = now_iso()
        if options.warmup:
            step("chat", "warmup", 0, options.reps)
            converse(engine, options, "reuse", case.test.n_gen, backend.clock, step.stop)
        for mode in MODES:
            samples = []
            before = backend.load_snapshot()
            for rep in range(options.reps):
                step(f"chat ({mode})", "rep", rep + 1, options.reps)
                samples.append(converse(engine, options, mode, case.test.n_gen, backend.clock, step.stop))
            other = backend.other_load(before, backend.load_snapshot())
            yield Finished(f"chat ({mode})",
                           _turn_results(case, model, engine, mode, samples, started, options.warmup, other))


def converse(
    engine, options: ChatOptions, mode: str, max_tokens: int, clock: Callable[[], int], stop=None
) -> list[TurnSample]:
    """One run of the whole script; the assistant's real answers become the history."""
    engine.reset()
    conversation = Conversation(system=options.system)
    fmt = prompting.prompt_format(engine)
    params = SamplingParams(temperature=0.0, seed=0, max_tokens=max_tokens)
    samples = []
    for text in options.turns:
        if stop is not None and stop.is_set():
            raise Interrupted
        conversation.add_user(text)
        if mode == "fresh":
            engine.reset()
        sample, answer = _turn(engine, conversation, fmt, params, clock)
        conversation.add_assistant(answer)
        samples.append(sample)
    return samples


def _turn(engine, conversation: Conversation, fmt, params: SamplingParams, clock) -> tuple[TurnSample, str]:
    start = clock()
    tokens = prompting.chat_tokens(engine, conversation.template_messages(), fmt)
    first = last = None
    done: Done | None = None
    n = 0
    for event in engine.stream(tokens, params):
        if isinstance(event, Token):
            last = clock()
            first = last if first is None else first
            n += 1
        elif isinstance(event, Done):
            done = event
    if done is None or done.finish_reason == "interrupted":
        raise Interrupted
    decode_ts = (n - 1) * 1e9 / (last - first) if n > 1 and first is not None and last > first else None
    ttft = (first if first is not None else clock()) - start
    s = done.stats
    return TurnSample(len(tokens), s.cached_tokens, s.completion_tokens, ttft, decode_ts), done.text


def _turn_results(case, model, engine, mode, samples, started, warmup, other) -> list[ChatTurnResult]:
    results = []
    for turn in range(len(samples[0])):
        per_rep = [rep[turn] for rep in samples]
        results.append(ChatTurnResult(
            model=model, context=case.context, n_gpu_layers=case.n_gpu_layers,
            gpu_layers_offloaded=getattr(engine.info, "gpu_layers", 0), n_ctx=engine.n_ctx,
            max_tokens=case.test.n_gen, mode=mode, turn=turn + 1, test_time=started,
            ttft_ns=[s.ttft_ns for s in per_rep], prompt_tokens=[s.prompt_tokens for s in per_rep],
            cached_tokens=[s.cached_tokens for s in per_rep],
            completion_tokens=[s.completion_tokens for s in per_rep],
            decode_samples_ts=[s.decode_ts for s in per_rep if s.decode_ts is not None], warmup=warmup,
            other_load=other,
        ))  # fmt: skip
    return results
