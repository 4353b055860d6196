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

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from llmcli.bench import stats
from llmcli.bench.results import BenchRun
from llmcli.bench.runner import Event, now_iso
from llmcli.served.endpoints import Endpoint, short_model

if TYPE_CHECKING:
    from llmcli.served.engine import ServedEngine
    from llmcli.served.reply import Exchange, Reply

WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case "
    "point government company number group problem fact water river house story book light music "
    "garden window table paper market field road mountain island winter summer morning evening "
    "doctor teacher student friend family city country history science nature animal bird forest "
    "ocean letter language question answer reason moment idea picture color stone bridge station"
).split()


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
        if self.engine.flavour in ("llama-server", "vllm"):  # the server's own tokenizer cuts it to length
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

    def count(self, text: str) -> int:
        """Tokens in `text`: the server's count where it tokenizes for clients, else estimated."""
        if self.engine.flavour in ("llama-server", "vllm"):
            return len(self.engine.tokenize(text))
        if self.words_per_token is None:
            self.words_per_token = self._calibrate()
        return max(1, round(len(text.split()) / self.words_per_token))


def lengths(case: Case, load: Load, rng: random.Random) -> list[tuple[int, int]]:
    """Each request's (prompt, answer) lengths of the random dataset: the case's, or with a range
    ratio r drawn uniformly from [L(1-r), L(1+r)] (at least 1)."""
    assert case.n_prompt is not None and case.n_gen is not None
    out = []
    for _ in range(case.requests):
        p = _spread(case.n_prompt, load.range_ratio, rng)
        out.append((p, _spread(case.n_gen, load.range_ratio, rng)))
    return out


def _spread(length: int, ratio: float, rng: random.Random) -> int:
    if ratio <= 0:
        return length
    return rng.randint(max(1, math.floor(length * (1 - ratio))), max(1, math.ceil(length * (1 + ratio))))


def arrivals(n: int, rate: float, burstiness: float, ramp_up_s: float, rng: random.Random) -> list[float]:
    """Seconds from the start at which each of `n` requests is sent. An infinite rate sends all at
    once; otherwise the gaps are gamma-distributed with shape `burstiness` (1: Poisson arrivals)
    and mean 1/rate, and with a ramp-up the rate rises linearly from 0 to `rate` over `ramp_up_s`
    seconds (arrivals drawn at unit rate, then mapped through the expected count of arrivals by
    time t, rate*t^2/(2*ramp) during the ramp). The first request goes at once."""
    if math.isinf(rate):
        return [0.0] * n
    out, expected = [], 0.0
    for i in range(n):
        if i:
            expected += rng.gammavariate(burstiness, 1.0 / burstiness)
        out.append(_time_of(expected, rate, ramp_up_s))
    return out


