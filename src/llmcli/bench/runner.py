"""Run benchmark cases on a backend and collect the timings; no printing (progress goes to a callback).

The method is llama-bench's: for each case, an untimed warm-up run, then `reps` timed runs. Before
each run the KV cache is brought to exactly `depth` tokens (untimed); the timed part is the prefill
of `n_prompt` synthetic tokens in batches of `n_batch` followed by `n_gen` single-token decodes, with
`llama_synchronize` after the prefill and after every decode. Token ids are drawn before the clock
starts, so tokenization and sampling are excluded, as in llama-bench.

A model is loaded once per (model, GPU layers, weight repacking) and a context created once per
context settings.
`run_interruptible` runs the loop under the engine's Ctrl-C handling, the one generate uses: the
wakeup-fd watcher aborts a long `llama_decode` through llama.cpp's abort callback at once; whatever
finished is kept and the run is marked incomplete.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import groupby
from typing import Any, Protocol

from llmcli.bench.results import BenchRun, Measured, ModelSummary, TestResult
from llmcli.bench.sweep import Case, ContextSpec, TestSpec
from llmcli.errors import UsageError

CTX_ALIGN = 256  # llama.cpp pads the context to a multiple of 256


class Interrupted(Exception):
    """The run was stopped (Ctrl-C); raised inside the loop, caught by `run_tests`."""


class BenchContext(Protocol):
    def set_depth(self, depth: int, rng: random.Random) -> None:
        """Leave exactly `depth` tokens in the KV cache (untimed)."""

    def prepare(self, test: TestSpec, rng: random.Random) -> Any:
        """Everything the timed part needs (token ids, batches), built before the clock starts."""

    def run(self, prepared: Any) -> None:
        """The timed part: prefill, then single-token decodes, synchronized."""

    def close(self) -> None: ...


class LoadedModel(Protocol):
    gpu_layers_offloaded: int

    def new_context(self, spec: ContextSpec, n_ctx: int) -> BenchContext: ...

    def close(self) -> None: ...


class Backend(Protocol):
    """What the runner needs from llama.cpp (`llama_backend.LlamaBackend`) or a fake (`fake.FakeBackend`)."""

    clock: Callable[[], int]  # nanoseconds

    def environment(self) -> dict[str, Any]:
        """Versions, backend, CPU and GPU (`llmcli.bench.machine.collect`)."""

    def inspect(self, path: str, ref: str) -> ModelSummary: ...

    def load(self, model: ModelSummary, n_gpu_layers: int, repack: bool | None = None) -> LoadedModel: ...

    def weight_repack(self, requested: bool | None) -> bool:
        """Whether a model loads with its weights repacked: as asked, else the build's default."""

    def chat_engine(self, model: ModelSummary, options: Any) -> Any:
        """A full `Engine` for the chat scenario (built from `llmcli.contract.EngineOptions`)."""

    def release(self, thing: Any) -> None:
        """Forget a closed chat engine."""

    def check_draft(self, target: str, draft: str) -> None:
        """Refuse a draft model whose vocabulary differs from the target's (UsageError)."""

    def check_memory(self, model: ModelSummary, options: Any) -> None:
        """Refuse (ResourceError, with the numbers) a model whose weights and KV cache at these
        `EngineOptions` (and a draft model's) would not fit the free memory."""

    def interrupt(self) -> None:
        """Abort the decode in progress (called from another thread)."""

    def interrupt_on_sigint(self, interrupt: Callable[[], None]) -> AbstractContextManager[None]:
        """While inside, the first Ctrl-C calls `interrupt` and a second raises KeyboardInterrupt
        (`llmcli.engine.measure.interrupt_on_sigint`, the mechanism generate uses)."""

    def load_snapshot(self) -> Any:
        """A snapshot of machine-wide CPU use (`llmcli.bench.cpu_load.snapshot`)."""

    def other_load(self, before: Any, after: Any) -> float | None:
        """Share of the CPU used by other processes between two snapshots (`load.other_share`)."""


@dataclass
class Event:
    """Progress of a run, for the caller to show: `phase` is "warmup", "rep" or "done"."""

    index: int  # 0-based case number
    total: int
    name: str
    phase: str
    rep: int = 0
    reps: int = 0
    result: Any = None  # the finished result (TestResult, SpecResult) with phase "done"


# -- context sizing --------------------------------------------------------------------------


def context_sizes(
    cases: list[Case], models: dict[str, ModelSummary], ctx_size: int | None
) -> dict[tuple, int]:
    """n_ctx for each (model, GPU layers, context settings) group, checked against what fits.

    With --ctx-size the context is that size and a test that does not fit is an error; without it
    the context is raised to fit the largest depth + prompt + generation of the group (rounded up to
    256), up to the model's training context.
    """
    sizes: dict[tuple, int] = {}
    for case in cases:
        check_fits(case, models[case.model], ctx_size)
        key = group_key(case)
        need = _round_up(case.test.context_needed)
        sizes[key] = ctx_size if ctx_size else max(sizes.get(key, CTX_ALIGN), need)
    return sizes


def check_fits(case: Case, model: ModelSummary, ctx_size: int | None) -> None:
    t = case.test
    need = t.context_needed
    parts = f"depth {t.n_depth} + prompt {t.n_prompt} + generation {t.n_gen}"
    if ctx_size and need > ctx_size:
        raise UsageError(
            f"{t.name} needs {need} tokens of context ({parts}) but --ctx-size is {ctx_size}",
            hint="raise --ctx-size, or leave it out to size the context to fit",
        )
    if not ctx_size and model.n_ctx_train and need > model.n_ctx_train:
        raise UsageError(
            f"{t.name} needs {need} tokens of context ({parts}) but {model.filename} "
            f"was trained with {model.n_ctx_train}",
            hint="use a smaller -d, -p or -n",
        )


