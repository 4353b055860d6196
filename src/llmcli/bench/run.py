"""One `llmcli bench` invocation from parsed flags to a `BenchRun`: plan, check, probe, run.

Everything that can be refused is refused before anything is measured: unknown or invalid models
(every model's GGUF header is read first), sizes that do not fit the context, empty sweeps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmcli.bench import batch as batched
from llmcli.bench import chat, runner
from llmcli.bench import spec as speculative
from llmcli.bench.results import BenchRun, ModelSummary
from llmcli.bench.sweep import ContextSpec, Sweep, drop_unsupported, expand
from llmcli.contract import EngineOptions
from llmcli.errors import UsageError

DEFAULT_SCENARIO = "tests"


@dataclass
class Request:
    sweep: Sweep
    scenario: str = DEFAULT_SCENARIO  # a name in SCENARIOS
    reps: int = 5
    warmup: bool = True
    roofline: bool = False
    ctx_size: int | None = None
    delay_s: float = 0.0
    seed: int = 1234
    offline: bool = False
    busy: int = 0  # busy processes started for the run (decode next to other work)
    force: bool = False  # --force: no memory-fit check
    spec: speculative.SpecSweep = field(default_factory=speculative.SpecSweep)  # --scenario spec
    prompt: str = speculative.DEFAULT_PROMPT  # --scenario spec
    prompt_source: str = "default"
    parallel: list[int] = field(default_factory=lambda: list(batched.DEFAULT_PARALLEL))  # --scenario batch


@dataclass
class Plan:
    models: dict[str, ModelSummary]
    cases: list  # sweep.Case, or spec.SpecCase for --scenario spec
    scenario: Scenario  # from `SCENARIOS`, looked up once here
    dropped: list[ContextSpec] = field(default_factory=list)  # settings llama.cpp would refuse


def plan(request: Request, backend: runner.Backend) -> Plan:
    """Resolve and inspect every model, expand the sweep, and check every case fits its context."""
    scenario = SCENARIOS[request.scenario]
    models = resolve_models(request.sweep.models, backend, request.offline)
    for summary in models.values():
        refuse_embedding(summary, scenario.name)
    request.sweep.models = list(models)
    # --repack as asked, else the build's default: every record says which layout it measured
    request.sweep.repack = list(dict.fromkeys(backend.weight_repack(r) for r in request.sweep.repack))
    _, dropped = drop_unsupported(request.sweep.contexts())
    cases = scenario.expand(request, models, backend)
    if not request.force:
        check_memory(request, scenario, cases, models, backend)
    return Plan(models, cases, scenario, dropped)


def check_memory(
    request: Request,
    scenario: Scenario,
    cases: list,
    models: dict[str, ModelSummary],
    backend: runner.Backend,
) -> None:
    """Refuse, before anything is measured, a case whose model and context (and draft model) would
    not fit the free memory, as generate and chat refuse it: llama.cpp would otherwise fail at
    context creation in the middle of the run, or the machine would swap. `sizes`: the tests
    scenario's context per group (`runner.context_sizes`)."""
    from llmcli.errors import ResourceError

    seen: set[tuple[str, str]] = set()
    for model, engine_options in scenario.loads(request, cases, models):
        if (key := (model, repr(engine_options))) not in seen:
            seen.add(key)
            try:
                backend.check_memory(models[model], engine_options)
            except ResourceError as exc:
                exc.hint = scenario.memory_hint(request) or exc.hint
                raise


def refuse_embedding(model: ModelSummary, scenario: str) -> None:
    """An embedding model writes no text: every scenario but embed refuses it, in one line, before
    anything loads (llama.cpp would abort in the middle of the run, or measure what no one runs)."""
    if model.pooling:
        command = "llmcli bench" if scenario == DEFAULT_SCENARIO else f"llmcli bench --scenario {scenario}"
        raise UsageError(
            f"{model.filename} is an embedding model ({model.architecture}, {model.pooling} pooling): "
            f"{command} measures a model that writes text",
            hint=f"measure it with llmcli bench --scenario embed -m {model.path}",
        )


def resolve_models(refs: list[str | None], backend: runner.Backend, offline: bool) -> dict[str, ModelSummary]:
    from llmcli import settings
    from llmcli.hub.resolve import resolve_model

    models: dict[str, ModelSummary] = {}
    for ref in refs:
        resolved = resolve_model(ref or settings.resolve("model") or None, offline=offline)
        key = str(resolved.path)
        if key not in models:
            models[key] = backend.inspect(key, resolved.ref)
    return models


