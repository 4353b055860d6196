"""The numbers a benchmark run produces, and their flat records (llama-bench's field names where they exist).

A record is one flat dict per result, the same for every output format: `formats` writes records as
a table, CSV, JSON or JSON lines, and `compare` reads them back (its own and llama-bench's JSON).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmcli.bench import stats, traffic
from llmcli.bench.sweep import Case, ContextSpec

# The `-o json` document's and each `-o jsonl` line's version (docs/bench.schema.json): `schema` is
# its older name, kept for the readers that check it.
SCHEMA_VERSION = 1
SCHEMA = f"llmcli-bench/{SCHEMA_VERSION}"


@dataclass
class ModelSummary:
    """What a benchmark reports about a model file, read from its GGUF header before loading."""

    ref: str
    path: str
    filename: str
    file_size: int
    model_size: int  # bytes of all tensors (llama-bench's model_size)
    n_params: int
    architecture: str
    quantization: str
    size_label: str | None
    n_layers: int
    n_ctx_train: int
    weight_bytes_per_token: int
    pooling: str | None = None  # an embedding model's pooling (mean, cls, ...); None: it writes text

    @property
    def model_type(self) -> str:
        """llama-bench style description, e.g. "gemma3 270M Q4_K_M"."""
        return " ".join(p for p in (self.architecture, self.size_label, self.quantization) if p)

    def record(self) -> dict[str, Any]:
        return {
            "model_filename": self.filename,
            "model_path": self.path,
            "model_type": self.model_type,
            "model_size": self.model_size,
            "model_file_size": self.file_size,
            "model_n_params": self.n_params,
            "model_quantization": self.quantization,
            "model_n_layers": self.n_layers,
            "weight_bytes_per_token": self.weight_bytes_per_token,
        }


@dataclass
class Measured:
    """Repeated timings of one thing: `n_tokens` tokens per sample, each sample in nanoseconds."""

    n_tokens: int
    samples_ns: list[int] = field(default_factory=list)

    @property
    def samples_ts(self) -> list[float]:
        return [self.n_tokens * 1e9 / ns for ns in self.samples_ns if ns > 0]

    @property
    def avg_ts(self) -> float:
        return stats.mean(self.samples_ts)

    @property
    def stddev_ts(self) -> float:
        return stats.stdev(self.samples_ts)

    @property
    def cv(self) -> float:
        return stats.cv(self.samples_ts)


@dataclass
class TestResult:
    """One llama-bench style test: the case, where it ran, and its timed repetitions."""

    case: Case
    model: ModelSummary
    n_ctx: int
    gpu_layers_offloaded: int
    test_time: str  # ISO 8601, UTC, when the test started
    timing: Measured
    warmup: bool = True
    other_load: float | None = None  # share of the CPU other processes used during the timed runs

    @property
    def name(self) -> str:
        return self.case.test.name

    @property
    def effective_gbps(self) -> float | None:
        """Weight bytes read per second; decode-only tests (tg) only."""
        if self.case.test.kind != "tg" or not self.timing.samples_ns:
            return None
        return traffic.effective_gbps(self.model.weight_bytes_per_token, self.timing.avg_ts)

    def record(self, measured_gbps: float | None = None) -> dict[str, Any]:
        c, t, m = self.case.context, self.case.test, self.timing
        samples_ns = list(m.samples_ns)
        ns = [float(v) for v in samples_ns]
        gbps = self.effective_gbps
        return {
            "scenario": "tests",
            "test": t.name,
            **self.model.record(),
            **_context_fields(c, self.case.n_gpu_layers, self.gpu_layers_offloaded),
            "n_prompt": t.n_prompt,
            "n_gen": t.n_gen,
            "n_depth": t.n_depth,
            "n_ctx": self.n_ctx,
            "test_time": self.test_time,
            "repetitions": len(samples_ns),
            "warmup": self.warmup,
            "avg_ns": round(stats.mean(ns)),
            "stddev_ns": round(stats.stdev(ns)),
            "avg_ts": round(m.avg_ts, 6),
            "stddev_ts": round(m.stddev_ts, 6),
            "cv": round(m.cv, 6),
            "samples_ns": samples_ns,
            "samples_ts": [round(v, 6) for v in m.samples_ts],
            "effective_gbps": None if gbps is None else round(gbps, 3),
            "roofline_fraction": _roofline(gbps, measured_gbps, self.gpu_layers_offloaded),
            "other_cpu_load": _round(self.other_load, 3),
        }


@dataclass
class ChatTurnResult:
    """One turn of the chat scenario, in one cache mode, over the repetitions."""

    model: ModelSummary
    context: Any  # ContextSpec
    n_gpu_layers: int
    gpu_layers_offloaded: int
    n_ctx: int
    max_tokens: int
    mode: str  # "reuse" (KV cache kept between turns) or "fresh" (cleared before every turn)
    turn: int  # 1-based
    test_time: str
    ttft_ns: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    cached_tokens: list[int] = field(default_factory=list)
    completion_tokens: list[int] = field(default_factory=list)
    decode_samples_ts: list[float] = field(default_factory=list)  # wall-clock decode t/s per repetition
    warmup: bool = True
    other_load: float | None = None

    @property
    def name(self) -> str:
        return f"chat turn {self.turn} ({self.mode})"

    @property
    def avg_ts(self) -> float:
        return stats.mean(self.decode_samples_ts)

    @property
    def effective_gbps(self) -> float | None:
        if not self.decode_samples_ts:
            return None
        return traffic.effective_gbps(self.model.weight_bytes_per_token, self.avg_ts)

    def record(self, measured_gbps: float | None = None) -> dict[str, Any]:
        c = self.context
        ttft_ms = [v / 1e6 for v in self.ttft_ns]
        gbps = self.effective_gbps
        return {
            "scenario": "chat",
            "test": self.name,
            "turn": self.turn,
            "cache": self.mode,
            **self.model.record(),
            **_context_fields(c, self.n_gpu_layers, self.gpu_layers_offloaded),
            "n_gen": self.max_tokens,
            "n_ctx": self.n_ctx,
            "test_time": self.test_time,
            "repetitions": len(self.ttft_ns),
            "warmup": self.warmup,
            "prompt_tokens": list(self.prompt_tokens),
            "cached_tokens": list(self.cached_tokens),
            "completion_tokens": list(self.completion_tokens),
            "avg_ttft_ms": round(stats.mean(ttft_ms), 3),
            "stddev_ttft_ms": round(stats.stdev(ttft_ms), 3),
            "samples_ttft_ns": list(self.ttft_ns),
            "avg_ts": round(self.avg_ts, 6),
            "stddev_ts": round(stats.stdev(self.decode_samples_ts), 6),
            "cv": round(stats.cv(self.decode_samples_ts), 6),
            "samples_ts": [round(v, 6) for v in self.decode_samples_ts],
            "effective_gbps": None if gbps is None else round(gbps, 3),
            "roofline_fraction": _roofline(gbps, measured_gbps, self.gpu_layers_offloaded),
            "other_cpu_load": _round(self.other_load, 3),
        }


@dataclass
class SpecSample:
    """One greedy generation of the speculative scenario's prompt."""

    prompt_tokens: int
    completion_tokens: int
    decode_tokens: int  # the engine's count behind tokens per target pass
    ttft_ns: int
    prefill_ts: float  # llama.cpp's own prompt-evaluation counter
    decode_ts: float | None  # wall clock, tokens after the first over first->last; None under 2 tokens
    drafted: int
    accepted: int
    target_passes: int
    k_chosen: dict[str, int]  # k -> verification batches (0: plain steps) chosen by the policy
    exact_positions: dict[str, int] | None  # --spec-exact's probed batch limits (short, long cache)
    text: str


