"""What a benchmark result records about the machine and the software that produced it.

Versions: llmcli, llama-cpp-python (package metadata), and the llama.cpp build it was compiled from
(`ggml_commit()` and `ggml_version()` of the bundled ggml, `llama_version()`); the backend and
llama.cpp's `llama_print_system_info()` (the SIMD paths the build uses); the CPU model and its SIMD
flags from /proc/cpuinfo; GPU names from ggml's device list. The llama.cpp probes are the engine's
(`llmcli.engine.backend`, shared with `llmcli doctor`). Every probe degrades to None.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from llmcli import __version__
from llmcli.engine.backend import llama_cpp_version

# CPU flags that matter to llama.cpp's kernels (x86 and Arm spellings from /proc/cpuinfo).
SIMD_FLAGS = (
    "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni",
    "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16",
    "neon", "asimd", "asimddp", "asimdhp", "sve", "sve2", "i8mm", "bf16",
)  # fmt: skip


def collect(with_llama: bool = True) -> dict[str, Any]:
    """The environment block of a benchmark run; `with_llama=False` skips everything that loads llama.cpp."""
    cpu = cpu_info()
    env: dict[str, Any] = {
        "llmcli_version": __version__,
        "llama_cpp_python_version": llama_cpp_version(),
        "build_commit": None,
        "ggml_version": None,
        "llama_version": None,
        "backends": None,
        "system_info": None,
        "cpu_info": cpu["model"],
        "cpu_simd": cpu["simd"],
        "cpu_logical": os.cpu_count(),
        "cpu_affinity": _affinity(),
        "gpu_info": [],
        "os": platform.platform(),
        "python_version": platform.python_version(),
    }
    if with_llama:
        env.update(llama_info())
    return env


def llama_info() -> dict[str, Any]:
    from llmcli.engine import backend

    try:
        backend.library()
    except ImportError:
        return {}
    return {
        "backends": _safe(backend.backend_name),
        "system_info": _safe(backend.system_info),
        "llama_version": _safe(backend.llama_version),
        "build_commit": _safe(backend.ggml_commit),
        "ggml_version": _safe(backend.ggml_version),
        "gpu_info": _safe(backend.gpu_names) or [],
        "weight_repack": _safe(backend.weight_repack),
    }


def cpu_info() -> dict[str, Any]:
    """CPU model name and the SIMD flags llama.cpp cares about, from /proc/cpuinfo (Linux)."""
    from llmcli.engine.threads import cpu_model

    model, flags = cpu_model(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("flags", "features"):
                    flags.update(value.split())
    except OSError:
        pass
    if "pni" in flags:  # Linux names SSE3 "pni" (Prescott New Instructions)
        flags.add("sse3")
    return {"model": model or platform.processor() or None, "simd": [f for f in SIMD_FLAGS if f in flags]}


def _affinity() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _safe(fn):
    try:
        return fn()
    except Exception:  # a probe must never break a benchmark
        return None
