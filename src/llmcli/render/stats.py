"""The one stats line: `--stats`, the line after each chat reply and `/stats` all print it.

One vocabulary and one set of units: tokens as "tok", speeds in tok/s, times in seconds, parts
joined with " · ", and prompt tokens taken from the KV cache called "reused".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmcli.contract import Stats


def stats_line(s: Stats, *, context: int | None = None, ttft: bool = True, load: bool = False) -> str:
    """prompt (reused), prefill speed, images (their encode time and tokens), generated, decode
    speed; then, as asked, time to first token, context used of `context`, and load time. A served
    model's figures (`s.sources` set) show "?" where the server gave no count, "~" where it is
    estimated from streamed chunks, and the server's own speeds (llama-server's timings) after
    "server". A decode speed that cannot be
    measured (one token, or a served answer that came in one chunk) is "–", never 0.0."""
    reused = f" ({s.cached_tokens} reused)" if s.cached_tokens else ""
    unknown = s.sources.get("prompt_tokens") == "unknown"
    approx = "~" if s.sources.get("completion_tokens") == "chunks" else ""
    parts = [
        "prompt ? tok" if unknown else f"prompt {s.prompt_tokens} tok{reused}",
        "prefill ? tok/s" if unknown else f"prefill {s.prefill_tps:.1f} tok/s",
        f"generated {approx}{s.completion_tokens} tok",
        f"decode {approx}{s.decode_tps:.1f} tok/s" if s.decode_measured else "decode – tok/s",
    ]
    if s.image_tokens:  # the third phase, after prefill: encoding images
        parts.insert(2, image_part(s))
    if s.speculative or s.target_passes:
        parts.append(speculation_part(s.drafted_tokens, s.accepted_tokens, s.decode_tokens, s.target_passes))
    if ttft:
        parts.append(f"ttft {s.ttft_ms / 1000:.2f} s")
    if s.tool_ms:  # where a slow answer's time went: the model (the speeds above) or its tools
        parts.append(f"tools {s.tool_ms / 1000:.2f} s (model {(s.prefill_ms + s.decode_ms) / 1000:.2f} s)")
    if context and not unknown:
        parts.append(f"context {s.context_used}/{context}")
    if load and not s.sources:
        parts.append(f"load {s.load_ms / 1000:.2f} s")
    if s.server.get("predicted_per_second") is not None:
        parts.append(
            f"server prefill {s.server.get('prompt_per_second', 0.0):.1f} tok/s, "
            f"decode {s.server['predicted_per_second']:.1f} tok/s"
        )
    return " · ".join(parts)


def retrieval_part(retrieval: dict) -> str:
    """`retrieve 0.04 s · 5 passages`: the phase before prefill of an answer from passages (the
    record's `retrieval` block)."""
    n = len(retrieval.get("passages") or [])
    seconds = (retrieval.get("timings_ms") or {}).get("total", 0.0) / 1000
    return f"retrieve {seconds:.2f} s · {n} passage{'s' if n != 1 else ''}"


def image_part(s: Stats) -> str:
    """`image 0.42 s · 64 tok`: the images' encode time and positions; those the KV cache already
    held (a later turn about the same image) are "reused", not encoded again."""
    reused = sum(int(a.get("tokens") or 0) for a in s.images if a.get("cached"))
    note = f" ({reused} reused)" if reused else ""
    if reused and reused >= s.image_tokens:
        return f"image {s.image_tokens} tok{note}"
    seconds = s.image_ms / 1000  # a small image encodes in milliseconds: not shown as 0.00
    return f"image {seconds:.{2 if seconds >= 0.1 else 3}f} s · {s.image_tokens} tok{note}"


def speculation_part(drafted: int, accepted: int, tokens: int, passes: int) -> str:
    """`accepted 41/50 (82%) · 2.31 tok/pass`: proposals the target kept, and tokens per target pass."""
    share = f" ({100 * accepted / drafted:.0f}%)" if drafted else ""
    per_pass = tokens / passes if passes else 0.0
    return f"accepted {accepted}/{drafted}{share} · {per_pass:.2f} tok/pass"