def new_run(request: Request, the_plan: Plan, backend: runner.Backend) -> BenchRun:
    s = request.sweep
    settings: dict[str, Any] = {
        "scenario": the_plan.scenario.name, "repetitions": request.reps, "warmup": request.warmup,
        "seed": request.seed, "delay_s": request.delay_s, "ctx_size": request.ctx_size,
        "busy_processes": request.busy,
        "sweep": {
            "n_prompt": s.n_prompt, "n_gen": s.n_gen, "pg": [list(p) for p in s.pg], "n_depth": s.depth,
            "n_threads": s.threads, "n_gpu_layers": s.gpu_layers, "n_batch": s.n_batch,
            "n_ubatch": s.n_ubatch, "flash_attn": s.flash_attn, "type_k": s.type_k, "type_v": s.type_v,
            "repack": s.repack,
        },
    }  # fmt: skip
    the_plan.scenario.settings(request, settings)
    planned = the_plan.scenario.planned(request, the_plan.cases)
    return BenchRun(backend.environment(), settings, planned, runner.now_iso())


def execute(
    request: Request,
    the_plan: Plan,
    backend: runner.Backend,
    progress: Callable[[runner.Event], None] = lambda event: None,
    measure_bandwidth: Callable[[int], object] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> BenchRun:
    """Run the plan (Ctrl-C stops it cleanly, through generate's signal watcher); returns what finished.
    `on_record` gets each result's flat record as soon as that result finishes."""
    run = new_run(request, the_plan, backend)
    run.on_record = on_record
    if request.roofline:
        if measure_bandwidth is None:
            from llmcli.bench.membw import measure

            measure_bandwidth = measure
        run.bandwidth = measure_bandwidth(max(request.sweep.threads))

    def work(stop: threading.Event) -> BenchRun:
        measurer = the_plan.scenario.measurer(request, the_plan, backend)
        return runner.drive(the_plan.cases, run, measurer, progress, stop)

    from llmcli.engine import cpu_load
    from llmcli.errors import LlmcliError

    with cpu_load.background(request.busy):
        try:
            return runner.run_interruptible(work, backend)
        except LlmcliError as exc:  # a later case failed (a model that does not fit, say)
            if not run.results:
                raise
            run.complete = False  # what finished is kept, and marked incomplete
            run.error = exc
            run.finished_at = runner.now_iso()
            return run


# -- the scenarios ----------------------------------------------------------------------------


class Scenario(Protocol):
    """What sets one `--scenario` apart: its cases, how each loads, what its run records, and what
    measures them (`runner.Tests`, `chat.Chat`, `spec.Spec`, `batch.Batch`) in the one loop,
    `runner.drive`. Looked up once,
    by name, in `SCENARIOS`; the serving benchmark (`serve.py`) measures a server instead."""

    @property
    def name(self) -> str: ...

    @property
    def own_prompts(self) -> str | None:
        """Why -p, -pg and -d do not apply (the scenario brings its own prompts); None: they do."""
        ...

    @property
    def takes_spec(self) -> bool:
        """Whether the --spec-* flags, -md and the prompt flags apply."""
        ...

    def expand(self, request: Request, models: dict[str, ModelSummary], backend: runner.Backend) -> list:
        """The cases, refused here when one cannot run (a test past its context, a bad draft model)."""
        ...

    def loads(
        self, request: Request, cases: list, models: dict[str, ModelSummary]
    ) -> list[tuple[str, EngineOptions]]:
        """Each case's model and the options it loads with (for the memory check)."""
        ...

    def memory_hint(self, request: Request) -> str | None:
        """The hint of a refusal for memory, where the scenario knows a better one."""
        ...

    def settings(self, request: Request, settings: dict[str, Any]) -> None:
        """Add what this scenario's run records to the run's settings."""
        ...

    def planned(self, request: Request, cases: list) -> int:
        """Results a complete run produces."""
        ...

    def measurer(self, request: Request, the_plan: Plan, backend: runner.Backend) -> runner.Measurer:
        """What measures the cases in `runner.drive`, the one loop of every scenario."""
        ...


class _Base:
    own_prompts: str | None = None
    takes_spec = False

    def memory_hint(self, request: Request) -> str | None:
        return None

    def settings(self, request: Request, settings: dict[str, Any]) -> None:
        pass

    def planned(self, request: Request, cases: list) -> int:
        return len(cases)


class Tests(_Base):
    """llama-bench's pp/tg/pg tests, each in a context sized to fit its group (or --ctx-size)."""

    name = "tests"

    def expand(self, request: Request, models: dict[str, ModelSummary], backend: runner.Backend) -> list:
        cases = expand(request.sweep)
        runner.context_sizes(cases, models, request.ctx_size)  # every test checked to fit
        return cases

    def loads(
        self, request: Request, cases: list, models: dict[str, ModelSummary]
    ) -> list[tuple[str, EngineOptions]]:
        sizes = runner.context_sizes(cases, models, request.ctx_size)
        return [
            (case.model, case.context.engine_options(case.n_gpu_layers, sizes[runner.group_key(case)]))
            for case in cases
        ]

    def memory_hint(self, request: Request) -> str | None:
        if request.ctx_size:
            return None
        # the context was sized to fit the tests: smaller tests need less of it
        return "use a smaller -p, -n or -d or quantization, or --force to load anyway"

    def measurer(self, request: Request, the_plan: Plan, backend: runner.Backend) -> runner.Measurer:
        r = request
        options = runner.Options(r.reps, r.warmup, r.seed, r.delay_s, r.ctx_size)
        return runner.Tests(the_plan.models, backend, options,
                            runner.context_sizes(the_plan.cases, the_plan.models, r.ctx_size))


class Chat(_Base):
    """A scripted conversation through the chat template, KV cache reused and not (`chat.py`)."""

    name = "chat"
    own_prompts = "its prompts are the script's turns"

    def expand(self, request: Request, models: dict[str, ModelSummary], backend: runner.Backend) -> list:
        return chat.expand(request.sweep)

    def loads(
        self, request: Request, cases: list, models: dict[str, ModelSummary]
    ) -> list[tuple[str, EngineOptions]]:
        return [(c.model, c.context.engine_options(c.n_gpu_layers, request.ctx_size)) for c in cases]

    def planned(self, request: Request, cases: list) -> int:
        return chat.planned(cases, self.options(request))

    def options(self, request: Request) -> chat.ChatOptions:
        return chat.ChatOptions(request.reps, request.warmup, request.ctx_size)

    def measurer(self, request: Request, the_plan: Plan, backend: runner.Backend) -> runner.Measurer:
        return chat.Chat(the_plan.models, backend, self.options(request), request.delay_s)


class Spec(_Base):
    """Speculative decoding of one prompt against plain decoding, per proposer setting (`spec.py`)."""

    name = "spec"
    own_prompts = "its prompt is --prompt or -f/--file"
    takes_spec = True

    def expand(self, request: Request, models: dict[str, ModelSummary], backend: runner.Backend) -> list:
        speculative.check(request.spec, models, backend, request.offline)
        return speculative.expand(request.sweep, request.spec.points())

    def loads(
        self, request: Request, cases: list, models: dict[str, ModelSummary]
    ) -> list[tuple[str, EngineOptions]]:
        points = request.spec.points()
        return [(c.model, c.context.engine_options(c.n_gpu_layers, request.ctx_size, points[c.spec_index]))
                for c in cases]  # fmt: skip

    def settings(self, request: Request, settings: dict[str, Any]) -> None:
        p = request.spec
        settings["sweep"].update({
            "spec_type": p.kinds, "spec_draft_n_max": p.draft_max, "spec_draft_n_min": p.draft_min,
            "spec_ngram_max": p.ngram_max, "spec_ngram_min": p.ngram_min, "spec_adaptive": p.adaptive,
            "spec_exact": p.exact, "model_draft": p.model_draft, "model_draft_path": p.model_draft_path,
            "n_gpu_layers_draft": p.gpu_layers_draft, "n_ctx_draft": p.ctx_size_draft,
            "type_k_draft": p.type_k_draft, "type_v_draft": p.type_v_draft,
        })  # fmt: skip
        settings["prompt"] = request.prompt_source
        settings["prompt_text"] = request.prompt

    def options(self, request: Request) -> speculative.SpecOptionsRun:
        return speculative.SpecOptionsRun(request.reps, request.warmup, request.ctx_size, request.prompt,
                                          request.prompt_source, request.spec.points())  # fmt: skip

    def measurer(self, request: Request, the_plan: Plan, backend: runner.Backend) -> runner.Measurer:
        return speculative.Spec(the_plan.models, backend, self.options(request), request.delay_s)


class Batch(_Base):
    """N sequences decoded together by `llmcli batch`'s decoder, against N (`batch.py`)."""

    name = "batch"

    def expand(self, request: Request, models: dict[str, ModelSummary], backend: runner.Backend) -> list:
        if request.sweep.pg or any(request.sweep.depth):
            raise UsageError("-pg and -d do not apply to --scenario batch (each sequence has -p and -n)")
        return batched.expand(request.sweep, request.parallel)

    def loads(
        self, request: Request, cases: list, models: dict[str, ModelSummary]
    ) -> list[tuple[str, EngineOptions]]:
        return [(case.model, batched.memory_options(case)) for case in cases]

    def memory_hint(self, request: Request) -> str | None:
        return "use a smaller --parallel, -p or -n, or --force to load anyway"

    def settings(self, request: Request, settings: dict[str, Any]) -> None:
        settings["sweep"]["n_parallel"] = list(request.parallel)

    def measurer(self, request: Request, the_plan: Plan, backend: runner.Backend) -> runner.Measurer:
        options = batched.BatchOptions(request.reps, request.warmup, request.seed)
        return batched.Batch(the_plan.models, backend, options, request.delay_s)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (Tests(), Chat(), Spec(), Batch())}