def _time_of(expected: float, rate: float, ramp_up_s: float) -> float:
    """When `expected` arrivals have been due, at `rate` after a linear ramp of `ramp_up_s`."""
    in_ramp = rate * ramp_up_s / 2
    if ramp_up_s > 0 and expected <= in_ramp:
        return math.sqrt(2 * ramp_up_s * expected / rate)
    return ramp_up_s + (expected - in_ramp) / rate


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
    work: list[tuple[str | list[int], int]],
    seed: int,
    stop: threading.Event,
    live: set[Exchange],
    load: Load = Load(),
) -> Repetition:
    """Send each (prompt, answer length) of `work` at its arrival time (`arrivals`), at most
    `case.concurrency` at once (a request due while the cap is reached waits for a free place,
    and its times start when it is sent); returns the repetition. Each request in flight is in
    `live`, so that Ctrl-C can shut them all. With `load.detect_saturation`, a repetition whose
    queue (requests due and not finished) keeps growing past what the server finishes stops
    early, its unsent requests unsent, and says so (`Repetition.saturated`)."""
    rng = random.Random(seed)
    due = arrivals(len(work), case.rate, load.burstiness, load.ramp_up_s, rng)
    results: list[RequestResult | None] = [None] * len(work)
    lock = threading.Lock()
    slots = threading.BoundedSemaphore(case.concurrency) if case.concurrency else None
    halt = threading.Event()  # this repetition's own stop: the whole run's, or saturation
    finished = [0]
    backlog: list[tuple[float, int, int]] = []  # (when, due so far, finished so far)

    def send(i: int) -> None:
        holder: list[Exchange] = []

        def opened(exchange: Exchange) -> None:
            holder.append(exchange)
            with lock:
                live.add(exchange)

        try:
            prompt, n_gen = work[i]
            results[i] = one_request(engine, prompt, n_gen, seed + i, halt, opened)
        finally:
            with lock:
                for exchange in holder:
                    live.discard(exchange)
                finished[0] += 1
            if slots is not None:
                slots.release()

    def watch() -> None:  # the run's stop (Ctrl-C) stops this repetition too
        while not halt.is_set():
            if stop.wait(0.1):
                halt.set()

    watcher = threading.Thread(target=watch, name="llmcli-serve-watch", daemon=True)
    watcher.start()
    threads: list[threading.Thread] = []
    saturated = False
    started = time.monotonic()
    for i, at in enumerate(due):
        if halt.wait(max(0.0, started + at - time.monotonic())):
            break
        if slots is not None:
            while not slots.acquire(timeout=0.1):
                if halt.is_set():
                    break
            if halt.is_set():
                break
        if load.detect_saturation:
            with lock:
                backlog.append((time.monotonic() - started, i + 1, finished[0]))
            if _growing_without_bound(backlog, len(due)):
                saturated = True
                break
        thread = threading.Thread(target=send, args=(i,), name=f"llmcli-serve-{i}", daemon=True)
        threads.append(thread)
        thread.start()
    if saturated:  # what is in flight is cut short: the verdict is in
        halt.set()
        with lock:
            for exchange in list(live):
                exchange.shutdown()
    for t in threads:
        while t.is_alive():
            t.join(0.1)
    wall = time.monotonic() - started
    halt.set()
    sent = [r for r in results if r is not None]
    if saturated:
        sent = [r for r in sent if r.ok]
    return Repetition(wall, sent, saturated=saturated, sent=len(work))


