"""`bench --scenario batch` as text: the table (one row per N), its footer lines, the progress line."""

from __future__ import annotations

from llmcli.render import tables


def table(rows: list[dict], roofline: bool) -> str:
    """One row per number of sequences: aggregate decode speed, each sequence's, prefill, and the
    aggregate's ratio to one sequence's (mean ± sd over the repetitions)."""
    head = ["model", "threads", "pp", "tg", "N", "pp t/s", "t/s (all)", "t/s (each)", "vs N=1", "GB/s"]
    head += ["roofline"] if roofline else []
    body = []
    for r in rows:
        row = [r["model_type"]] + [str(r[k]) for k in ("n_threads", "n_prompt", "n_gen", "n_parallel")]
        row += [_sd(r, "prefill_"), _sd(r, ""), _sd(r, "seq_"),
                "" if r["vs_one"] is None else f"{r['vs_one']:.2f}x",
                "" if r["effective_gbps"] is None else f"{r['effective_gbps']:.2f}"]  # fmt: skip
        if roofline:
            row.append("" if r["roofline_fraction"] is None else f"{r['roofline_fraction'] * 100:.0f}%")
        body.append(row)
    right = [h != "model" for h in head]
    return tables.markdown(head, body, right)


def notes(records: list[dict]) -> list[str]:
    """Footer lines: what each column counts, and sequences that stopped early."""
    rows = [r for r in records if r["scenario"] == "batch"]
    if not rows:
        return []
    lines = ["batch: N prompts of pp random tokens answered together by llmcli batch's decoder, greedy, "
             "tg tokens each; t/s (all) = N x the decode speed of the first sequence to end, while all N "
             "decode (decode only, as llama-batched-bench's S_TG); t/s (each) = one sequence's own decode "
             "speed, averaged; pp t/s = all prompts' tokens / time to the last first token"]  # fmt: skip
    early = [r for r in rows if any(r["ended_early"])]
    if early:
        lines.append("ended early: some sequences reached an end-of-generation token before tg ("
                     + ", ".join(f"N={r['n_parallel']}: {max(r['ended_early'])}" for r in early)
                     + "); t/s (all) is taken while all N still decode")  # fmt: skip
    return lines


def finished(r: dict) -> str:
    """A finished N, for the progress line."""
    line = f"{_sd(r, '')} t/s all, {_sd(r, 'seq_')} each"
    if r["vs_one"] is not None:
        line += f" ({r['vs_one']:.2f}x N=1)"
    return line


def _sd(r: dict, kind: str) -> str:
    """avg_{kind}ts ± stddev_{kind}ts, or n/a without samples."""
    return f"{r[f'avg_{kind}ts']:.2f} ± {r[f'stddev_{kind}ts']:.2f}" if r[f"samples_{kind}ts"] else "n/a"
