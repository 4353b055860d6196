"""The serving benchmark: `llmcli bench -m ENDPOINT` measures how a server holds concurrent users.

For each case (input length `-p`, output length `-n`, concurrency `-c`, every combination), each
repetition sends `--requests` requests through `concurrency` workers, each worker starting its next
request the moment its previous one ends (a closed loop: exactly `concurrency` requests in flight
until the last ones drain). Every request is a streamed `/completions` call with its own synthetic
prompt of exactly `n_prompt` tokens (on llama-server: random common words cut to length with the
server's /tokenize and sent as token ids; elsewhere: words scaled to length from one calibrating
request's usage) and `max_tokens = n_gen` with `ignore_eos`, so every answer is `n_gen` tokens
long where the server takes `ignore_eos` (llama-server, vLLM).

Per request, on the client's monotonic clock: TTFT (sent to first text), ITL (the gaps between
successive text chunks), TPOT ((end - first text) / (output tokens - 1)) and end-to-end latency;
output tokens from the server's usage (else the number of text chunks, and the record says so).
Per repetition: request throughput (completed / wall time of the repetition) and output tokens/s
(output tokens of all completed requests / wall time). Reported: throughputs as mean ± sd over
repetitions (the per-repetition output tokens/s are `samples_ts`, so `bench compare` works), and
TTFT, TPOT, ITL and latency as mean, median, p90 and p99 over all requests of all repetitions.
How this relates to `vllm bench serve`: docs/SERVED.md.

One client: the endpoints are loaded through the loader, as generate and chat load them, and each
request is the served engine's own (`ServedEngine.completion`: its request body, its stream reader,
its figures), many at once on the engine's connection pool.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from llmcli.bench import stats
from llmcli.bench.results import BenchRun
from llmcli.bench.runner import Event, now_iso
from llmcli.endpoints import Endpoint, short_model

if TYPE_CHECKING:
    from llmcli.engine.served import Exchange, Reply, ServedEngine

WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case "
    "point government company number group problem fact water river house story book light music "
    "garden window table paper market field road mountain island winter summer morning evening "
    "doctor teacher student friend family city country history science nature animal bird forest "
    "ocean letter language question answer reason moment idea picture color stone bridge station"
).split()


@dataclass(frozen=True)
class Case:
    n_prompt: int
    n_gen: int
    concurrency: int
    requests: int

    @property
    def name(self) -> str:
        return f"serve p{self.n_prompt} n{self.n_gen} c{self.concurrency}"


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

    @property
    def name(self) -> str:
        return self.case.name

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
            record[f"p90_{metric}_ms"] = _round(stats.percentile(values, 90))
            record[f"p99_{metric}_ms"] = _round(stats.percentile(values, 99))
        server_tps = [r.server_decode_tps for r in done if r.server_decode_tps]
        client_tps = [r.client_decode_tps for r in done if r.client_decode_tps]
        record["mean_client_decode_tps"] = _round(stats.mean(client_tps) if client_tps else None)
        record["mean_server_decode_tps"] = _round(stats.mean(server_tps) if server_tps else None)
        record.update(
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


# -- prompts ----------------------------------------------------------------------------------


class Prompts:
    """Synthetic prompts of an exact token length, each different from its first word on (so no
    request reuses another's cached prefix)."""

    def __init__(self, engine: ServedEngine, seed: int) -> None:
        self.engine = engine
        self.rng = random.Random(seed)
        self.words_per_token: float | None = None

    def _words(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def make(self, n_prompt: int) -> str | list[int]:
        if self.engine.flavour == "llama-server":  # the server's own tokenizer cuts it to length
            tokens = self.engine.tokenize(self._words(n_prompt + 8))
            while len(tokens) < n_prompt:
                tokens += self.engine.tokenize(" " + self._words(n_prompt))
            return tokens[:n_prompt]
        if self.words_per_token is None:
            self.words_per_token = self._calibrate()
        return self._words(max(1, round(n_prompt * self.words_per_token)))

    def _calibrate(self) -> float:
        """Words per token from one short request's usage (0.75 when the server reports none). Not
        streamed: llama-cpp-python's server reports usage only in a whole response."""
        n = 200
        text = self._words(n)
        body = {"model": self.engine.model, "prompt": text, "max_tokens": 1, "stream": False}
        try:
            data = self.engine.client.post_json("/completions", body)
            tokens = (data.get("usage") or {}).get("prompt_tokens")
        except Exception:  # calibration is best effort; the request itself reports its faults
            tokens = None
        return n / tokens if isinstance(tokens, int) and tokens > 0 else 0.75


# -- running ----------------------------------------------------------------------------------


def one_request(
    engine: ServedEngine,
    prompt: str | list[int],
    n_gen: int,
    seed: int,
    cancel: threading.Event,
    on_open: Callable[[Exchange], None],
) -> RequestResult:
    """One streamed completion through the engine's own request and stream reader, timed on the
    client: greedy, exactly `n_gen` tokens where the server can be told to ignore the end of
    text, and the whole prompt prefilled (no prompt cache), as for distinct users."""
    from llmcli.contract import SamplingParams
    from llmcli.errors import LlmcliError

    # greedy; every other sampling setting is the server's own default
    others = frozenset({"top_p", "top_k", "min_p", "repeat_penalty", "repeat_last_n"})
    params = SamplingParams(temperature=0.0, seed=seed, max_tokens=n_gen, defaulted=others)
    exchange = engine.completion(prompt, params, cache_prompt=False, ignore_eos=True, server_defaults=True)
    try:
        if not exchange.open(cancel):
            return RequestResult(False, "interrupted")
    except LlmcliError as exc:
        return RequestResult(False, exc.message)
    on_open(exchange)
    try:
        for _ in exchange.texts():
            pass
    except LlmcliError as exc:
        return RequestResult(False, "interrupted" if cancel.is_set() else exc.message)
    finally:
        exchange.close()
    end = time.monotonic()
    if cancel.is_set():
        return RequestResult(False, "interrupted")
    return _measured(exchange.reply, end)


def _measured(reply: Reply, end: float) -> RequestResult:
    """A finished reply's figures: times from its chunks' arrival, counts as the engine reads them."""
    times = reply.times
    if not times:
        return RequestResult(False, "no text in the answer")
    figures = reply.stats(0)
    result = RequestResult(
        True,
        ttft_s=times[0] - reply.started,
        latency_s=end - reply.started,
        itl_s=[b - a for a, b in zip(times, times[1:], strict=False)],
        output_tokens=figures.completion_tokens,
        tokens_source=figures.sources["completion_tokens"],
    )
    if figures.sources["prompt_tokens"] == "usage":
        result.prompt_tokens = figures.prompt_tokens
    span = times[-1] - times[0]
    if span > 0 and result.output_tokens > 1:
        result.client_decode_tps = (result.output_tokens - 1) / span
    result.server_decode_tps = figures.server.get("predicted_per_second")
    return result


def run_case(
    engine: ServedEngine,
    case: Case,
    prompts: list[str | list[int]],
    seed: int,
    stop: threading.Event,
    live: set[Exchange],
) -> Repetition:
    """`case.requests` requests through `case.concurrency` workers; returns the repetition. Each
    request in flight is in `live`, so that Ctrl-C can shut them all."""
    results: list[RequestResult | None] = [None] * case.requests
    next_index = [0]
    lock = threading.Lock()

    def worker() -> None:
        while not stop.is_set():
            with lock:
                i = next_index[0]
                if i >= case.requests:
                    return
                next_index[0] += 1
            holder: list[Exchange] = []

            def opened(exchange: Exchange, holder=holder) -> None:
                holder.append(exchange)
                with lock:
                    live.add(exchange)

            results[i] = one_request(engine, prompts[i], case.n_gen, seed + i, stop, opened)
            with lock:
                for exchange in holder:
                    live.discard(exchange)

    started = time.monotonic()
    threads = [
        threading.Thread(target=worker, name=f"llmcli-serve-{k}", daemon=True)
        for k in range(min(case.concurrency, case.requests))
    ]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.1)
    wall = time.monotonic() - started
    return Repetition(wall, [r for r in results if r is not None])


def run_serve(
    engine: ServedEngine,
    cases: list[Case],
    run: BenchRun,
    reps: int,
    warmup: bool,
    seed: int,
    delay_s: float,
    progress: Callable[[Event], None],
) -> BenchRun:
    """Run every case into `run`; Ctrl-C stops at once, keeping what finished."""
    from llmcli import signals

    stop = threading.Event()
    live: set[Exchange] = set()

    def interrupt() -> None:
        stop.set()
        for exchange in list(live):
            exchange.shutdown()

    makers = Prompts(engine, seed)
    with signals.interrupt_on_sigint(interrupt):
        for index, case in enumerate(cases):
            if stop.is_set():
                break
            result = ServeResult(
                case, engine.model, engine.endpoint.url, engine.flavour, now_iso(), warmup=warmup
            )
            if warmup:
                progress(Event(index, len(cases), case.name, "warmup"))
                one_request(engine, makers.make(case.n_prompt), case.n_gen, seed, stop, lambda r: None)
            for rep in range(1, reps + 1):
                if stop.is_set():
                    break
                progress(Event(index, len(cases), case.name, "run", rep, reps))
                prompts = [makers.make(case.n_prompt) for _ in range(case.requests)]
                repetition = run_case(engine, case, prompts, seed + 1000 * rep, stop, live)
                if stop.is_set():
                    break
                result.reps.append(repetition)
            if stop.is_set():
                run.complete, run.interrupted = False, True
                break
            run.add(result)
            progress(Event(index, len(cases), case.name, "done", result=result))
            if delay_s and index + 1 < len(cases):
                stop.wait(delay_s)
    run.finished_at = now_iso()
    return run


# -- one invocation ---------------------------------------------------------------------------


def served_endpoints(refs: list[str | None], timeout: float | None = None) -> list[Endpoint]:
    """The endpoints the `-m` references name (with the `--timeout` flag), or [] for local models:
    the serving benchmark runs when they name served models. A mix of both is refused."""
    from llmcli import loader
    from llmcli.errors import UsageError

    found = [loader.served_endpoint(ref) for ref in refs]
    if any(e is None for e in found) and any(e is not None for e in found):
        raise UsageError("bench measures local models or served ones, not both in one run")
    return [replace(e, timeout_flag=timeout) for e in found if e is not None]


@dataclass
class Request:
    """The serving benchmark's parsed flags: every -p, -n and -c combination, per endpoint."""

    endpoints: list[Endpoint]
    n_prompt: list[int]
    n_gen: list[int]
    concurrency: list[int]
    requests: int | None = None  # per repetition; None: 4 per unit of concurrency, at least 8
    reps: int = 5
    warmup: bool = True
    seed: int = 1234
    delay_s: float = 0.0

    def cases(self) -> list[Case]:
        return [
            Case(p, n, c, self.requests or max(8, 4 * c))
            for p in self.n_prompt
            for n in self.n_gen
            for c in self.concurrency
        ]

    def settings(self) -> dict[str, Any]:
        sweep = {"n_prompt": self.n_prompt, "n_gen": self.n_gen, "concurrency": self.concurrency,
                 "requests": self.requests}  # fmt: skip
        return {"scenario": "serve", "repetitions": self.reps, "warmup": self.warmup, "seed": self.seed,
                "delay_s": self.delay_s, "sweep": sweep}  # fmt: skip


def execute(
    request: Request,
    progress: Callable[[Event], None] = lambda event: None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    *,
    debug: bool = False,
) -> BenchRun:
    """Connect to every endpoint (through the loader, as generate and chat do), then run every case
    on each in turn; Ctrl-C keeps what finished. `on_record` gets each result's flat record as soon
    as that result finishes."""
    from llmcli import loader

    cases = request.cases()
    engines: list[ServedEngine] = []
    try:
        for endpoint in request.endpoints:  # a connection pool as large as the highest concurrency
            loaded = loader.load_served(endpoint, connections=max(request.concurrency), debug=debug)
            engines.append(cast("ServedEngine", loaded.engine))
        run = BenchRun(environment(engines[0]), request.settings(), len(cases) * len(engines), now_iso())
        run.on_record = on_record
        for engine in engines:
            r = request
            run_serve(engine, cases, run, r.reps, r.warmup, r.seed, r.delay_s, progress)
            if run.interrupted:
                break
    finally:
        for engine in engines:
            engine.close()
    return run


def environment(engine: ServedEngine) -> dict[str, Any]:
    """Where the run happened: the server (as it describes itself) and this client."""
    import os
    import platform

    from llmcli import __version__

    props = engine.props or {}
    return {
        "endpoint": engine.endpoint.url,
        "server": engine.flavour,
        "server_build": props.get("build_info"),
        "server_slots": props.get("total_slots"),
        "server_context": engine.n_ctx or None,
        "model": engine.model,
        "llmcli_version": __version__,
        "client_os": f"{platform.system()} {platform.release()}",
        "client_cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
