"""Sampling settings a model recommends, used where the user set nothing.

Precedence, lowest first: the built-in defaults (`SamplingParams`), the model's recommendation,
the configuration file, `LLMCLI_*` variables, flags. A model recommends through the GGUF keys
llama.cpp reads for the same purpose (`general.sampling.temp`, `.top_k`, `.top_p`, `.min_p`,
`.penalty_repeat`, `.penalty_last_n`); a bundled model whose file predates those keys carries
llmcli's own recommendation (`defaults.BUNDLED_SAMPLING`).
"""

from __future__ import annotations

from typing import Any

from llmcli.contract import ModelInfo, SamplingParams
from llmcli.defaults import BUNDLED_SAMPLING

GGUF_KEYS = {
    "general.sampling.temp": "temperature",
    "general.sampling.top_k": "top_k",
    "general.sampling.top_p": "top_p",
    "general.sampling.min_p": "min_p",
    "general.sampling.penalty_repeat": "repeat_penalty",
    "general.sampling.penalty_last_n": "repeat_last_n",
}


def from_metadata(metadata: dict[str, str]) -> dict[str, Any]:
    """The recommendation in a model's GGUF metadata (values as llama.cpp prints them)."""
    found: dict[str, Any] = {}
    for key, name in GGUF_KEYS.items():
        raw = metadata.get(key)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        found[name] = int(value) if name in ("top_k", "repeat_last_n") else value
    return found


def recommended(info: ModelInfo, ref: str) -> dict[str, Any]:
    return {**BUNDLED_SAMPLING.get(ref, {}), **info.sampling}


def apply_recommended(params: SamplingParams, info: ModelInfo, ref: str) -> dict[str, Any]:
    """Set what the model recommends on the settings the user left at their defaults; returns
    what was applied. A recommendation that fails validation is not applied."""
    applied: dict[str, Any] = {}
    for name, value in recommended(info, ref).items():
        if name not in params.defaulted:
            continue
        old = getattr(params, name)
        setattr(params, name, value)
        try:
            params.validate()
        except Exception:
            setattr(params, name, old)
            continue
        applied[name] = value
    return applied
