"""Will a model fit in memory? An estimate made from the file size alone, before downloading.

need = file size (the weights are mapped into memory whole)
     + KV cache for a context of defaults.CTX_CAP tokens, at 16-bit precision
     + working buffers (5% of the weights, at least 128 MiB)

Without the header the KV cache is estimated from the parameter count the file size implies
(see quants.BITS_PER_WEIGHT): about 48 KiB per token per sqrt(billion parameters), which is
close to or above what Llama 3, Qwen 2.5, Gemma 3 and Mistral models use with grouped-query
attention. Verdicts: "yes" fits in the memory available now (MemAvailable), "tight" fits in
total memory but not in what is free now, "no" exceeds total memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmcli import defaults
from llmcli.hub import quants

DEFAULT_CTX = defaults.CTX_CAP
_KV_PER_TOKEN_PER_SQRT_B = 48 * 1024
_MIN_OVERHEAD = 128 << 20
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class Memory:
    available: int
    total: int


@dataclass(frozen=True)
class Fit:
    need: int
    verdict: str  # "yes", "tight", "no", or "?" when memory is unknown


def memory() -> Memory | None:
    """MemAvailable and MemTotal from /proc/meminfo (None where there is no such file)."""
    try:
        text = MEMINFO.read_text()
    except OSError:
        return None
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    if "MemTotal" not in values:
        return None
    return Memory(values.get("MemAvailable", values.get("MemFree", 0)), values["MemTotal"])


def kv_estimate(size: int, label: str | None, n_ctx: int = DEFAULT_CTX) -> int:
    billions = quants.estimated_params(size, label) / 1e9
    return int(n_ctx * _KV_PER_TOKEN_PER_SQRT_B * billions**0.5)


def need(size: int, label: str | None, n_ctx: int = DEFAULT_CTX) -> int:
    return size + kv_estimate(size, label, n_ctx) + max(_MIN_OVERHEAD, size // 20)


def judge(size: int, label: str | None, mem: Memory | None, n_ctx: int = DEFAULT_CTX) -> Fit:
    required = need(size, label, n_ctx)
    if mem is None:
        return Fit(required, "?")
    if required <= mem.available:
        return Fit(required, "yes")
    return Fit(required, "tight" if required <= mem.total else "no")
