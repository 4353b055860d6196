"""What speculation measured and promised on a llama.cpp engine: the report `--json` gives, the
limits of `--spec-exact` per thread count, and the verification batches' cost table (assumed,
stored, or measured after an answer by `calibrate`). A part of `LlamaEngine` (it inherits these
methods), kept here beside the rest of speculative decoding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmcli.engine.speculation.exact import CostProbe, CostTable, ExactProbe, assumed_draft_step


class SpeculationCosts:
    """Mixed into `LlamaEngine`: reads its `spec`, `exact`, `draft`, `measured`, `cost_table`,
    cache, tokenizer and thread counts."""

    spec: Any
    exact: Any
    draft: Any
    measured: Any
    cost_table: Any
    cache: Any
    tokenizer: Any
    threads: int
    threads_batch: int
    n_batch: int
    n_ctx: int
    n_vocab: int
    path: Path
    adaptive: Any
    decode_policy: Any
    _L: Any
    _ctx: Any
    _lock: Any

    def spec_report(self) -> dict:
        if not self.spec.enabled:
            return {}
        exact = self.exact
        short, long = exact.positions
        report = {**self.spec.settings(), "exact_positions": {"short": short, "long": long}}
        if self.draft is not None:
            report["n_ctx_draft"] = self.draft.n_ctx
            report["cache_type_k_draft"] = self.draft.type_k
            report["cache_type_v_draft"] = self.draft.type_v
        if self.spec.exact:
            report["exact_probe_ms"] = round(exact.probe_ms, 3)
        if len(exact.by_threads) > 1:
            report["exact_positions_by_threads"] = {
                str(n): {"short": a, "long": b} for n, (a, b) in sorted(exact.by_threads.items())
            }
        return report

    @property
    def exact_positions(self) -> tuple[int, int]:
        """--spec-exact's limits (short cache, long cache) at the thread count probed first."""
        return self.exact.positions

    @property
    def exact_probe_ms(self) -> float:
        return self.exact.probe_ms

    @property
    def _exact_by_threads(self) -> dict[int, tuple[int, int]]:
        """The limits per thread count (the tests compare them with fixed-count engines')."""
        return self.exact.by_threads

    def exact_limit(self, cached: int) -> int:
        """Most positions a verification batch starting after `cached` tokens may have, at the
        thread count now in effect (a count never probed: 1, plain steps only)."""
        return self.exact.limit(cached, self.threads)

    def _probe_exact_limits(self) -> None:
        """--spec-exact's limits for every decode thread count this engine may run (the adaptive
        thread policy changes the count while an answer streams)."""
        counts = self.decode_policy.options if self.adaptive else [self.threads]
        try:
            self.exact.probe(self._exact_probe(), counts, self.threads)
        finally:
            self._L.llama_set_n_threads(self._ctx, self.threads, self.threads_batch)

    def _cost_key(self) -> tuple[int, dict | None]:
        top = self.spec.draft_max + 1
        if self.draft is None:
            return top, None
        from llmcli.engine.state import model_identity

        return top, model_identity(self.draft.path)

    def _stored_costs(self) -> CostTable:
        """The verification batches' costs relative to a step at decode's thread count (and the
        draft model's step) as an earlier run measured and stored them; none yet: fixed assumed
        costs, nothing measured before the first token (`calibrate` measures, after the answer)."""
        top, draft_id = self._cost_key()
        table = self.measured.cost_table(self.threads, top, draft_id)
        if table is not None:
            return table
        draft_step = 0.0
        if self.draft is not None:
            draft_step = assumed_draft_step(Path(self.draft.path).stat().st_size, self.path.stat().st_size)
        return CostTable.assumed(top, draft_step=draft_step)

    @property
    def costs_pending(self) -> bool:
        """Adaptive k decides by assumed costs: `calibrate` would measure and store them."""
        return self.cost_table is not None and self.cost_table.source == "assumed" and bool(self._ctx)

    def calibrate(self) -> CostTable | None:
        """Measure the verification batches' costs (and a draft model's step) on this engine's
        context, about a second for a small model, and store them for the runs after this one;
        this engine decides by them from its next request on. Empties the KV cache. None where a
        decode failed (the assumed costs stay, and the next run tries again)."""
        top, draft_id = self._cost_key()
        probe = CostProbe(self.cache, self.tokenizer, n_batch=self.n_batch, n_ctx=self.n_ctx, top=top,
                          draft=self.draft)  # fmt: skip
        with self._lock:
            try:
                measured = probe.measure(self.threads)
            finally:
                self._L.llama_set_n_threads(self._ctx, self.threads, self.threads_batch)
        if measured is None:
            return None
        # as the store keeps them, so that this engine decides exactly as the runs that read them will
        measured.costs = {n: round(c, 4) for n, c in measured.costs.items()}
        if measured.draft_step:
            measured.draft_step = round(measured.draft_step, 4)
        self.measured.save_cost_table(self.threads, top, draft_id, measured)
        self.cost_table = measured  # this process's next requests decide by it, as later runs will
        return measured

    def _exact_probe(self) -> ExactProbe:
        return ExactProbe(self.cache, self.tokenizer, self.measured, n_vocab=self.n_vocab,
                          n_batch=self.n_batch, n_ctx=self.n_ctx, top=self.spec.draft_max + 1)  # fmt: skip

    def _probe_exact(self, n_prefix: int, top: int) -> int:
        """One probe after `n_prefix` cached tokens (benchmarks/exact_attention.py sweeps depths)."""
        return self._exact_probe().positions(n_prefix, top)