def group_key(case: Case) -> tuple:
    return (case.model, case.n_gpu_layers, case.context)


def _round_up(n: int) -> int:
    return max(CTX_ALIGN, -(-n // CTX_ALIGN) * CTX_ALIGN)


# -- the loop --------------------------------------------------------------------------------


@dataclass
class Options:
    reps: int = 5
    warmup: bool = True
    seed: int = 1234
    delay_s: float = 0.0
    ctx_size: int | None = None


def run_tests(
    cases: list[Case],
    models: dict[str, ModelSummary],
    backend: Backend,
    run: BenchRun,
    options: Options,
    progress: Callable[[Event], None] = lambda event: None,
    stop: threading.Event | None = None,
) -> BenchRun:
    """Measure every case into `run.results`; on Ctrl-C keep what finished and mark the run incomplete."""
    loop = _Loop(cases, models, backend, run, options, progress, stop)
    try:
        loop.run()
    except (Interrupted, KeyboardInterrupt) as exc:
        reraise_second_ctrl_c(exc, stop)
        run.complete = False
        run.interrupted = True
    run.finished_at = now_iso()
    return run


@dataclass
class _Loop:
    cases: list[Case]
    models: dict[str, ModelSummary]
    backend: Backend
    out: BenchRun
    options: Options
    progress: Callable[[Event], None]
    stop: threading.Event | None

    def run(self) -> None:
        self.sizes = context_sizes(self.cases, self.models, self.options.ctx_size)
        self.index = 0
        loads = groupby(self.cases, key=lambda c: (c.model, c.n_gpu_layers, c.context.repack))
        for (ref, ngl, repack), group in loads:
            loaded = self.backend.load(self.models[ref], ngl, repack)
            try:
                for _, same_context in groupby(group, key=lambda c: c.context):
                    self.run_context(loaded, list(same_context))
            finally:
                loaded.close()

    def run_context(self, loaded: LoadedModel, cases: list[Case]) -> None:
        n_ctx = self.sizes[group_key(cases[0])]
        context = loaded.new_context(cases[0].context, n_ctx)
        try:
            for case in cases:
                self.run_case(case, loaded, context, n_ctx)
        finally:
            context.close()

    def run_case(self, case: Case, loaded: LoadedModel, context: BenchContext, n_ctx: int) -> None:
        index, total, name = self.index, len(self.cases), case.test.name
        _check_stop(self.stop)

        def phase(kind: str, rep: int) -> None:
            self.progress(Event(index, total, name, kind, rep, self.options.reps))

        model = self.models[case.model]
        result = measure(case, model, loaded, context, n_ctx, self.backend, self.options, phase, self.stop)
        self.out.add(result)
        self.progress(Event(index, total, name, "done", result=result))
        self.index += 1
        _pause(self.options.delay_s, index, total, self.stop)


def measure(
    case: Case,
    model: ModelSummary,
    loaded: LoadedModel,
    context: BenchContext,
    n_ctx: int,
    backend: Backend,
    options: Options,
    phase: Callable[[str, int], None] = lambda phase, rep: None,
    stop: threading.Event | None = None,
) -> TestResult:
    """One case: an optional warm-up run, then `reps` timed runs at the requested depth."""
    test, clock = case.test, backend.clock
    rng = random.Random(f"{options.seed}:{test.name}")
    started = now_iso()
    if options.warmup:
        phase("warmup", 0)
        context.set_depth(test.n_depth, rng)
        context.run(context.prepare(test, rng))
    timing = Measured(test.n_tokens)
    before = backend.load_snapshot()
    for rep in range(options.reps):
        _check_stop(stop)
        phase("rep", rep + 1)
        context.set_depth(test.n_depth, rng)
        prepared = context.prepare(test, rng)
        start = clock()
        context.run(prepared)
        timing.samples_ns.append(clock() - start)
    other = backend.other_load(before, backend.load_snapshot())
    return TestResult(case, model, n_ctx, loaded.gpu_layers_offloaded, started, timing, options.warmup, other)


def _check_stop(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise Interrupted


def _pause(delay_s: float, index: int, total: int, stop: threading.Event | None) -> None:
    """llama-bench's --delay: let the machine cool down between tests (not after the last)."""
    if delay_s > 0 and index + 1 < total:
        if stop is not None:
            stop.wait(delay_s)
        else:
            time.sleep(delay_s)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# -- interruption ----------------------------------------------------------------------------


def run_interruptible(work: Callable[[threading.Event], Any], backend: Backend) -> Any:
    """Run `work(stop)` on this thread; Ctrl-C sets `stop` and aborts the decode in progress.

    The Ctrl-C handling is generate's (`Backend.interrupt_on_sigint`): CPython's C-level handler
    wakes a watcher thread through the wakeup fd, which raises llama.cpp's abort flag even while
    this thread is inside one long `llama_decode`. A second Ctrl-C while the run winds down raises
    KeyboardInterrupt out of here (`reraise_second_ctrl_c`).
    """
    stop = threading.Event()

    def interrupt() -> None:
        stop.set()
        backend.interrupt()

    with backend.interrupt_on_sigint(interrupt):
        return work(stop)


def reraise_second_ctrl_c(exc: BaseException, stop: threading.Event | None) -> None:
    """A KeyboardInterrupt after `stop` was set is a second Ctrl-C: it ends the run at once.

    (A first Ctrl-C sets `stop` without raising; a KeyboardInterrupt with `stop` unset comes from a
    caller without `run_interruptible`, and is recorded as an interrupted run.)"""
    if isinstance(exc, KeyboardInterrupt) and stop is not None and stop.is_set():
        raise exc
