"""Run benchmark cases on a backend and collect the timings; no printing (progress goes to a callback).

The method is llama-bench's: for each case, an untimed warm-up run, then `reps` timed runs. Before
each run the KV cache is brought to exactly `depth` tokens (untimed); the timed part is the prefill
of `n_prompt` synthetic tokens in batches of `n_batch` followed by `n_gen` single-token decodes, with
`llama_synchronize` after the prefill and after every decode. Token ids are drawn before the clock
starts, so tokenization and sampling are excluded, as in llama-bench.

`drive` is the one loop of every scenario (these tests, chat, spec, batch, embed and the serving
benchmark): each brings a small `Measurer` (what a group of cases loads, how one case is measured)
and the loop groups, loads, measures, keeps each result as it finishes, pauses `--delay` between
cases and handles Ctrl-C. Here, a model is loaded once per (model, GPU layers, weight repacking)
and a context created once per context settings (`Tests`).
`run_interruptible` runs the loop under the engine's Ctrl-C handling, the one generate uses: the
wakeup-fd watcher aborts a long `llama_decode` through llama.cpp's abort callback at once; whatever
finished is kept and the run is marked incomplete.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
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
    """What the runner needs from llama.cpp (`llama_backend.LlamaBackend`), or from a test's fake
    (`tests/benchfake.py`)."""

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
        """A snapshot of machine-wide CPU use (`llmcli.engine.cpu_load.snapshot`)."""

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


# -- the one loop ---------------------------------------------------------------------------


@dataclass
class Finished:
    """What measuring a case gave: the results to keep (at once, so Ctrl-C later keeps them), the
    one its progress line reports, and whether the run ends after it (the rate sweep's verdict)."""

    name: str
    results: list
    shown: Any = None
    last: bool = False


@dataclass
class Step:
    """Progress of the case being measured: `step(name, phase, rep, reps)` is one `Event`; `stop`
    is set by Ctrl-C (a scenario checks it between repetitions: `step.check()`)."""

    progress: Callable[[Event], None]
    index: int
    total: int
    stop: threading.Event | None = None

    def check(self) -> None:
        _check_stop(self.stop)

    def __call__(self, name: str, phase: str, rep: int = 0, reps: int = 0, result: Any = None) -> None:
        self.progress(Event(self.index, self.total, name, phase, rep, reps, result))


class Measurer:
    """What measures the cases of one scenario (tests, chat, spec, batch, embed, serve) in
    `drive`: consecutive cases with the same `key` share what `open` sets up (a loaded model, an
    engine, a context), which `close` releases; `measure` measures one case on it, yielding each
    part as it finishes. `end` releases what outlives a group (the tests scenario's model, loaded
    once for the contexts it serves)."""

    reps: int = 0
    delay_s: float = 0.0

    def key(self, case: Any) -> Any:
        return case

    def open(self, cases: list) -> Any:
        return None

    def close(self, held: Any) -> None:
        pass

    def end(self) -> None:
        pass

    def measure(self, case: Any, held: Any, step: Step) -> Iterator[Finished]:
        raise NotImplementedError


def drive(
    cases: list,
    run: BenchRun,
    measurer: Measurer,
    progress: Callable[[Event], None] = lambda event: None,
    stop: threading.Event | None = None,
) -> BenchRun:
    """The one loop of every scenario: group the cases by what they load, load, measure each case,
    keep each result as it finishes, pause `--delay` between cases; Ctrl-C (or `stop`) keeps what
    finished and marks the run incomplete and interrupted."""

    index = 0
    try:
        for _, group in groupby(cases, key=measurer.key):
            members = list(group)
            _check_stop(stop)
            held = measurer.open(members)
            try:
                for case in members:
                    _check_stop(stop)
                    step = Step(progress, index, len(cases), stop)
                    last = False
                    for part in measurer.measure(case, held, step):
                        run.add(*part.results)
                        step(part.name, "done", measurer.reps, measurer.reps, part.shown)
                        last = last or part.last
                    if last:
                        return run
                    index += 1
                    _pause(measurer.delay_s, index - 1, len(cases), stop)
            finally:
                measurer.close(held)
    except (Interrupted, KeyboardInterrupt) as exc:
        reraise_second_ctrl_c(exc, stop)
        run.complete = False
        run.interrupted = True
    finally:
        measurer.end()
        run.finished_at = now_iso()
    return run


# -- the tests scenario ----------------------------------------------------------------------


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
    return drive(cases, run, Tests(models, backend, options, context_sizes(cases, models, options.ctx_size)),
                 progress, stop)  # fmt: skip


class Tests(Measurer):
    """llama-bench's pp/tg/pg tests: a model loaded once per (model, GPU layers, weight repacking),
    a context created once per context settings, each test measured in it (`measure`)."""

    def __init__(self, models: dict[str, ModelSummary], backend: Backend, options: Options,
                 sizes: dict[tuple, int]) -> None:  # fmt: skip
        self.models, self.backend, self.options, self.sizes = models, backend, options, sizes
        self.reps, self.delay_s = options.reps, options.delay_s
        self.loaded: tuple[tuple, LoadedModel] | None = None  # kept while consecutive groups share it

    def key(self, case: Case) -> tuple:
        return group_key(case)

    def open(self, cases: list[Case]) -> tuple[LoadedModel, BenchContext, int]:
        first = cases[0]
        load = (first.model, first.n_gpu_layers, first.context.repack)
        if self.loaded is None or self.loaded[0] != load:
            self.end()
            self.loaded = (load, self.backend.load(self.models[first.model], first.n_gpu_layers,
                                                   first.context.repack))  # fmt: skip
        loaded = self.loaded[1]
        n_ctx = self.sizes[group_key(first)]
        return loaded, loaded.new_context(first.context, n_ctx), n_ctx

    def close(self, held: tuple[LoadedModel, BenchContext, int]) -> None:
        held[1].close()

    def end(self) -> None:
        if self.loaded is not None:
            loaded, self.loaded = self.loaded[1], None
            loaded.close()

    def measure(self, case: Case, held, step: Step) -> Iterator[Finished]:
        loaded, context, n_ctx = held
        name, reps = case.test.name, self.options.reps
        result = measure(case, self.models[case.model], loaded, context, n_ctx, self.backend, self.options,
                         lambda kind, rep: step(name, kind, rep, reps), step.stop)  # fmt: skip
        yield Finished(name, [result], result)


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