@dataclass
class SpecResult:
    """One case of `--scenario spec`: a proposer's settings on one model, context and answer length,
    over the repetitions; `baseline` is the plain case with the same model, context and length."""

    model: ModelSummary
    context: Any  # ContextSpec
    n_gpu_layers: int
    gpu_layers_offloaded: int
    n_ctx: int
    max_tokens: int
    spec: Any  # contract.SpecOptions (kind "none": the plain baseline)
    label: str
    prompt_source: str  # "default", "--prompt" or the --prompt-file path
    prompt_format: str  # "template" (the chat template, as generate) or "raw" (a base model)
    test_time: str
    samples: list[SpecSample] = field(default_factory=list)
    warmup: bool = True
    other_load: float | None = None
    baseline: SpecResult | None = None

    @property
    def name(self) -> str:
        return f"spec {self.label} tg{self.max_tokens}"

    @property
    def plain(self) -> bool:
        return not self.spec.enabled

    @property
    def decode_samples_ts(self) -> list[float]:
        return [s.decode_ts for s in self.samples if s.decode_ts is not None]

    @property
    def avg_ts(self) -> float:
        return stats.mean(self.decode_samples_ts)

    @property
    def vs_plain(self) -> float | None:
        base = self.baseline
        if base is None or not base.decode_samples_ts or not self.decode_samples_ts or not base.avg_ts:
            return None
        return self.avg_ts / base.avg_ts

    def _sum(self, name: str) -> int:
        return sum(getattr(s, name) for s in self.samples)

    def k_chosen(self) -> dict[str, int]:
        total: dict[int, int] = {}
        for s in self.samples:
            for k, n in s.k_chosen.items():
                total[int(k)] = total.get(int(k), 0) + n
        return {str(k): total[k] for k in sorted(total)}

    def mean_k(self) -> float | None:
        """The k the adaptive policy chose on average per decision (0 counts: a plain step)."""
        chosen = self.k_chosen()
        n = sum(chosen.values())
        return sum(int(k) * c for k, c in chosen.items()) / n if n else None

    def text_matches_plain(self) -> bool | None:
        if self.baseline is None or self.plain or not self.samples or not self.baseline.samples:
            return None
        return all(s.text == self.baseline.samples[0].text for s in self.samples)

    def record(self, measured_gbps: float | None = None) -> dict[str, Any]:
        c, sp = self.context, self.spec
        ttft_ms = [s.ttft_ns / 1e6 for s in self.samples]
        prefill = [s.prefill_ts for s in self.samples]
        decode = self.decode_samples_ts
        drafted, accepted = self._sum("drafted"), self._sum("accepted")
        passes, tokens = self._sum("target_passes"), self._sum("decode_tokens")
        gbps = traffic.effective_gbps(self.model.weight_bytes_per_token, self.avg_ts) if decode else None
        vs = self.vs_plain
        mean_k = self.mean_k()
        draft = sp.kind == "draft"
        exact = next((s.exact_positions for s in self.samples if s.exact_positions), None)
        return {
            "scenario": "spec",
            "test": self.name,
            **self.model.record(),
            **_context_fields(c, self.n_gpu_layers, self.gpu_layers_offloaded),
            "n_gen": self.max_tokens,
            "n_ctx": self.n_ctx,
            "spec_type": sp.kind if sp.enabled else "none",
            "spec_draft_n_max": sp.draft_max if sp.enabled else 0,
            "spec_draft_n_min": sp.draft_min if sp.enabled else None,
            "spec_ngram_max": sp.ngram_max if sp.kind == "lookup" else None,
            "spec_ngram_min": sp.ngram_min if sp.kind == "lookup" else None,
            "spec_adaptive": sp.adaptive if sp.enabled else None,
            "spec_exact": sp.exact if sp.enabled else None,
            "model_draft": (sp.model_draft_ref or sp.model_draft) if draft else None,
            "model_draft_path": sp.model_draft if draft else None,
            "n_gpu_layers_draft": sp.gpu_layers_draft if draft else None,
            "n_ctx_draft": sp.ctx_size_draft if draft else None,
            "type_k_draft": (sp.type_k_draft or c.type_k) if draft else None,  # the target's unless -ctkd
            "type_v_draft": (sp.type_v_draft or c.type_v) if draft else None,
            "exact_positions": exact if sp.enabled and sp.exact else None,
            "prompt": self.prompt_source,
            "prompt_format": self.prompt_format,
            "test_time": self.test_time,
            "repetitions": len(self.samples),
            "warmup": self.warmup,
            "prompt_tokens": [s.prompt_tokens for s in self.samples],
            "completion_tokens": [s.completion_tokens for s in self.samples],
            "avg_ttft_ms": round(stats.mean(ttft_ms), 3),
            "stddev_ttft_ms": round(stats.stdev(ttft_ms), 3),
            "samples_ttft_ns": [s.ttft_ns for s in self.samples],
            "avg_prefill_ts": round(stats.mean(prefill), 6),
            "stddev_prefill_ts": round(stats.stdev(prefill), 6),
            "samples_prefill_ts": [round(v, 6) for v in prefill],
            "avg_ts": round(self.avg_ts, 6),
            "stddev_ts": round(stats.stdev(decode), 6),
            "cv": round(stats.cv(decode), 6),
            "samples_ts": [round(v, 6) for v in decode],
            "vs_plain": _round(vs, 4),
            "drafted": [s.drafted for s in self.samples],
            "accepted": [s.accepted for s in self.samples],
            "target_passes": [s.target_passes for s in self.samples],
            "acceptance": round(accepted / drafted, 6) if drafted else None,
            "tokens_per_pass": round(tokens / passes, 6) if passes else None,
            "k_chosen": self.k_chosen() if sp.enabled else None,
            "mean_k": _round(mean_k, 3) if sp.enabled else None,
            "text_matches_plain": self.text_matches_plain(),
            "effective_gbps": None if gbps is None else round(gbps, 3),
            "roofline_fraction": _roofline(gbps, measured_gbps, self.gpu_layers_offloaded),
            "other_cpu_load": _round(self.other_load, 3),
        }


