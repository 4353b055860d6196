"""The serving benchmark's figures: a case (lengths, concurrency, rate), the load that shapes its
arrivals, each request's and each repetition's measurements, and a case's result (throughputs,
latency percentiles, goodput) as bench's results report it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmcli.bench import stats
from llmcli.served.endpoints import short_model

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class Case:
    n_prompt: int | None  # None: the dataset file's own prompts
    n_gen: int | None  # None: the dataset file's own answer lengths
    concurrency: int | None  # None: no cap (an open loop at `rate` alone)
    requests: int
    rate: float = math.inf  # requests per second; inf: every request at once (up to the cap)
    dataset: str = "random"  # "random", or the dataset file's name

    @property
    def name(self) -> str:
        parts = ["serve"]
        if self.dataset != "random":
            parts.append(self.dataset)
        if self.n_prompt is not None:
            parts.append(f"p{self.n_prompt}")
        if self.n_gen is not None:
            parts.append(f"n{self.n_gen}")
        if self.concurrency is not None:
            parts.append(f"c{self.concurrency}")
        if not math.isinf(self.rate):
            parts.append(f"r{self.rate:g}")
        return " ".join(parts)


@dataclass(frozen=True)
class Load:
    """How requests arrive and what they ask, beyond the case: arrivals (burstiness, ramp-up),
    the SLOs of goodput, the percentiles reported, and the workload."""

    burstiness: float = 1.0  # gamma shape of the gaps between arrivals: 1 Poisson, < 1 burstier
    ramp_up_s: float = 0.0  # the rate rises linearly from 0 to the case's over these seconds
    slo_ms: dict[str, float] = field(default_factory=dict)  # ttft / tpot / e2el limits of goodput
    percentiles: tuple[float, ...] = (90.0, 99.0)
    range_ratio: float = 0.0  # random dataset: lengths drawn from [L(1-r), L(1+r)]
    conversations: tuple[tuple[str, int], ...] = ()  # a dataset file's (prompt, answer length)
    detect_saturation: bool = False  # stop a case whose queue grows without bound (the sweep)


@dataclass
class RequestResult:
    ok: bool
    error: str | None = None
    ttft_s: float = 0.0
    latency_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    tokens_source: str = "usage"  # or "chunks"
    server_decode_tps: float | None = None  # llama-server's timings.predicted_per_second
    client_decode_tps: float | None = None  # (output tokens - 1) / (last text - first text)

    @property
    def tpot_s(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass
class Repetition:
    wall_s: float
    results: list[RequestResult]
    saturated: bool = False  # stopped early: the queue grew without bound
    sent: int = 0  # requests planned for the repetition (results may hold fewer when stopped)

    @property
    def completed(self) -> list[RequestResult]:
        return [r for r in self.results if r.ok]

    @property
    def request_throughput(self) -> float:
        return len(self.completed) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def output_throughput(self) -> float:
        return sum(r.output_tokens for r in self.completed) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def total_token_throughput(self) -> float:
        tokens = sum(r.output_tokens + (r.prompt_tokens or 0) for r in self.completed)
        return tokens / self.wall_s if self.wall_s > 0 else 0.0

    def good(self, slo_ms: dict[str, float]) -> int:
        return sum(1 for r in self.completed if meets(r, slo_ms))


def meets(r: RequestResult, slo_ms: dict[str, float]) -> bool:
    """Whether a completed request met every SLO (a request too short for a TPOT meets that one)."""
    tpot = r.tpot_s
    figures = {
        "ttft": r.ttft_s * 1000,
        "e2el": r.latency_s * 1000,
        "tpot": None if tpot is None else tpot * 1000,
    }
    for metric, limit in slo_ms.items():
        value = figures[metric]
        if value is not None and value > limit:
            return False
    return True


@dataclass
class ServeResult:
    """One case over its repetitions."""

    case: Case
    model: str
    endpoint: str
    server: str
    test_time: str
    reps: list[Repetition] = field(default_factory=list)
    warmup: bool = True
    other_load: float | None = None
    load: Load = field(default_factory=Load)

    @property
    def name(self) -> str:
        return self.case.name

    @property
    def saturated(self) -> bool:
        return any(rep.saturated for rep in self.reps)

    def goodput_share(self) -> float | None:
        """Requests that met every SLO, as a share of those planned (None without SLOs)."""
        if not self.load.slo_ms:
            return None
        planned = sum(max(rep.sent, len(rep.results)) for rep in self.reps)
        return sum(rep.good(self.load.slo_ms) for rep in self.reps) / planned if planned else 0.0

    @property
    def requests(self) -> list[RequestResult]:
        return [r for rep in self.reps for r in rep.results]

    def record(self, measured_gbps: float | None = None) -> dict[str, Any]:
        c, done = self.case, [r for r in self.requests if r.ok]
        failed = [r for r in self.requests if not r.ok]
        out_ts = [rep.output_throughput for rep in self.reps]
        sources = sorted({r.tokens_source for r in done})
        record: dict[str, Any] = {
            "scenario": "serve",
            "test": c.name,
            "model_filename": self.model,
            "model_type": short_model(self.model),  # the table's; model_filename keeps the name
            "endpoint": self.endpoint,
            "server": self.server,
            "n_prompt": c.n_prompt,
            "n_gen": c.n_gen,
            "concurrency": c.concurrency,
            "request_rate": None if math.isinf(c.rate) else c.rate,
            "burstiness": self.load.burstiness,
            "ramp_up_s": self.load.ramp_up_s,
            "dataset": c.dataset,
            "range_ratio": self.load.range_ratio,
            "requests_per_repetition": c.requests,
            "test_time": self.test_time,
            "repetitions": len(self.reps),
            "warmup": self.warmup,
            "completed": len(done),
            "errors": len(failed),
            "error_messages": sorted({r.error or "" for r in failed})[:5],
            "tokens_source": "+".join(sources) if sources else None,
            "duration_s": round(sum(rep.wall_s for rep in self.reps), 6),
            "total_input_tokens": sum(r.prompt_tokens or 0 for r in done),
            "total_output_tokens": sum(r.output_tokens for r in done),
            "request_throughput": round(stats.mean([rep.request_throughput for rep in self.reps]), 6),
            "output_throughput": round(stats.mean(out_ts), 6),
            "total_token_throughput": round(stats.mean([rep.total_token_throughput for rep in self.reps]), 6),
        }
        series = {
            "ttft": [r.ttft_s * 1000 for r in done],
            "tpot": [t * 1000 for r in done if (t := r.tpot_s) is not None],
            "itl": [gap * 1000 for r in done for gap in r.itl_s],
            "e2el": [r.latency_s * 1000 for r in done],
        }
        for metric, values in series.items():
            record[f"mean_{metric}_ms"] = _round(stats.mean(values) if values else None)
            record[f"median_{metric}_ms"] = _round(stats.percentile(values, 50))
            for q in self.load.percentiles:
                record[f"p{q:g}_{metric}_ms"] = _round(stats.percentile(values, q))
        server_tps = [r.server_decode_tps for r in done if r.server_decode_tps]
        client_tps = [r.client_decode_tps for r in done if r.client_decode_tps]
        record["mean_client_decode_tps"] = _round(stats.mean(client_tps) if client_tps else None)
        record["mean_server_decode_tps"] = _round(stats.mean(server_tps) if server_tps else None)
        share = self.goodput_share()
        good = [rep.good(self.load.slo_ms) / rep.wall_s if rep.wall_s > 0 else 0.0 for rep in self.reps]
        record.update(
            percentiles=list(self.load.percentiles),
            slo_ms=dict(self.load.slo_ms) or None,
            request_goodput=round(stats.mean(good), 6) if self.load.slo_ms else None,
            goodput_share=None if share is None else round(share, 6),
            saturated=self.saturated,
            avg_ts=round(stats.mean(out_ts), 6),
            stddev_ts=round(stats.stdev(out_ts), 6),
            cv=round(stats.cv(out_ts), 6),
            samples_ts=[round(v, 6) for v in out_ts],
            samples_request_throughput=[round(rep.request_throughput, 6) for rep in self.reps],
            other_cpu_load=None if self.other_load is None else round(self.other_load, 3),
        )
        return record


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
