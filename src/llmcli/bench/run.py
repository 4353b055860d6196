"""One `llmcli bench` invocation from parsed flags to a `BenchRun`: plan, check, probe, run.

Everything that can be refused is refused before anything is measured: unknown or invalid models
(every model's GGUF header is read first), sizes that do not fit the context, empty sweeps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmcli.bench import chat, runner
from llmcli.bench import spec as speculative
from llmcli.bench.results import BenchRun, ModelSummary
from llmcli.bench.sweep import ContextSpec, Sweep, drop_unsupported, expand

SCENARIOS = ("tests", "chat", "spec")


@dataclass
class Request:
    sweep: Sweep
    scenario: str = "tests"
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


@dataclass
class Plan:
    models: dict[str, ModelSummary]
    cases: list  # sweep.Case, or spec.SpecCase for --scenario spec
    dropped: list[ContextSpec] = field(default_factory=list)  # settings llama.cpp would refuse


def plan(request: Request, backend: runner.Backend) -> Plan:
    """Resolve and inspect every model, expand the sweep, and check every case fits its context."""
    models = resolve_models(request.sweep.models, backend, request.offline)
    request.sweep.models = list(models)
    # --repack as asked, else the build's default: every record says which layout it measured
    request.sweep.repack = list(dict.fromkeys(backend.weight_repack(r) for r in request.sweep.repack))
    _, dropped = drop_unsupported(request.sweep.contexts())
    sizes = None  # the tests scenario's context per group; the others size theirs when they run
    if request.scenario == "chat":
        cases: list = chat.expand(request.sweep)
    elif request.scenario == "spec":
        speculative.check(request.spec, models, backend, request.offline)
        cases = speculative.expand(request.sweep, request.spec.points())
    else:
        cases = expand(request.sweep)
        sizes = runner.context_sizes(cases, models, request.ctx_size)
    if not request.force:
        check_memory(request, cases, models, backend, sizes)
    return Plan(models, cases, dropped)


def check_memory(
    request: Request,
    cases: list,
    models: dict[str, ModelSummary],
    backend: runner.Backend,
    sizes: dict[tuple, int] | None = None,
) -> None:
    """Refuse, before anything is measured, a case whose model and context (and draft model) would
    not fit the free memory, as generate and chat refuse it: llama.cpp would otherwise fail at
    context creation in the middle of the run, or the machine would swap. `sizes`: the tests
    scenario's context per group (`runner.context_sizes`)."""
    from llmcli.contract import EngineOptions
    from llmcli.errors import ResourceError

    if request.scenario == "chat":
        every = [(case.model, chat.engine_options(case, request.ctx_size)) for case in cases]
    elif request.scenario == "spec":
        options = spec_options(request)
        every = [(case.model, speculative.engine_options(case, options)) for case in cases]
    else:
        assert sizes is not None
        every = [
            (case.model, EngineOptions(ctx_size=sizes[runner.group_key(case)], gpu_layers=case.n_gpu_layers,
                                       type_k=case.context.type_k, type_v=case.context.type_v))
            for case in cases
        ]  # fmt: skip
    seen: set[tuple[str, str]] = set()
    for model, engine_options in every:
        if (key := (model, repr(engine_options))) not in seen:
            seen.add(key)
            try:
                backend.check_memory(models[model], engine_options)
            except ResourceError as exc:
                if request.scenario == "tests" and not request.ctx_size:  # sized to fit the tests
                    exc.hint = "use a smaller -p, -n or -d or quantization, or --force to load anyway"
                raise


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
        "scenario": request.scenario, "repetitions": request.reps, "warmup": request.warmup,
        "seed": request.seed, "delay_s": request.delay_s, "ctx_size": request.ctx_size,
        "busy_processes": request.busy,
        "sweep": {
            "n_prompt": s.n_prompt, "n_gen": s.n_gen, "pg": [list(p) for p in s.pg], "n_depth": s.depth,
            "n_threads": s.threads, "n_gpu_layers": s.gpu_layers, "n_batch": s.n_batch,
            "n_ubatch": s.n_ubatch, "flash_attn": s.flash_attn, "type_k": s.type_k, "type_v": s.type_v,
            "repack": s.repack,
        },
    }  # fmt: skip
    if request.scenario == "spec":
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
    planned = (
        chat.planned(the_plan.cases, chat_options(request))
        if request.scenario == "chat"
        else len(the_plan.cases)
    )
    return BenchRun(backend.environment(), settings, planned, runner.now_iso())


def chat_options(request: Request) -> chat.ChatOptions:
    return chat.ChatOptions(request.reps, request.warmup, request.ctx_size)


def spec_options(request: Request) -> speculative.SpecOptionsRun:
    return speculative.SpecOptionsRun(request.reps, request.warmup, request.ctx_size, request.prompt,
                                      request.prompt_source, request.spec.points())  # fmt: skip


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
        if request.scenario == "chat":
            return chat.run_chat(
                the_plan.cases, the_plan.models, backend, run, chat_options(request), progress, stop
            )
        if request.scenario == "spec":
            return speculative.run_spec(
                the_plan.cases, the_plan.models, backend, run, spec_options(request), progress, stop
            )
        options = runner.Options(
            request.reps, request.warmup, request.seed, request.delay_s, request.ctx_size
        )
        return runner.run_tests(the_plan.cases, the_plan.models, backend, run, options, progress, stop)

    from llmcli.bench import cpu_load
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
