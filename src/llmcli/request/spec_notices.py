"""Speculative decoding, told to the user after an answer: one line where `--spec-exact` or the
draft model's context let it draft nothing (or less), and the one-time measurement of its costs
on this machine after the answers (`measure_spec_costs`)."""

from __future__ import annotations

import sys

from llmcli import render


def exact_limit_notice(s, info=None, chat: bool = False) -> str | None:
    """One line when speculation was asked for and `--spec-exact` let it verify nothing: on this
    build no batch of two or more positions was bit-identical to one-token steps at the context
    length the answer ran at (`exact_blocked` steps), so the answer was decoded plainly. An answer
    that drafted nothing only because nothing matched gets no notice. With an f16/f32 cache
    it names bf16 and q8_0 too: llama.cpp's CPU flash attention splits one query's keys across
    threads only for K and V both f16 or both f32, so with either a step and a batch compute alike.
    `chat`: in the REPL's words (`/set spec-exact off`, `/set cache-type-k bf16`)."""
    spec = s.speculative
    if not spec or not spec.get("exact") or s.drafted_tokens or not s.decode_tokens:
        return None
    if not spec.get("exact_blocked"):
        return None
    off, types = "--no-spec-exact", "-ctk bf16 -ctv bf16, or q8_0"
    if chat:
        off, types = "/set spec-exact off", "/set cache-type-k bf16 and /set cache-type-v bf16, or q8_0"
    return (
        "speculative decoding drafted nothing: at this context length only one-position batches are "
        f"bit-identical to plain decoding on this build (--spec-exact); {off} verifies in any "
        "batch (the same distribution, but at temperature 0 a near-tie may come out differently)"
        + (
            f"; a bf16 or q8_0 KV cache ({types}) keeps batches exact at long contexts"
            if info is not None
            and info.backend == "CPU"
            and info.type_k in ("f16", "f32")
            and info.type_k == info.type_v
            else ""
        )
    )


def draft_context_notice(s) -> str | None:
    """One line when the draft model's context (-cd) was too small for the prompt and answer at
    some steps (`draft_ctx_blocked`), which were then decoded plainly."""
    spec = s.speculative or {}
    blocked = spec.get("draft_ctx_blocked")
    if not blocked:
        return None
    what = "drafted nothing" if not s.drafted_tokens else f"did not draft at {blocked} steps"
    return (
        f"speculative decoding {what}: the draft model's context ({spec.get('n_ctx_draft')} tokens, "
        "-cd) cannot hold the prompt and answer; a larger -cd (0: the target's) lets it draft"
    )


def measure_spec_costs(engine) -> None:
    """After the answers: a speculating engine that decided by assumed costs (the first use of this
    model, or pair, and settings on this machine) measures them now, once, and stores them, so the
    runs after it decide by this machine's own; nothing is measured before a first token. One line
    on stderr says so (--quiet silences it); Ctrl-C skips it (the next run measures)."""
    if not engine.costs_pending:
        return
    import time

    sys.stdout.flush()  # the answer is out before the pause
    render.info("llmcli: measuring speculative decoding's costs on this machine, once (Ctrl-C skips)")
    started = time.perf_counter()
    try:
        table = engine.calibrate()
    except KeyboardInterrupt:
        render.info("llmcli: skipped; the next run measures them")
        return
    if table is None:
        render.debug_log("speculation's costs could not be measured: the next run tries again")
        return
    seconds = time.perf_counter() - started
    render.debug_log(f"speculation's costs measured in {seconds:.1f} s: {table.report()}")