def _growing_without_bound(backlog: list[tuple[float, int, int]], planned: int) -> bool:
    """Whether the queue (requests due and not finished) is growing without bound: with at least
    a third of the requests sent, the queue is at least 8 deep, has grown by half since the halfway
    point of what was sent (and by 4 at least), and the server finished fewer than 3 in 4 of the
    requests that arrived in that time."""
    n = len(backlog)
    if n < max(8, planned // 3):
        return False
    t1, due1, done1 = backlog[n // 2]
    t2, due2, done2 = backlog[-1]
    queue1, queue2 = due1 - done1, due2 - done2
    if queue2 < 8 or queue2 - queue1 < max(4, queue1 / 2) or t2 <= t1:
        return False
    return (done2 - done1) < 0.75 * (due2 - due1)


def run_serve(
    engine: ServedEngine,
    cases: list[Case],
    run: BenchRun,
    reps: int,
    warmup: bool,
    seed: int,
    delay_s: float,
    progress: Callable[[Event], None],
    load: Load = Load(),
    on_result: Callable[[ServeResult], bool] | None = None,
) -> BenchRun:
    """Run every case into `run`; Ctrl-C stops at once, keeping what finished. `on_result`, given
    each finished result, may say False to stop there (the rate sweep's verdict)."""
    from llmcli import signals

    stop = threading.Event()
    live: set[Exchange] = set()

    def interrupt() -> None:
        stop.set()
        for exchange in list(live):
            exchange.shutdown()

    makers = Prompts(engine, seed)
    rng = random.Random(seed)
    with signals.interrupt_on_sigint(interrupt):
        for index, case in enumerate(cases):
            if stop.is_set():
                break
            result = ServeResult(
                case, engine.model, engine.endpoint.url, engine.flavour, now_iso(), warmup=warmup, load=load
            )
            if warmup:
                progress(Event(index, len(cases), case.name, "warmup"))
                first = _work(case, load, makers, rng)[0] if load.conversations else None
                prompt, n_gen = first or (makers.make(case.n_prompt or 1), case.n_gen or 1)
                one_request(engine, prompt, n_gen, seed, stop, lambda r: None)
            for rep in range(1, reps + 1):
                if stop.is_set():
                    break
                progress(Event(index, len(cases), case.name, "run", rep, reps))
                work = _work(case, load, makers, rng)
                repetition = run_case(engine, case, work, seed + 1000 * rep, stop, live, load)
                if stop.is_set():
                    break
                result.reps.append(repetition)
                if repetition.saturated:
                    break
            if stop.is_set():
                run.complete, run.interrupted = False, True
                break
            run.add(result)
            progress(Event(index, len(cases), case.name, "done", result=result))
            if on_result is not None and not on_result(result):
                break
            if delay_s and index + 1 < len(cases):
                stop.wait(delay_s)
    run.finished_at = now_iso()
    return run


def _work(case: Case, load: Load, makers: Prompts, rng: random.Random) -> list[tuple[str | list[int], int]]:
    """The repetition's requests: (prompt, answer length) each, from the case's dataset."""
    if load.conversations:
        picked = [load.conversations[rng.randrange(len(load.conversations))] for _ in range(case.requests)]
        return [(text, case.n_gen or n) for text, n in picked]
    return [(makers.make(p), n) for p, n in lengths(case, load, rng)]


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
    """The serving benchmark's parsed flags: every -p, -n, -c and --request-rate combination, per
    endpoint (or, with `sweep_rate`, the rates the sweep finds)."""

    endpoints: list[Endpoint]
    n_prompt: list[int]
    n_gen: list[int]
    concurrency: list[int | None]  # None: no cap
    requests: int | None = None  # per repetition; None: see `default_requests`
    reps: int = 5
    warmup: bool = True
    seed: int = 1234
    delay_s: float = 0.0
    rates: list[float] = field(default_factory=lambda: [math.inf])
    load: Load = field(default_factory=Load)
    dataset: str = "random"  # or the dataset file's name (its conversations are in `load`)
    sweep_rate: bool = False  # raise the rate until goodput falls below `goodput_target`
    goodput_target: float = 0.9
    pairs: tuple[tuple[str, str], ...] = ()  # a dataset file's (prompt, reply), measured on the server

    def case(self, p: int | None, n: int | None, c: int | None, rate: float) -> Case:
        return Case(p, n, c, self.requests or default_requests(c, rate), rate, self.dataset)

    def cases(self) -> list[Case]:
        prompts: list[int | None] = [None] if self.pairs else list(self.n_prompt)
        gens: list[int | None] = list(self.n_gen) if self.n_gen else [None]
        return [
            self.case(p, n, c, r) for p in prompts for n in gens for c in self.concurrency for r in self.rates
        ]

    def settings(self) -> dict[str, Any]:
        sweep = {"n_prompt": self.n_prompt, "n_gen": self.n_gen, "concurrency": self.concurrency,
                 "requests": self.requests,
                 "request_rate": [None if math.isinf(r) else r for r in self.rates]}  # fmt: skip
        load = self.load
        return {"scenario": "serve", "repetitions": self.reps, "warmup": self.warmup, "seed": self.seed,
                "delay_s": self.delay_s, "sweep": sweep, "burstiness": load.burstiness,
                "ramp_up_s": load.ramp_up_s, "slo_ms": dict(load.slo_ms) or None,
                "percentiles": list(load.percentiles), "dataset": self.dataset,
                "range_ratio": load.range_ratio}  # fmt: skip


def default_requests(concurrency: int | None, rate: float) -> int:
    """Requests per repetition when --requests is not given: 4 per unit of concurrency (at least 8)
    under a cap; without one, about 10 seconds of arrivals at the rate (16 to 200)."""
    if concurrency is not None:
        return max(8, 4 * concurrency)
    if math.isinf(rate):
        return 16
    return max(16, min(200, math.ceil(10 * rate)))


SWEEP_STEPS = 10  # most rates one sweep tries (doubling, then halving the gap twice)


def sweep_rates(
    engine: ServedEngine,
    request: Request,
    run: BenchRun,
    progress: Callable[[Event], None],
) -> dict[str, Any]:
    """Raise the request rate until the share of requests meeting every SLO falls below the target:
    from the first --request-rate (else one request at a time's rate, from one timed request),
    doubling while it holds, then halving the gap between the highest rate that held and the
    lowest that did not, twice. A rate whose queue grows without bound stops at once (saturated).
    Returns the answer, which also goes into the run's settings."""
    p: int | None = None if request.pairs or not request.n_prompt else request.n_prompt[0]
    n: int | None = request.n_gen[0] if request.n_gen else None
    c = request.concurrency[0]
    load = replace(request.load, detect_saturation=True)
    rate = request.rates[0]
    if math.isinf(rate):
        makers = Prompts(engine, request.seed)
        probe = one_request(
            engine, makers.make(p or 16), n or 16, request.seed, threading.Event(), lambda r: None
        )
        rate = _nice(1.0 / probe.latency_s) if probe.ok and probe.latency_s > 0 else 1.0
    held: tuple[float, float] | None = None  # (rate, goodput share)
    failed: float | None = None
    saturated_at: float | None = None
    tried: list[dict[str, Any]] = []
    verdict: dict[str, Any] = {}
    narrowed = 0  # times the gap between held and failed was halved

    def judge(result: ServeResult) -> bool:
        share = result.goodput_share() or 0.0
        verdict.update(share=share, saturated=result.saturated)
        return True

    for step in range(SWEEP_STEPS):
        case = request.case(p, n, c, rate)
        verdict.clear()
        run.planned = len(run.results) + 1
        warm = request.warmup and step == 0
        r = request
        run_serve(engine, [case], run, r.reps, warm, r.seed, r.delay_s, progress, load, judge)
        if run.interrupted or not verdict:
            break
        ok = not verdict["saturated"] and verdict["share"] >= request.goodput_target
        tried.append({"rate": rate, "goodput_share": round(verdict["share"], 6), "held": ok,
                      "saturated": verdict["saturated"]})  # fmt: skip
        if verdict["saturated"]:
            saturated_at = rate if saturated_at is None else min(saturated_at, rate)
        if ok:
            held = (rate, verdict["share"])
        else:
            failed = rate if failed is None else min(failed, rate)
        if failed is None:
            rate = _nice(rate * 2)
        elif held is None:
            rate = _nice(rate / 2)
        elif narrowed < 2 and failed - held[0] > held[0] / 8:
            rate, narrowed = _nice((held[0] + failed) / 2), narrowed + 1
        else:
            break
        if held is None and rate < 0.01:
            break
    answer = {
        "target_share": request.goodput_target,
        "slo_ms": dict(request.load.slo_ms),
        "highest_rate_held": None if held is None else held[0],
        "goodput_share_at_it": None if held is None else round(held[1], 6),
        "lowest_rate_failed": failed,
        "saturated_at": saturated_at,
        "steps": tried,
    }
    run.settings["sweep_rate"] = answer
    return answer


def _nice(rate: float) -> float:
    """A rate to three significant digits (the case's name carries it)."""
    return float(f"{rate:.3g}")


def execute(
    request: Request,
    progress: Callable[[Event], None] = lambda event: None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    *,
    debug: bool = False,
) -> BenchRun:
    """Connect to every endpoint (through the loader, as generate and chat do), then run every case
    on each in turn (or the rate sweep); Ctrl-C keeps what finished. `on_record` gets each result's
    flat record as soon as that result finishes."""
    from llmcli import loader
    from llmcli.errors import UsageError

    cases = request.cases()
    engines: list[ServedEngine] = []
    caps = [c for c in request.concurrency if c is not None]
    unbounded = len(caps) < len(request.concurrency)
    connections = max(caps + [min(256, max(case.requests for case in cases)) if unbounded else 1])
    try:
        for endpoint in request.endpoints:  # a connection pool as large as the most requests in flight
            loaded = loader.load_served(endpoint, connections=connections, debug=debug)
            engines.append(cast("ServedEngine", loaded.engine))
        run = BenchRun(environment(engines[0]), request.settings(), len(cases) * len(engines), now_iso())
        run.on_record = on_record
        for engine in engines:
            r = request
            if r.pairs:  # each server counts the file's replies in its own tokens
                measured = measure_conversations(engine, r.pairs, r.seed, engine.n_ctx or None)
                if not measured:
                    raise UsageError(
                        f"--dataset {r.dataset}: no conversation fits {engine.endpoint.ref}'s context"
                    )
                r = replace(r, load=replace(r.load, conversations=measured))
            if r.sweep_rate:
                sweep_rates(engine, r, run, progress)
            else:
                run_serve(engine, cases, run, r.reps, r.warmup, r.seed, r.delay_s, progress, r.load)
            if run.interrupted:
                break
    finally:
        for engine in engines:
            engine.close()
    return run


def parse_goodput(value: str) -> dict[str, float]:
    """`ttft:MS,tpot:MS,e2el:MS` (any of them, commas or spaces) -> {"ttft": ms, ...}."""
    from llmcli.errors import UsageError

    out: dict[str, float] = {}
    for item in value.replace(",", " ").split():
        name, _, number = item.partition(":")
        name = name.strip().lower()
        if name not in ("ttft", "tpot", "e2el"):
            raise UsageError(f"--goodput: {item!r}: the SLOs are ttft:MS, tpot:MS and e2el:MS")
        try:
            ms = float(number)
        except ValueError:
            raise UsageError(
                f"--goodput: {item!r}: expected a number of milliseconds after the colon"
            ) from None
        if not ms > 0 or math.isinf(ms):
            raise UsageError(f"--goodput: {item!r}: the limit must be a positive number of milliseconds")
        out[name] = ms
    if not out:
        raise UsageError("--goodput: give at least one of ttft:MS, tpot:MS, e2el:MS")
    return out


def parse_rates(values: list[str] | None) -> list[float]:
    """--request-rate: requests per second, a comma list (each is a case), `inf` for all at once."""
    from llmcli.errors import UsageError

    out: list[float] = []
    for item in (v.strip() for value in values or [] for v in value.split(",")):
        if not item:
            continue
        try:
            rate = float(item)
        except ValueError:
            raise UsageError(f"--request-rate: expected requests per second or inf, got {item!r}") from None
        if math.isnan(rate) or rate <= 0:
            raise UsageError(f"--request-rate must be above 0 (inf: every request at once), got {item!r}")
        if rate not in out:
            out.append(rate)
    return out or [math.inf]


def parse_percentiles(value: str | None) -> tuple[float, ...]:
    from llmcli.errors import UsageError

    if value is None:
        return (90.0, 99.0)
    out: list[float] = []
    for item in (v.strip() for v in value.split(",")):
        try:
            q = float(item)
        except ValueError:
            raise UsageError(f"--percentiles: expected numbers between 0 and 100, got {item!r}") from None
        if not 0 < q < 100:
            raise UsageError(f"--percentiles: {item} is not between 0 and 100 (the median is always shown)")
        if q not in out and q != 50:  # the median is always shown
            out.append(q)
    return tuple(sorted(out))


def load_conversations(path: str, limit: int = 4096) -> tuple[tuple[str, str], ...]:
    """A ShareGPT-format file: a JSON list of {"conversations": [{"from": "human", "value": ...},
    {"from": "gpt", "value": ...}, ...]}; each conversation's first human turn and the reply after
    it, (prompt, reply). Conversations without both are skipped."""
    import json
    from pathlib import Path

    from llmcli.errors import UsageError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--dataset: cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--dataset: {path} is not a JSON file: {exc}") from None
    if not isinstance(data, list):
        raise UsageError(f"--dataset: {path}: expected a JSON list of conversations (ShareGPT format)")
    out: list[tuple[str, str]] = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            continue
        pairs = [t for t in turns if isinstance(t, dict) and isinstance(t.get("value"), str)]
        first = next((i for i, t in enumerate(pairs) if t.get("from") in ("human", "user")), None)
        if first is None or first + 1 >= len(pairs) or not pairs[first]["value"].strip():
            continue
        reply = pairs[first + 1]
        if reply.get("from") in ("human", "user") or not reply["value"].strip():
            continue
        out.append((pairs[first]["value"], reply["value"]))
        if len(out) >= limit:
            break
    if not out:
        raise UsageError(
            f"--dataset: {path} has no conversation with a human turn and a reply (ShareGPT format)"
        )
    return tuple(out)


def measure_conversations(
    engine: ServedEngine, pairs: tuple[tuple[str, str], ...], seed: int, context: int | None
) -> tuple[tuple[str, int], ...]:
    """Each conversation's prompt and its reply's length in tokens (the server's count where it
    tokenizes for clients, else estimated), shuffled with the seed; those too short to measure
    (under 4 tokens) or too long for the context are left out, as vLLM's benchmark does."""
    makers = Prompts(engine, seed)
    order = list(pairs)
    random.Random(seed).shuffle(order)
    out = []
    for prompt, reply in order[:1024]:
        n_prompt, n_reply = makers.count(prompt), makers.count(reply)
        if n_prompt < 4 or n_reply < 4:
            continue
        if context and n_prompt + n_reply > context:
            continue
        out.append((prompt, n_reply))
    return tuple(out)


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
