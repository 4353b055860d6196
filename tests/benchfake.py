"""A benchmark backend for tests (installed through `environment.bench_backend`, see
`helpers.use_bench_backend`; nothing in src/ ships it): no model, an injected clock, exactly
predictable timings.

`FakeClock` only moves when told to (or by `step_ns` on every read). `FakeBackend` advances it by
`pp_ns` per prompt token and `tg_ns` per generated token, times a factor taken in turn from
`jitter`, so means, deviations and formatted tables can be asserted exactly. `interrupt_at` raises
KeyboardInterrupt at the start of that timed run (1-based), as Ctrl-C would. The chat scenario runs
on `llmcli.engine.fake.FakeEngine`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.bench.results import ModelSummary
from llmcli.bench.sweep import ContextSpec, TestSpec
from llmcli.errors import InvalidModelError

FAKE_ENVIRONMENT: dict[str, Any] = {
    "llmcli_version": "0.0.test", "llama_cpp_python_version": "0.0.test", "build_commit": "abc1234",
    "ggml_version": "0.0.0", "llama_version": "0.0.0", "backends": "CPU", "system_info": "CPU : AVX2 = 1 |",
    "cpu_info": "Test CPU", "cpu_simd": ["avx2", "fma"], "cpu_logical": 2, "cpu_affinity": 2, "gpu_info": [],
    "os": "TestOS", "python_version": "3.11.0",
}  # fmt: skip


@dataclass
class FakeClock:
    now_ns: int = 0
    step_ns: int = 0  # added on every read (the chat scenario's tests use it)

    def __call__(self) -> int:
        self.now_ns += self.step_ns
        return self.now_ns

    def advance(self, ns: float) -> None:
        self.now_ns += int(round(ns))


class Crash(RuntimeError):
    """Stands in for the process dying in the middle of a run (a segfault in a kernel, the OOM
    killer): nothing in llmcli catches it, so only what was already written survives."""


@dataclass
class FakeBackend:
    pp_ns: float = 1_000_000.0  # 1000 tok/s
    tg_ns: float = 10_000_000.0  # 100 tok/s
    jitter: list[float] = field(default_factory=lambda: [1.0])
    interrupt_at: int | None = None
    crash_at: int | None = None  # the run at which the process "dies" (raises Crash)
    n_ctx_train: int = 8192
    invalid: set[str] = field(default_factory=set)  # file names inspect() refuses
    embedding: set[str] = field(default_factory=set)  # file names inspect() reads as embedding models
    foreign_vocab: set[str] = field(default_factory=set)  # draft file names check_draft refuses
    busy: float | None = None  # what other_load() reports (share of the CPU used by other processes)
    memory_tokens: int | None = None  # the largest context check_memory lets through (None: any)
    repack_default: bool = True  # the build's default weight repacking (False: an AMX build)
    clock: FakeClock = field(default_factory=FakeClock)

    def __post_init__(self) -> None:
        self.runs = 0  # timed and untimed runs of the measured part
        self.loads: list[tuple[str, int, bool | None]] = []  # (file name, GPU layers, repack)
        self.contexts: list[tuple[ContextSpec, int]] = []
        self.depth_fills: list[int] = []
        self.engines: list[Any] = []
        self.interrupted = False
        self.memory_checks: list[tuple[str, int]] = []  # (file name, n_ctx) check_memory was asked

    def environment(self) -> dict[str, Any]:
        return dict(FAKE_ENVIRONMENT)

    def inspect(self, path: str, ref: str) -> ModelSummary:
        name = Path(path).name
        if name in self.invalid:
            raise InvalidModelError(f"{path} is not a GGUF file")
        return ModelSummary(
            ref=ref, path=str(path), filename=name, file_size=1_048_576, model_size=1_000_000,
            n_params=2_000_000, architecture="fake", quantization="Q4_K_M", size_label="2M", n_layers=4,
            n_ctx_train=self.n_ctx_train, weight_bytes_per_token=1_000_000,
            pooling="mean" if name in self.embedding else None,
        )  # fmt: skip

    def load(self, model: ModelSummary, n_gpu_layers: int, repack: bool | None = None) -> FakeModel:
        self.loads.append((model.filename, n_gpu_layers, repack))
        return FakeModel(self)

    def weight_repack(self, requested: bool | None) -> bool:
        return self.repack_default if requested is None else requested

    def chat_engine(self, model: ModelSummary, options: Any) -> Any:
        from llmcli.engine.fake import FakeEngine

        engine = FakeEngine(n_ctx=options.ctx_size or 2048)
        engine.options = options
        self.engines.append(engine)
        return engine

    def release(self, thing: Any) -> None:
        pass

    def check_draft(self, target: str, draft: str) -> None:
        from llmcli.errors import UsageError

        if Path(draft).name in self.foreign_vocab:
            raise UsageError(f"the draft model {Path(draft).name} does not share the vocabulary of "
                             f"{Path(target).name}: token 3 differs")  # fmt: skip

    def check_memory(self, model: ModelSummary, options: Any) -> None:
        from llmcli.errors import ResourceError

        n_ctx = options.ctx_size or 4096
        self.memory_checks.append((model.filename, n_ctx))
        if self.memory_tokens is not None and n_ctx > self.memory_tokens:
            raise ResourceError(f"{model.filename} needs a context of {n_ctx} tokens but only "
                                f"{self.memory_tokens} fit", hint="use a smaller --ctx-size")  # fmt: skip

    def interrupt(self) -> None:
        self.interrupted = True

    def interrupt_on_sigint(self, interrupt):
        """The engine's own Ctrl-C handling (no llama.cpp needed), so tests exercise it."""
        from llmcli.engine.measure import interrupt_on_sigint

        return interrupt_on_sigint(interrupt)

    def load_snapshot(self) -> Any:
        return None

    def other_load(self, before: Any, after: Any) -> float | None:
        return self.busy


@dataclass
class FakeModel:
    backend: FakeBackend
    gpu_layers_offloaded: int = 0

    def new_context(self, spec: ContextSpec, n_ctx: int) -> FakeContext:
        self.backend.contexts.append((spec, n_ctx))
        return FakeContext(self.backend, spec)

    def close(self) -> None:
        pass


@dataclass
class FakeContext:
    backend: FakeBackend
    spec: ContextSpec
    n_cached: int = 0

    def set_depth(self, depth: int, rng: random.Random) -> None:
        if self.n_cached < depth:
            self.backend.depth_fills.append(depth - self.n_cached)
        self.n_cached = depth

    def prepare(self, test: TestSpec, rng: random.Random) -> TestSpec:
        return test

    def run(self, test: TestSpec) -> None:
        b = self.backend
        b.runs += 1
        if b.interrupt_at is not None and b.runs >= b.interrupt_at:
            raise KeyboardInterrupt
        if b.crash_at is not None and b.runs >= b.crash_at:
            raise Crash(f"run {b.runs}")
        factor = b.jitter[(b.runs - 1) % len(b.jitter)]
        b.clock.advance((test.n_prompt * b.pp_ns + test.n_gen * b.tg_ns) * factor)
        self.n_cached += test.n_tokens

    def close(self) -> None:
        pass
