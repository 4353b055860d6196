"""`--spec-exact`'s probe of bit-identical batch sizes, the calibration of what a verification batch
costs, and the on-disk store of what speculative decoding measured on a model, build and settings
(those limits, and the verification batches' relative costs), under the cache dir.

Which CPU kernel runs depends on the shapes: repacked K-quant weights take 4 or more rows through a
GEMM that rounds differently from the one-row GEMV; flash attention splits the keys across threads
for a single query over 512 or more cells. So a verification batch gives, at every position, logits
bit-identical to decoding the same tokens one at a time (temperature 0 then reproduces the plain
text exactly) only up to some number of positions, which `ExactProbe` finds and `ExactLimits`
keeps per decode thread count.
"""

from __future__ import annotations

import ctypes
import json
import time
from pathlib import Path

from llmcli.contract import EngineOptions, SpecOptions
from llmcli.engine.backend import llama_cpp_version
from llmcli.engine.kvcache import KVCache
from llmcli.engine.vocab import Tokenizer

# llama.cpp's CPU attention takes another path for one query once the cache view reaches 512
# cells (it splits the keys across threads), so exactness is probed on both sides of that.
EXACT_SHORT_CELLS = 256


class ExactLimits:
    """The most positions a verification batch may have, per decode thread count (with
    --spec-exact; without it, the largest batch at every count)."""

    SHORT_CELLS = EXACT_SHORT_CELLS

    def __init__(self, spec: SpecOptions) -> None:
        self.exact = spec.exact
        self.positions = (spec.draft_max + 1, spec.draft_max + 1)  # (short cache, long cache) now
        self.by_threads: dict[int, tuple[int, int]] = {}  # --spec-exact's limits per thread count
        self.probe_ms = 0.0  # what finding them took at load (reading the cached ones: ~0)

    def limit(self, cached: int, threads: int) -> int:
        """Most positions a verification batch starting after `cached` tokens may have, at
        `threads` decode threads (a count never probed: 1, plain steps only)."""
        if self.exact:
            short, long = self.by_threads.get(threads, (1, 1))
        else:
            short, long = self.positions
        if cached + short <= EXACT_SHORT_CELLS:
            return short
        return max(long, min(short, EXACT_SHORT_CELLS - cached))

    def batches_past_short(self, k_min: int) -> bool:
        """Whether some thread count allows a batch of more than `k_min` past the short cache."""
        return any(long > k_min for _, long in self.by_threads.values())

    def probe(self, probe: ExactProbe, counts: list[int], threads: int) -> None:
        """The limits for every decode thread count in `counts` and the one now in effect (probed
        first): the kernels' rounding depends on the count (one thread never splits attention's
        keys; two do from 512 cells on). The caller sets its thread counts back afterwards."""
        for n in sorted(set(counts) | {threads}, key=lambda n: n != threads):
            self.by_threads[n] = probe.limits(n)
        self.positions = self.by_threads[threads]