class Result(Protocol):
    """What a run keeps of each finished result, whatever it measured (a test, a chat turn, a
    speculative case, a serving case in `serve.py`)."""

    @property
    def name(self) -> str: ...

    @property
    def other_load(self) -> float | None: ...

    def record(self, measured_gbps: float | None = None) -> dict[str, Any]: ...


@dataclass
class BenchRun:
    """Everything one `llmcli bench` invocation measured, complete or not."""

    environment: dict[str, Any]
    settings: dict[str, Any]
    planned: int
    started_at: str
    results: list[Result] = field(default_factory=list)
    finished_at: str | None = None
    complete: bool = True
    interrupted: bool = False
    error: Any = None  # the LlmcliError that stopped the run after some results finished
    bandwidth: Any = None  # membw.Bandwidth with --roofline
    # called with each result's flat record as soon as it finishes (-o jsonl writes them then)
    on_record: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False, compare=False)

    def add(self, *results: Result) -> None:
        """Keep finished results, and hand each one's flat record to `on_record` at once."""
        for result in results:
            self.results.append(result)
            if self.on_record is not None:
                self.on_record(self.flat_record(len(self.results), result.record(self.measured_gbps)))

    @property
    def measured_gbps(self) -> float | None:
        return self.bandwidth.read_gbps if self.bandwidth is not None else None

    def busiest(self) -> tuple[str, float] | None:
        """The result measured while other processes used the most CPU, and that share."""
        loads = [(r.name, r.other_load) for r in self.results if r.other_load is not None]
        return max(loads, key=lambda item: item[1]) if loads else None

    def records(self) -> list[dict[str, Any]]:
        return [r.record(self.measured_gbps) for r in self.results]

    def document(self) -> dict[str, Any]:
        """The `-o json` document."""
        return {
            "schema_version": SCHEMA_VERSION,
            "schema": SCHEMA,
            "complete": self.complete,
            "interrupted": self.interrupted,
            "planned": self.planned,
            "finished": len(self.results),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "environment": self.environment,
            "settings": self.settings,
            "memory_bandwidth": self.bandwidth.as_dict() if self.bandwidth is not None else None,
            "results": self.records(),
        }

    def flat_records(self) -> list[dict[str, Any]]:
        """Records with the environment and run status on every row (CSV, written when the run ends)."""
        return [
            {**self.flat_record(i, record), "run_complete": self.complete}
            for i, record in enumerate(self.records(), 1)
        ]

    def flat_record(self, index: int, record: dict[str, Any]) -> dict[str, Any]:
        """One record with the environment and its place in the run: `result_index` of
        `results_planned`, which a JSON-lines file written as the run goes keeps even when the
        run is cut short (a file with fewer lines than planned is from an unfinished run)."""
        head = dict(self.environment)
        head["result_index"], head["results_planned"] = index, self.planned
        if self.bandwidth is not None:
            head["memory_read_gbps"] = round(self.bandwidth.read_gbps, 3)
        return {**head, **record}


def _context_fields(c: ContextSpec, n_gpu_layers: int, offloaded: int) -> dict[str, Any]:
    """The context settings every scenario's record carries, in llama-bench's order."""
    return {
        "n_batch": c.n_batch, "n_ubatch": c.n_ubatch, "n_threads": c.n_threads, "type_k": c.type_k,
        "type_v": c.type_v, "n_gpu_layers": n_gpu_layers, "n_gpu_layers_offloaded": offloaded,
        "flash_attn": c.flash_attn, "repack": c.repack,
    }  # fmt: skip


def _roofline(gbps: float | None, measured_gbps: float | None, offloaded: int) -> float | None:
    """Traffic over host memory bandwidth; meaningless once weights live in GPU memory."""
    return None if offloaded else _round(traffic.roofline_fraction(gbps, measured_gbps))


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
