"""Settings: built-in default < config file < LLMCLI_* environment variable < command-line flag.

Every setting is declared once in `SETTINGS` with its type, default, environment variable and
description; `config show`, the man page and `--help` are all fed from this registry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from llmcli.errors import ConfigError


@dataclass(frozen=True)
class Setting:
    key: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] = ()

    @property
    def env(self) -> str:
        return "LLMCLI_" + self.key.upper()


SETTINGS: dict[str, Setting] = {
    s.key: s
    for s in [
        Setting("model", str, "", "Default model reference (empty: the bundled Gemma 3 270M)."),
        Setting("ctx_size", int, 0, "Context size in tokens (0: the model's trained context, capped at 4096)."),
        Setting("gpu_layers", int, -1, "Layers to offload to the GPU (-1: all when the build supports it)."),
        Setting("threads", int, 0, "CPU threads (0: the number of physical cores)."),
        Setting("batch_size", int, 512, "Prompt tokens evaluated per batch."),
        Setting("temperature", float, 0.8, "Sampling temperature (0: greedy)."),
        Setting("top_k", int, 40, "Top-k sampling (0: off)."),
        Setting("top_p", float, 0.95, "Nucleus sampling threshold."),
        Setting("min_p", float, 0.05, "Min-p sampling threshold."),
        Setting("repeat_penalty", float, 1.0, "Repetition penalty (1.0: off)."),
        Setting("max_tokens", int, 512, "Most tokens to generate (0: until the end or a full context)."),
        Setting("system", str, "", "System prompt for chat and generate."),
        Setting("on_overflow", str, "drop-oldest", "Chat policy when history overflows the context.",
                ("drop-oldest", "error")),
        Setting("color", str, "auto", "Colour on stderr.", ("auto", "always", "never")),
    ]
}


def _coerce(setting: Setting, raw: Any, origin: str) -> Any:
    try:
        if setting.type is bool and isinstance(raw, str):
            value: Any = raw.strip().lower() in ("1", "true", "yes", "on")
        elif setting.type is float and isinstance(raw, (int, float)) and not isinstance(raw, bool):
            value = float(raw)
        elif setting.type is int and isinstance(raw, bool):
            raise TypeError
        elif isinstance(raw, setting.type):
            value = raw
        elif isinstance(raw, str):
            value = setting.type(raw)
        else:
            raise TypeError
    except (TypeError, ValueError):
        raise ConfigError(
            f"{origin}: {setting.key} must be {setting.type.__name__}, got {raw!r}"
        ) from None
    if setting.choices and value not in setting.choices:
        raise ConfigError(f"{origin}: {setting.key} must be one of {', '.join(setting.choices)}, got {value!r}")
    return value


_config_cache: dict[str, Any] | None = None


def load_config() -> dict[str, Any]:
    """The config file's values, validated; an invalid file is an error, never half-applied."""
    global _config_cache
    if _config_cache is not None:
        return _config_cache
    from llmcli import paths

    path = paths.config_file()
    values: dict[str, Any] = {}
    if path.exists():
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        for key, raw in data.items():
            if key not in SETTINGS:
                raise ConfigError(f"{path}: unknown key {key!r}", hint="see `llmcli config show`")
            values[key] = _coerce(SETTINGS[key], raw, str(path))
    _config_cache = values
    return values


def resolve(key: str, flag: Any = None) -> Any:
    """The effective value of a setting: flag, then environment, then config file, then default."""
    return resolve_with_source(key, flag)[0]


def resolve_with_source(key: str, flag: Any = None) -> tuple[Any, str]:
    setting = SETTINGS[key]
    if flag is not None:
        return flag, "flag"
    if (raw := os.environ.get(setting.env)) is not None:
        return _coerce(setting, raw, f"${setting.env}"), "env"
    config = load_config()
    if key in config:
        return config[key], "config"
    return setting.default, "default"


def reset_cache() -> None:
    global _config_cache
    _config_cache = None
