"""Sampling settings a model recommends, used where the user set nothing.

Precedence, lowest first: the built-in defaults (`SamplingParams`), the model's recommendation,
the configuration file, `LLMCLI_*` variables, flags. A model recommends through the GGUF keys
llama.cpp reads for the same purpose (`general.sampling.temp`, `.top_k`, `.top_p`, `.min_p`,
`.penalty_repeat`, `.penalty_last_n`); a bundled model whose file predates those keys carries
llmcli's own recommendation (`defaults.BUNDLED_SAMPLING`).

Settings are shown as a user would type them (`value_text`, `settings_text`): chat's `/show` and
`/set`, and `logs show`, print `temperature 0`, `seed random`, `stop END|STOP`, never Python's reprs.
"""

from __future__ import annotations

import json
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


# -- shown as typed -------------------------------------------------------------------------------

_CONSTRAINTS = ("json_schema", "grammar")  # as_dict's flags: whether the command line gave one


def value_text(key: str, value: Any) -> str:
    """A setting's value as `/set KEY VALUE` (or its flag) takes it: 0 for 0.0, `random` for a seed
    left to pick, `none` for no reasoning budget or no stop strings, `a|b` for a stop list."""
    if value is None:
        return "random" if key == "seed" else "none"
    if key == "stop" and isinstance(value, list):
        return "|".join(_quoted(str(s)) for s in value) if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _quoted(text: str) -> str:
    """Text as is where it reads unambiguously in a list; else JSON-quoted (empty, spaces, escapes)."""
    plain = text and text.isprintable() and not any(c in text for c in ' ,|"')
    return text if plain else json.dumps(text, ensure_ascii=False)


def settings_text(params: dict[str, Any]) -> str:
    """`temperature 0, top_k 40, ..., seed random`: every setting in `params` (a `SamplingParams.
    as_dict()`, or a logged one), each as `value_text` shows it. A constraint is named only when one
    was given (a JSON schema's grammar is the schema's), and an empty budget message is left out."""
    items = []
    for key, value in params.items():
        if key in _CONSTRAINTS:
            if value and not (key == "grammar" and params.get("json_schema")):
                items.append(f"{key} yes")
            continue
        if key == "reasoning_budget_message" and not value:
            continue
        items.append(f"{key} {value_text(key, value)}")
    return ", ".join(items)
