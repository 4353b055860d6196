"""What a benchmark result records about the machine and the software that produced it.

Versions: llmcli, llama-cpp-python (package metadata), and the llama.cpp build it was compiled from
(`ggml_commit()` and `ggml_version()` of the bundled ggml, `llama_version()`); the backend and
llama.cpp's `llama_print_system_info()` (the SIMD paths the build uses); the CPU model and its SIMD
flags from /proc/cpuinfo; GPU names from ggml's device list. Every probe degrades to None.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any

from llmcli import __version__

# CPU flags that matter to llama.cpp's kernels (x86 and Arm spellings from /proc/cpuinfo).
SIMD_FLAGS = (
    "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni",
    "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16",
    "neon", "asimd", "asimddp", "asimdhp", "sve", "sve2", "i8mm", "bf16",
)  # fmt: skip
GPU_DEVICE_TYPES = (1, 2)  # GGML_BACKEND_DEVICE_TYPE_GPU, GGML_BACKEND_DEVICE_TYPE_IGPU


def collect(with_llama: bool = True) -> dict[str, Any]:
    """The environment block of a benchmark run; `with_llama=False` skips everything that loads llama.cpp."""
    cpu = cpu_info()
    env: dict[str, Any] = {
        "llmcli_version": __version__,
        "llama_cpp_python_version": _package_version("llama_cpp_python"),
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
    try:
        import llama_cpp

        from llmcli.engine.llama import backend_name
    except ImportError:
        return {}
    info: dict[str, Any] = {"backends": _safe(backend_name)}
    info["system_info"] = _safe(
        lambda: llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
    )
    info["llama_version"] = _safe(lambda: llama_cpp.llama_version().decode("utf-8", "replace"))
    ggml = _libggml()
    if ggml is not None:
        info["build_commit"] = _c_string(ggml, "ggml_commit")
        info["ggml_version"] = _c_string(ggml, "ggml_version")
        info["gpu_info"] = _gpu_names(ggml)
    return info


def cpu_info() -> dict[str, Any]:
    """CPU model name and the SIMD flags llama.cpp cares about, from /proc/cpuinfo (Linux)."""
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "hardware", "cpu model") and model is None:
                    model = value.strip()
                elif key in ("flags", "features"):
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


def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _safe(fn):
    try:
        return fn()
    except Exception:  # a probe must never break a benchmark
        return None


def _libggml():
    """ggml's base library as llama-cpp-python loaded it (for ggml_commit and the device list)."""
    try:
        from llama_cpp._ggml import libggml

        return libggml
    except Exception:
        return None


def _c_string(lib, name: str) -> str | None:
    try:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = ctypes.c_char_p, []
        value = fn()
        return value.decode("utf-8", "replace") if value else None
    except (AttributeError, OSError):
        return None


def _gpu_names(base) -> list[str]:
    """Descriptions of ggml's GPU devices (the device registry lives in libggml, not libggml-base)."""
    try:
        from pathlib import Path

        import llama_cpp

        lib_dir = Path(llama_cpp.__file__).parent / "lib"
        candidates = sorted(lib_dir.glob("libggml.*")) + sorted(lib_dir.glob("ggml.*"))
        if not candidates:
            return []
        reg = ctypes.CDLL(str(candidates[0]))
        reg.ggml_backend_dev_count.restype = ctypes.c_size_t
        reg.ggml_backend_dev_get.restype = ctypes.c_void_p
        reg.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
        base.ggml_backend_dev_type.restype = ctypes.c_int
        base.ggml_backend_dev_description.restype = ctypes.c_char_p
        for fn in (base.ggml_backend_dev_type, base.ggml_backend_dev_description):
            fn.argtypes = [ctypes.c_void_p]
        names = []
        for i in range(reg.ggml_backend_dev_count()):
            dev = reg.ggml_backend_dev_get(i)
            if base.ggml_backend_dev_type(dev) in GPU_DEVICE_TYPES:
                names.append(base.ggml_backend_dev_description(dev).decode("utf-8", "replace"))
        return names
    except Exception:
        return []
