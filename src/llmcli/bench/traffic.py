"""Memory traffic of decoding: the weight bytes one token reads, and what a decode speed implies.

Decoding one token multiplies every weight matrix by one vector, so every weight byte is read once
per token. Exceptions, taken from the tensor list of the GGUF header:
- the token embedding table is only looked up (one row per token), unless the model has no separate
  `output.weight` (tied embeddings, as Gemma), in which case the output projection reads all of it;
- mixture-of-experts tensors (`*_exps`) are read only for the experts a token is routed to:
  `expert_used_count / expert_count` of their bytes (an average; the real figure depends on routing).
KV-cache reads are not counted, so the figure understates traffic at large depths.
"""

from __future__ import annotations

from typing import Any

EMBEDDING = "token_embd.weight"
OUTPUT = "output.weight"


def weight_bytes_per_token(header: Any) -> int:
    """Bytes of weights one decode step reads, from a `llmcli.gguf_file.GGUFHeader`."""
    names = {t.name for t in header.tensors}
    used, total = _experts(header)
    count = 0.0
    for tensor in header.tensors:
        size = float(tensor.n_bytes)
        if tensor.name == EMBEDDING and OUTPUT in names:
            size = size / max(tensor.shape[-1], 1)  # one row
        elif "_exps" in tensor.name and used and total:
            size = size * used / total
        count += size
    return int(round(count))


def _experts(header: Any) -> tuple[int | None, int | None]:
    arch = header.architecture
    return header.get_int(f"{arch}.expert_used_count"), header.get_int(f"{arch}.expert_count")


def effective_gbps(bytes_per_token: int, tokens_per_s: float) -> float:
    """Weight bytes read per second at this decode speed, in GB/s (10^9 bytes)."""
    return bytes_per_token * tokens_per_s / 1e9


def roofline_fraction(gbps: float | None, measured_gbps: float | None) -> float | None:
    """The effective traffic as a fraction of the measured memory bandwidth."""
    if gbps is None or not measured_gbps:
        return None
    return gbps / measured_gbps