class ExactProbe:
    """Finds the limits on the engine's own context: decodes a fixed token sequence one token at
    a time, then in batches, and compares the logits byte for byte (kernel choice depends on
    shapes, not values). Probed once per model, build, settings and thread count; stored."""

    TEXT = "The quick brown fox jumps over the lazy dog; def f(x): return x * 42  # 0123456789 ok. "

    def __init__(self, cache: KVCache, tokenizer: Tokenizer, store: MeasuredStore, *, n_vocab: int,
                 n_batch: int, n_ctx: int, top: int) -> None:  # fmt: skip
        self.cache, self.tokenizer, self.store = cache, tokenizer, store
        self.n_vocab, self.n_batch, self.n_ctx, self.top = n_vocab, n_batch, n_ctx, top

    def limits(self, threads: int) -> tuple[int, int]:
        """(short cache, long cache) at `threads` decode threads: the stored ones, else probed."""
        L = self.cache.L
        L.llama_set_n_threads(self.cache.ctx, threads, threads)
        stored = self.store.exact_limits(threads, self.top)
        if stored is not None:
            return stored
        short = self.positions(8, self.top)
        long = self.positions(EXACT_SHORT_CELLS + 40, self.top) if self.n_ctx >= 400 else short
        self.store.save_exact_limits(threads, self.top, (short, long))
        return short, long

    def positions(self, n_prefix: int, top: int) -> int:
        """The most positions (up to `top`) of a batch after `n_prefix` cached tokens that give
        the logits of one-at-a-time decoding; the cache is empty afterwards."""
        cache, L = self.cache, self.cache.L
        base = self.tokenizer.tokenize(self.TEXT, add_bos=False)
        seq = (base * (1 + (n_prefix + top) // max(1, len(base))))[: n_prefix + top]
        prefix, tail = seq[:n_prefix], seq[n_prefix:]
        size = self.n_vocab * 4

        def row(i: int) -> bytes:
            return ctypes.string_at(L.llama_get_logits_ith(cache.ctx, i), size)

        def exact(m: int) -> bool:
            cache.trim(n_prefix)  # as verification does: the rejected rest leaves the cache
            if len(cache.tokens) != n_prefix or cache.decode_all(tail[:m]) != 0:
                return False
            return all(row(i) == singles[i] for i in range(m))

        limit = 1
        try:
            cache.clear()
            step = self.n_batch
            if any(cache.decode(prefix[i : i + step]) != 0 for i in range(0, len(prefix), step)):
                return 1
            singles = []
            for t in tail:
                if cache.decode([t]) != 0:
                    return 1
                singles.append(row(-1))
            # The common case, every size agreeing, in two batches: the largest and the smallest
            # (the kernels change at thresholds of rows, and every size-by-size probe so far found
            # the sizes that agree to run from 2 up to a limit). Else size by size from 2.
            if len(tail) > 2 and exact(len(tail)) and exact(2):
                return len(tail)
            for m in range(2, len(tail) + 1):  # the sizes below the first that differs
                if not exact(m):
                    break
                limit = m
        finally:
            cache.clear()
        return limit


# Batch sizes the calibration times; the k policy interpolates between them (a batch's cost grows
# nearly linearly with its positions, in steps of a few rows where the weights are repacked).
CALIBRATION_SIZES = (2, 3, 5, 9, 13, 17, 25, 33, 49, 65)


# What a first run assumes a verification batch to cost, per extra position, relative to one step;
# measured tables on a 2-core AVX2 machine went from 0.19 (Gemma 3 270M) to 0.49 (SmolLM2-135M).
ASSUMED_SLOPE = 0.55


def assumed_draft_step(draft_bytes: int, target_bytes: int) -> float:
    """A draft model's step relative to the target's, before it is measured: decoding one token
    reads every weight once, so the ratio of the files' sizes, with a tenth more for the draft's
    own per-token overhead (Qwen2.5-Coder 0.5B for 1.5B: 0.44 by size, 0.48 measured)."""
    if draft_bytes <= 0 or target_bytes <= 0:
        return 1.0
    return min(1.0, 1.1 * draft_bytes / target_bytes)


class CostTable:
    """What the adaptive k policy decides by: a verification batch's cost relative to one decode
    step, per number of positions, and a draft model's step relative to the target's. Measured once
    per machine, build, model (pair), settings and thread count, after the first answer (which
    decides by fixed assumed costs: nothing is measured before a first token), stored, and only
    read after that:
    so the k chosen at each step depends on the tokens so far and on this table, never on how fast
    the run at hand goes, and the same command gives the same text."""

    def __init__(self, costs: dict[int, float], draft_step: float = 0.0, source: str = "stored",
                 ms: float = 0.0) -> None:  # fmt: skip
        self.costs = {1: 1.0, **{n: c for n, c in costs.items() if n > 1}}
        self.draft_step = draft_step
        # "stored" (by an earlier run), "assumed" (nothing measured yet: a first run, which measures
        # after its answer) or "measured" (by this process, after an earlier answer: a chat's)
        self.source = source
        self.ms = ms  # what measuring it took

    @classmethod
    def assumed(cls, top: int, slope: float = ASSUMED_SLOPE, draft_step: float = 0.0) -> CostTable:
        """Until measured: a batch of n positions costs 1 + slope * (n - 1) steps (dearer than
        measured on the CPUs tried, so a first run drafts less, not more, than it would pay to),
        and a draft model's step what the caller says (`assumed_draft_step`). Fixed numbers: a run
        that decides by them decides the same way every time."""
        return cls({n: 1 + slope * (n - 1) for n in range(2, top + 1)}, draft_step, "assumed")

    def report(self) -> dict:
        table = {str(n): round(c, 3) for n, c in sorted(self.costs.items())}
        return {"costs": self.source, "cost_table": table,
                "draft_step_cost": round(self.draft_step, 3) if self.draft_step else None,
                "calibration_ms": round(self.ms, 3)}  # fmt: skip


class CostProbe:
    """Times verification batches on the engine's own context (a fixed token sequence after
    `PREFIX` cached tokens, trimmed back after each, as verification trims), and a draft model's
    greedy steps. Each batch size runs right after a one-token step, interleaved over rounds; a
    size's cost is its fastest run over the fastest one-token step (a run that waited for a busy
    core says nothing about the work; the step, timed once per size each round, has the most runs,
    so its fastest is the surest: on a busy machine the costs err high, so k errs short). The
    first round (llama.cpp builds each shape's graph) is not counted; rounds go on for about
    `BUDGET_S` (at least `MIN_ROUNDS`, at most `MAX_ROUNDS`); a larger batch never costs less than
    a smaller one. The cache is empty afterwards."""

    PREFIX = 128
    MIN_ROUNDS = 2
    MAX_ROUNDS = 8
    BUDGET_S = 1.0

    def __init__(self, cache: KVCache, tokenizer: Tokenizer, *, n_batch: int, n_ctx: int, top: int,
                 draft=None) -> None:  # fmt: skip
        self.cache, self.tokenizer, self.draft = cache, tokenizer, draft
        self.n_batch, self.n_ctx, self.top = n_batch, n_ctx, top

    def sizes(self) -> list[int]:
        return sorted(({n for n in CALIBRATION_SIZES if n <= self.top} | {self.top}) - {1})

    def measure(self, threads: int) -> CostTable | None:
        """The table at `threads` decode threads; None where a decode failed."""

        started = time.perf_counter()
        cache, L = self.cache, self.cache.L
        L.llama_set_n_threads(cache.ctx, threads, threads)
        sizes = self.sizes()
        n_prefix = max(1, min(self.PREFIX, self.n_ctx - self.top - 8))
        base = self.tokenizer.tokenize(ExactProbe.TEXT, add_bos=False)
        seq = (base * (1 + (n_prefix + self.top) // max(1, len(base))))[: n_prefix + self.top]
        prefix, tail = seq[:n_prefix], seq[n_prefix:]
        batches: dict[int, list[float]] = {n: [] for n in sizes}
        steps: list[float] = []

        def timed(n: int) -> float | None:
            cache.trim(n_prefix)
            t0 = time.perf_counter()
            rc = cache.decode(tail[:1]) if n == 1 else cache.decode_all(tail[:n])
            cache.synchronize()
            return time.perf_counter() - t0 if rc == 0 else None

        try:
            cache.clear()
            step = self.n_batch
            if any(cache.decode(prefix[i : i + step]) != 0 for i in range(0, len(prefix), step)):
                return None
            if any(timed(n) is None for n in [1, *sizes]):  # llama.cpp builds each shape's graph
                return None
            rounds = 0
            while rounds < self.MAX_ROUNDS:
                for n in sizes:
                    one, many = timed(1), timed(n)
                    if one is None or many is None:
                        return None
                    batches[n].append(many)
                    steps.append(one)
                rounds += 1
                if rounds >= self.MIN_ROUNDS and time.perf_counter() - started > self.BUDGET_S:
                    break
            unit = min(steps)
            draft_step = self._draft_step(prefix, threads) if self.draft is not None else 0.0
        finally:
            cache.clear()
        costs, floor = {}, 1.0
        for n in sizes:
            floor = max(floor, min(batches[n]) / unit)
            costs[n] = floor
        rel_draft = draft_step / unit if draft_step else 0.0
        return CostTable(costs, rel_draft, "measured", (time.perf_counter() - started) * 1000)

    def _draft_step(self, prefix: list[int], threads: int) -> float:
        """Seconds a draft model's proposal costs per token, catching up included: the median of
        three proposals of 4 after the same history (a first one, which builds graphs, not counted)."""
        draft, k = self.draft, 4
        times = []
        try:
            draft.sync(prefix)
            for _ in range(4):
                t0 = time.perf_counter()
                got = draft.propose(prefix, k, threads)
                times.append((time.perf_counter() - t0) / max(1, len(got)))
        finally:
            draft.reset()
        return min(times[1:])


class MeasuredStore:
    """Files under the cache dir keyed by this model, llama.cpp build, settings and thread count:
    `spec-exact` (the probed limits), `spec-costs` (verification batches' relative costs) and
    `batch-knee` (`--parallel auto`'s speeds by N, keyed by the CPU's model name too).
    Best effort: a store that cannot be read or written costs only the next run's head start."""

    def __init__(self, L, path: Path, options: EngineOptions, *, gpu_layers: int, repack: bool) -> None:
        self.L, self.path, self.options = L, path, options
        self.gpu_layers, self.repack = gpu_layers, repack
        self._file_identity: dict | None = None  # the model file's, read at first use

    def _file(self, folder: str, threads: int, **extra) -> tuple[str, Path]:
        """A key naming this model, build and settings at `threads`, and the file under the
        cache dir that holds what was measured for it."""
        import hashlib

        from llmcli import paths
        from llmcli.engine.state import model_identity

        opts = self.options
        if self._file_identity is None:
            self._file_identity = model_identity(self.path)
        key = json.dumps({"model": self._file_identity, "llama_cpp": llama_cpp_version(),
                          "system": self.L.llama_print_system_info().decode("utf-8", "replace"),
                          "gpu_layers": self.gpu_layers, "flash_attn": opts.flash_attn,
                          "type_k": opts.type_k, "type_v": opts.type_v, "repack": self.repack,
                          "threads": threads, **extra}, sort_keys=True)  # fmt: skip
        name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".json"
        return key, paths.cache_dir() / folder / name

    def exact_limits(self, threads: int, top: int) -> tuple[int, int] | None:
        _, cache = self._file("spec-exact", threads, top=top, probe=3)
        try:
            short, long = json.loads(cache.read_text())["positions"]
            return int(short), int(long)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save_exact_limits(self, threads: int, top: int, limits: tuple[int, int]) -> None:
        key, cache = self._file("spec-exact", threads, top=top, probe=3)
        try:
            from llmcli.atomic import write_atomic

            cache.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(cache, json.dumps({"key": json.loads(key), "positions": list(limits)}))
        except OSError:
            pass

    def cost_table(self, threads: int, top: int, draft: dict | None) -> CostTable | None:
        """The calibrated cost table for `threads` and a largest batch of `top` (None: none yet)."""
        _, path = self._file("spec-table", threads, top=top, draft=draft)
        try:
            doc = json.loads(path.read_text())
            costs = {int(n): float(c) for n, c in doc["costs"].items()}
            draft_step = float(doc.get("draft_step") or 0.0)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if not costs or not all(0 < c < 1000 for c in costs.values()) or not 0 <= draft_step < 1000:
            return None
        return CostTable(costs, draft_step, "stored")

    def save_cost_table(self, threads: int, top: int, draft: dict | None, table: CostTable) -> None:
        key, path = self._file("spec-table", threads, top=top, draft=draft)
        try:
            from llmcli.atomic import write_atomic

            path.parent.mkdir(parents=True, exist_ok=True)
            costs = {str(n): round(c, 4) for n, c in sorted(table.costs.items())}
            doc = {"key": json.loads(key), "costs": costs, "draft_step": round(table.draft_step, 4),
                   "measured_ms": round(table.ms, 1)}  # fmt: skip
            write_atomic(path, json.dumps(doc))
        except OSError:
            pass

    def _knee_file(self, threads: int, sizes: tuple[int, ...], more: tuple[int, ...],
                   probe: tuple[int, ...]) -> tuple[str, Path]:  # fmt: skip
        from llmcli.engine.threads import cpu_model

        return self._file("batch-knee", threads, cpu=cpu_model(), sizes=list(sizes), more=list(more),
                          probe=list(probe))  # fmt: skip

    def knee_speeds(self, threads: int, sizes: tuple[int, ...], more: tuple[int, ...],
                    probe: tuple[int, ...]) -> dict[int, float] | None:  # fmt: skip
        """`--parallel auto`'s aggregate decode speeds by N, as an earlier run measured them on this
        CPU, model, build and settings with the same probe (None: none stored, or unreadable)."""
        try:
            doc = json.loads(self._knee_file(threads, sizes, more, probe)[1].read_text())
            speeds = {int(n): float(v) for n, v in doc["speeds"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if not set(sizes) <= set(speeds) or not all(0 < v < 1e9 for v in speeds.values()):
            return None
        return speeds

    def save_knee_speeds(self, threads: int, sizes: tuple[int, ...], more: tuple[int, ...],
                         probe: tuple[int, ...], speeds: dict[int, float]) -> None:  # fmt: skip
        key, path = self._knee_file(threads, sizes, more, probe)
        try:
            from llmcli.atomic import write_atomic

            path.parent.mkdir(parents=True, exist_ok=True)
            doc = {"key": json.loads(key), "speeds": {str(n): v for n, v in sorted(speeds.items())}}
            write_atomic(path, json.dumps(doc))
        except OSError:
            pass

    def batch_costs(self, threads: int) -> dict[int, float]:
        """What earlier runs measured a verification batch of n positions to cost, relative to
        one step, on this model, build and settings (empty when nothing was, or it cannot be read)."""
        rows = _read_costs(self._file("spec-costs", threads, costs=1)[1])
        stored = {n: rel for n, (rel, _) in rows.items()}
        if not all(0 < rel < 1000 for rel in stored.values()):
            return {}
        return {1: 1.0, **stored} if stored else {}

    def add_batch_costs(self, threads: int, measured: dict[int, tuple[float, int]]) -> None:
        """Add this run's relative batch costs (n -> (relative cost, batches)) to the stored ones,
        as a running mean that follows the machine (each size stands for at most 50 batches)."""
        from llmcli.atomic import locked, write_atomic

        if not measured:
            return
        key, path = self._file("spec-costs", threads, costs=1)
        try:
            with locked(path, timeout=2.0):
                old = _read_costs(path)
                for n, (rel, batches) in measured.items():
                    r, w = old.get(n, (rel, 0.0))
                    total = w + batches
                    old[n] = ((r * w + rel * batches) / total, min(total, 50.0))
                costs = {str(n): [round(r, 4), w] for n, (r, w) in sorted(old.items())}
                write_atomic(path, json.dumps({"key": json.loads(key), "costs": costs}), lock=False)
        except Exception:  # noqa: BLE001 - a lock timeout, a read-only cache: never fail the answer
            return


def _read_costs(path: Path) -> dict[int, tuple[float, float]]:
    """A stored batch-costs file: positions -> (cost relative to one step, batches it stands for);
    empty when there is none or it cannot be read."""
    try:
        return {int(n): (float(r), float(w)) for n, (r, w) in json.loads(path.read_text())["costs"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
