"""What this llama.cpp build is and what it runs on: versions, compute backend, devices.

The one home of these probes: `llmcli doctor` and the environment block of `llmcli bench` both read
them here. Every function imports llama_cpp when called (never at module import), and raises
ImportError or OSError when llama-cpp-python or its shared library cannot be loaded.

ggml's version, commit and device list have no Python binding in llama-cpp-python, so they are read
from the loaded native library through ctypes. `_native()` is the only place in llmcli that reaches
into a private name of llama-cpp-python to get that library.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

# ggml_backend_dev_type, in the order of enum ggml_backend_dev_type (ggml-backend.h).
DEVICE_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")
GPU_DEVICE_TYPES = ("GPU", "IGPU")


def library():
    """llama-cpp-python's ctypes binding of libllama, `llama_cpp.llama_cpp` (ImportError, or OSError
    when its shared library cannot be loaded): every llama.cpp function llmcli calls."""
    return binding("llama_cpp")


def binding(name: str):
    """One module of llama-cpp-python's low-level layer (`llama_cpp`, `mtmd_cpp`, `llama_grammar`),
    loaded without running the package's `__init__` first.

    That `__init__` imports the high-level `Llama` class, which llmcli does not use, and with it
    numpy, jinja2 and the chat-format handlers: 0.12 s of every command's start, a seventh of a
    short `generate`. So the package module is created without running it, and runs the real
    `__init__` the first time anyone asks it for a name it lacks (`llama_cpp.Llama`, `from llama_cpp
    import __version__`): a test or a plugin that imports llama_cpp gets the whole package."""
    full = f"llama_cpp.{name}"
    if full not in sys.modules and "llama_cpp" not in sys.modules:
        sys.modules["llama_cpp"] = _deferred_package()
    return importlib.import_module(full)


def _deferred_package():
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError("No module named 'llama_cpp'", name="llama_cpp")
    package = importlib.util.module_from_spec(spec)
    ran: list[bool] = []

    def __getattr__(attr: str):
        if not attr.startswith("__") and importlib.util.find_spec(f"llama_cpp.{attr}") is not None:
            raise AttributeError(attr)  # a submodule: the import system loads it by itself
        if not ran:
            ran.append(True)
            spec.loader.exec_module(package)
        if attr in package.__dict__:
            return package.__dict__[attr]
        raise AttributeError(f"module 'llama_cpp' has no attribute {attr!r}")

    package.__getattr__ = __getattr__
    return package


@functools.cache
def llama_cpp_version() -> str | None:
    """llama-cpp-python's version, from the package metadata (read once: parsing it costs a
    few milliseconds, and every request's record names it); None when it is not installed."""
    spec = importlib.util.find_spec("llama_cpp")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        # an installed wheel's metadata folder beside the package names the version: found by
        # name, without importlib.metadata's walk of every folder on sys.path (15-40 ms)
        found = sorted(Path(folder).parent.glob("llama_cpp_python-*.dist-info"))
        if len(found) == 1:
            return found[0].name.removeprefix("llama_cpp_python-").removesuffix(".dist-info")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama_cpp_python")
    except PackageNotFoundError:
        return None


def backend_name() -> str:
    """The compute backend this llama.cpp build offloads to (CPU when it cannot offload)."""
    llama_cpp = library()
    if not llama_cpp.llama_supports_gpu_offload():
        return "CPU"
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    for name in ("CUDA", "Metal", "Vulkan", "ROCm", "HIP", "SYCL", "OpenCL", "CANN", "MUSA"):
        if name.upper() in info.upper():
            return name
    return "GPU"


def gpu_offload() -> bool:
    """Whether this build can offload layers to a GPU."""
    return bool(library().llama_supports_gpu_offload())


def mmap() -> bool:
    return bool(library().llama_supports_mmap())


def system_info() -> str:
    """`llama_print_system_info()`: the backends and SIMD paths the build uses."""
    return library().llama_print_system_info().decode("utf-8", "replace").strip()


def amx_weights() -> bool:
    """Whether this build's CPU backend would move quantized weights into AMX tiles: built for a CPU
    with AMX-INT8 (`AMX_INT8 = 1` in the system info), where the AMX buffer type comes first among
    llama.cpp's extra (repacked) weight buffers."""
    return re.search(r"\bAMX_INT8 = 1\b", system_info()) is not None


def weight_repack(requested: bool | None = None) -> bool:
    """Whether a model loads with llama.cpp's extra CPU weight buffers (weights repacked for the
    CPU's matmul kernels; llama.cpp's `--no-repack` turns them off): as asked, and by default on,
    except on a build that would hand the weights to AMX. There llama.cpp's AMX matmul crashes the
    process at the first batch of more than one token on some hosts (ggml-org/llama.cpp#20824,
    #26954; seen on Sapphire Rapids virtual machines, whose kernel does grant the AMX tile-data
    permission, so it is not that; inside ggml_backend_amx_mul_mat, not diagnosed further); with
    the extra buffers off the weights stay in the plain CPU buffer and its AVX-512 kernels."""
    if requested is not None:
        return requested
    return not amx_weights()


def llama_version() -> str:
    return library().llama_version().decode("utf-8", "replace")


def ggml_version() -> str | None:
    return _c_string("ggml_version")


def ggml_commit() -> str | None:
    """The commit of the bundled ggml (llama.cpp's build commit)."""
    return _c_string("ggml_commit")


def devices() -> list[dict[str, Any]]:
    """The devices ggml registered (CPU, GPUs, accelerators), with their memory; [] on a build
    without the device API."""
    lib = _native()
    try:
        lib.ggml_backend_dev_count.restype = ctypes.c_size_t
        lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
        lib.ggml_backend_dev_get.restype = ctypes.c_void_p
        for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
            getattr(lib, name).restype = ctypes.c_char_p
        lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_dev_type.restype = ctypes.c_int
        lib.ggml_backend_dev_memory.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_size_t),
        ]
    except AttributeError:  # an older build without the device API
        return []
    found = []
    for index in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(index)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(dev)
        found.append(
            {
                "name": (lib.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace"),
                "description": (lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
                "type": DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else str(kind),
                "memory_free": free.value,
                "memory_total": total.value,
            }
        )
    return found


def gpu_names() -> list[str]:
    """Descriptions of ggml's GPU devices (discrete and integrated)."""
    return [d["description"] for d in devices() if d["type"] in GPU_DEVICE_TYPES]


def _native() -> ctypes.CDLL:
    """libllama as llama-cpp-python loaded it; its symbol lookup reaches the ggml libraries it links.

    `llama_cpp.llama_cpp._lib` is private: llama-cpp-python binds no ggml version or device
    function, and this is the one place llmcli reaches for it."""
    return library()._lib


def _c_string(name: str) -> str | None:
    """A `const char *f(void)` of the native library; None when the build lacks it."""
    try:
        func = getattr(_native(), name)
    except AttributeError:
        return None
    func.restype = ctypes.c_char_p
    func.argtypes = []
    value = func()
    return value.decode("utf-8", "replace") if value else None
