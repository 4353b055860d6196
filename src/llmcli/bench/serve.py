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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from llmcli.bench.results import BenchRun
from llmcli.bench.runner import Event, Finished, Measurer, Step, drive, now_iso
from llmcli.bench.serve_load import Prompts, arrivals, lengths, measure_conversations
from llmcli.bench.serve_results import Case, Load, Repetition, RequestResult, ServeResult
from llmcli.served.endpoints import Endpoint

if TYPE_CHECKING:
    from llmcli.served.engine import ServedEngine
    from llmcli.served.reply import Exchange, Reply


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
        if not _take_slot(slots, halt):
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
    _join(threads)
    wall = time.monotonic() - started
    halt.set()
    sent = [r for r in results if r is not None]
    if saturated:
        sent = [r for r in sent if r.ok]
    return Repetition(wall, sent, saturated=saturated, sent=len(work))


def _take_slot(slots: threading.BoundedSemaphore | None, halt: threading.Event) -> bool:
    """Wait for a free place under the concurrency cap (None: no cap); False when the repetition
    stops first."""
    if slots is None:
        return True
    while not slots.acquire(timeout=0.1):
        if halt.is_set():
            return False
    return not halt.is_set()


def _join(threads: list[threading.Thread]) -> None:
    """Wait for every request's thread, in short joins so that Ctrl-C is seen."""
    for t in threads:
        while t.is_alive():
            t.join(0.1)


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

    serve = Serve(engine, reps, warmup, seed, delay_s, load, on_result, live)
    with signals.interrupt_on_sigint(interrupt):
        return drive(cases, run, serve, progress, stop)


class Serve(Measurer):
    """Each case's repetitions against one server; a repetition cut short by Ctrl-C is dropped, a
    saturated one (the queue grew without bound) ends the case."""

    def __init__(self, engine: ServedEngine, reps: int, warmup: bool, seed: int, delay_s: float, load: Load,
                 on_result: Callable[[ServeResult], bool] | None, live: set[Exchange]) -> None:  # fmt: skip
        self.engine, self.reps, self.warmup, self.seed, self.delay_s = engine, reps, warmup, seed, delay_s
        self.load, self.on_result, self.live = load, on_result, live
        self.makers = Prompts(engine, seed)
        self.rng = random.Random(seed)

    def measure(self, case: Case, held: Any, step: Step) -> Iterator[Finished]:
        engine, load, stop = self.engine, self.load, step.stop or threading.Event()
        result = ServeResult(
            case, engine.model, engine.endpoint.url, engine.flavour, now_iso(), warmup=self.warmup, load=load
        )
        if self.warmup:
            step(case.name, "warmup")
            first = _work(case, load, self.makers, self.rng)[0] if load.conversations else None
            prompt, n_gen = first or (self.makers.make(case.n_prompt or 1), case.n_gen or 1)
            one_request(engine, prompt, n_gen, self.seed, stop, lambda r: None)
        for rep in range(1, self.reps + 1):
            step.check()
            step(case.name, "run", rep, self.reps)
            work = _work(case, load, self.makers, self.rng)
            repetition = run_case(engine, case, work, self.seed + 1000 * rep, stop, self.live, load)
            step.check()
            result.reps.append(repetition)
            if repetition.saturated:
                break
        step.check()
        yield Finished(case.name, [result], result, self.on_result is not None and not self.on_result(result))


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
    """The serving benchmark's parsed flags: every -p, -n, --concurrency and --request-rate combination, per
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
