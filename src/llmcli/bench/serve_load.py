"""The serving benchmark's load: synthetic prompts of an exact token length, the requests' lengths,
their arrival times (a rate, its burstiness and ramp-up), a ShareGPT dataset, and the flags that
set them (--goodput, --request-rate, --percentiles)."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmcli.bench.serve_results import Case, Load
    from llmcli.served.engine import ServedEngine


WORDS = (
    "time person year way day thing man world life hand part child eye woman place work week case "
    "point government company number group problem fact water river house story book light music "
    "garden window table paper market field road mountain island winter summer morning evening "
    "doctor teacher student friend family city country history science nature animal bird forest "
    "ocean letter language question answer reason moment idea picture color stone bridge station"
).split()


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
