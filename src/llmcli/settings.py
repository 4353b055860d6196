"""Settings: built-in default < config file < LLMCLI_* environment variable < command-line flag.

Every setting is declared once in `SETTINGS` with its type, default, environment variable and
description; `config show`, the man page, docs/CONFIG.md and `--help` are all fed from this
registry. The config file is read once per process and validated as a whole: a syntax error,
an unknown key or a wrong type is a `ConfigError` naming the file, the line and the key, and
no command runs with half a configuration.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any

from llmcli import defaults
from llmcli.errors import ConfigError
from llmcli.gguf_file import KV_TYPE_BYTES
from llmcli.values import BOOL_WORDS, Setting, negative, parse, zero

__all__ = ["BOOL_WORDS", "SETTINGS", "Setting"]  # BOOL_WORDS and Setting: declared in llmcli.values

SETTINGS: dict[str, Setting] = {
    s.key: s
    for s in [
        Setting("model", str, "", "Default model reference (empty: the bundled SmolLM2-135M-Instruct)."),
        Setting("embed_model", str, "", "Embedding model for embed, similar, logs --like and bench "
                "--scenario embed (a reference like model; empty: none)."),
        Setting("rerank_model", str, "", "Reranking model (a cross-encoder GGUF or a served /v1/rerank) "
                "for rerank (a reference like model; empty: none)."),
        Setting(
            "ctx_size",
            int,
            0,
            f"Context size in tokens (0: the model's trained context, capped at {defaults.CTX_CAP}).",
            minimum=0,
            none_if=zero,
        ),
        Setting("gpu_layers", int, -1, "Layers to offload to the GPU (-1: all when the build supports it).",
                none_if=negative),
        Setting("threads", int, 0, "CPU threads, fixed (0: adaptive, up to the physical cores).", minimum=0,
                none_if=zero),
        Setting("batch_size", int, defaults.BATCH_SIZE, "Prompt tokens evaluated per batch.", minimum=1),
        Setting(
            "cache_type_k",
            str,
            "f16",
            "KV cache type of the keys: " + ", ".join(KV_TYPE_BYTES) + " (q8_0 halves the cache).",
            tuple(KV_TYPE_BYTES),
            fold_case=True,
            none_if="f16".__eq__,  # llama.cpp's own default
            noun="KV cache type",
        ),
        Setting(
            "cache_type_v",
            str,
            "f16",
            "KV cache type of the values, as cache_type_k; a quantized type needs flash attention.",
            tuple(KV_TYPE_BYTES),
            fold_case=True,
            none_if="f16".__eq__,  # llama.cpp's own default
            noun="KV cache type",
        ),
        Setting("temperature", float, defaults.TEMPERATURE, "Sampling temperature (0: greedy).", minimum=0),
        Setting("top_k", int, defaults.TOP_K, "Top-k sampling (0: off).", minimum=0),
        Setting("top_p", float, defaults.TOP_P, "Nucleus sampling threshold."),
        Setting("min_p", float, defaults.MIN_P, "Min-p sampling threshold."),
        Setting("repeat_penalty", float, defaults.REPEAT_PENALTY, "Repetition penalty (1.0: off)."),
        Setting(
            "max_tokens",
            int,
            defaults.MAX_TOKENS,
            "Most tokens to generate (0: until the end or a full context).",
            minimum=0,
        ),
        Setting("system", str, "", "System prompt for chat and generate."),
        Setting(
            "reasoning_budget",
            int,
            -1,
            "A reasoning model's budget: tokens it may think before its block is closed for it "
            "(0: no thinking; -1: no limit).",
            minimum=-1,
            none_if=(-1).__eq__,
            note="-1: no limit, 0: no thinking",
        ),
        Setting(
            "reasoning_budget_message",
            str,
            "",
            "Text written into the reasoning before the closing tag a spent budget forces.",
        ),
        Setting(
            "approve_tools",
            bool,
            False,
            "Run the model's tool calls without asking (chat) or refusing (generate). The tools are "
            "your own code (--functions, --mcp) and run with your rights.",
        ),
        Setting("tool_rounds", int, 5, "Most rounds of tool calls in one answer.", minimum=0),
        Setting("tool_timeout", float, 30.0, "Seconds one tool call may run.", minimum=0.001),
        Setting(
            "spec_type",
            str,
            "none",
            "Speculative decoding: none, lookup (prompt lookup: n-grams of the context) or draft (a "
            "draft model, -md); llama.cpp's ngram-simple and draft-simple (and ngram, off) are "
            "accepted too.",
            ("none", "lookup", "draft", "ngram-simple", "draft-simple", "ngram", "off"),
            fold_case=True,
        ),
        Setting(
            "spec_draft_n_max",
            int,
            defaults.SPEC_DRAFT_N_MAX,
            "Speculative decoding: most tokens proposed per verification batch (0-64).",
            minimum=0,
            maximum=64,
        ),
        Setting(
            "spec_draft_n_min",
            int,
            defaults.SPEC_DRAFT_N_MIN,
            "Speculative decoding: fewest tokens worth a verification batch (at most spec_draft_n_max).",
            minimum=0,
            maximum=64,
        ),
        Setting(
            "spec_ngram_max",
            int,
            defaults.SPEC_NGRAM_MAX,
            "Prompt lookup: the longest n-gram matched against the context (1-16).",
            minimum=1,
            maximum=16,
        ),
        Setting(
            "spec_ngram_min",
            int,
            defaults.SPEC_NGRAM_MIN,
            "Prompt lookup: the shortest n-gram matched against the context (at most spec_ngram_max).",
            minimum=1,
            maximum=16,
        ),
        Setting(
            "spec_adaptive",
            bool,
            True,
            "Speculative decoding: choose how many tokens to draft (down to none) from measured "
            "batch costs and acceptance; false: always --spec-draft-n-max.",
        ),
        Setting(
            "spec_exact",
            bool,
            False,
            "Speculative decoding: verify only in batches whose logits are bit-identical to plain "
            "decoding on this build and model, so temperature 0 gives exactly the plain text; false "
            "(the default): any batch size that pays (the same distribution and the same text run "
            "after run, faster, but it may differ from plain decoding's where llama.cpp's batched "
            "kernels round differently).",
        ),
        Setting("model_draft", str, "", "Draft model for speculative decoding (a reference like --model).",
                none_if="".__eq__),
        Setting(
            "gpu_layers_draft", int, -1, "Draft model layers to offload to the GPU (-1: all when supported).",
            none_if=negative,
        ),
        Setting("ctx_size_draft", int, 0, "Draft model context size (0: the target's).", minimum=0,
                none_if=zero, note="0: the target's"),
        Setting(
            "cache_type_k_draft",
            str,
            "",
            "Draft model's KV cache type of the keys, as cache_type_k (empty: the target's).",
            ("", *KV_TYPE_BYTES),
            fold_case=True,
            none_if="".__eq__,  # the target's
            noun="KV cache type",
        ),
        Setting(
            "cache_type_v_draft",
            str,
            "",
            "Draft model's KV cache type of the values, as cache_type_v (empty: the target's).",
            ("", *KV_TYPE_BYTES),
            fold_case=True,
            none_if="".__eq__,  # the target's
            noun="KV cache type",
        ),
        Setting(
            "think",
            str,
            "auto",
            "A reasoning model's thinking: on or off through its template's switch (enable_thinking; "
            "a served model's chat_template_kwargs), or auto: the template's default.",
            ("auto", "on", "off"),
            fold_case=True,
        ),
        Setting(
            "on_overflow",
            str,
            "drop-oldest",
            "Chat policy when history overflows the context.",
            ("drop-oldest", "error"),
        ),
        Setting(
            "kv_cache_max_mb",
            int,
            defaults.KV_CACHE_MAX_MB,
            "Megabytes of saved KV states (chat sessions) kept under the cache directory, oldest "
            "removed first (0: save none).",
            minimum=0,
        ),
        Setting(
            "log",
            bool,
            True,
            "Log every request (generate, each chat turn) to the conversation log, logs.db in the data "
            "directory (`llmcli logs`); false: log nothing. Flags: --log/--no-log; `llmcli logs off`.",
        ),
        Setting(
            "log_max_mb",
            int,
            500,
            "Megabytes the conversation log may use; past it the oldest entries are removed (0: no cap).",
            minimum=0,
        ),
        Setting(
            "timeout",
            float,
            120.0,
            "Seconds a served model's server may stay silent (connecting, or mid-stream) before the "
            "request fails as stalled.",
            minimum=0.001,
        ),
        Setting(
            "color",
            str,
            "auto",
            "Colour on stderr (auto: on a terminal, unless NO_COLOR is set).",
            ("auto", "always", "never"),
        ),
    ]
}

# Variables llmcli reads that are not settings, for the man page and `doctor`. A test checks that
# every variable the source reads is either here or a setting's `env`.
ENVIRONMENT: dict[str, str] = {
    "LLMCLI_CONFIG": "The configuration file (default: config.toml in the user config directory).",
    "LLMCLI_DATA_DIR": "Sessions, chat history and aliases (default: the user data directory).",
    "LLMCLI_CACHE_DIR": "Re-creatable files: the assembled default model, hash records, saved KV "
    "states, speculative decoding's measured batch limits and costs (default: the user cache directory).",
    "LLMCLI_DEBUG": "Set to 1 for tracebacks and llama.cpp logs, like --debug.",
    "LLMCLI_API_KEY": "API key for served models (after a named endpoint's api_key_env and api_key).",
    "OPENAI_API_KEY": "API key for served models when LLMCLI_API_KEY is not set.",
    "HF_ENDPOINT": "The Hugging Face Hub or a mirror to download from (default: https://huggingface.co).",
    "HF_TOKEN": "Access token for gated and private repositories (also HUGGING_FACE_HUB_TOKEN).",
    "HUGGING_FACE_HUB_TOKEN": "Older name of HF_TOKEN.",
    "HF_TOKEN_PATH": "File holding the token (default: HF_HOME/token, as written by `hf auth login`).",
    "HF_HOME": "Hugging Face's directory (default: $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface).",
    "HF_HUB_CACHE": "Where models are downloaded (default: HF_HOME/hub; also HUGGINGFACE_HUB_CACHE).",
    "HUGGINGFACE_HUB_CACHE": "Older name of HF_HUB_CACHE.",
    "HF_HUB_OFFLINE": "Set to 1 to never touch the network (also TRANSFORMERS_OFFLINE).",
    "TRANSFORMERS_OFFLINE": "Same as HF_HUB_OFFLINE.",
    "HF_HUB_DISABLE_TELEMETRY": "Honoured by huggingface_hub.",
    "XDG_CONFIG_HOME": "Base of the user config directory on Linux.",
    "XDG_DATA_HOME": "Base of the user data directory on Linux.",
    "XDG_CACHE_HOME": "Base of the user cache directory on Linux.",
    "NO_COLOR": "When set and not empty, no colour (unless --color, LLMCLI_COLOR or the config file say so).",
    "FORCE_COLOR": "When set and not empty, colour even when stderr is not a terminal.",
}


def line_of(text: str, key: str) -> int | None:
    """The line (1-based) where a top-level key is set in TOML text, or its table starts."""
    name = rf"(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')"
    pattern = re.compile(rf"^\s*(?:{name}\s*[=.]|\[\[?\s*{name}\s*[\].])")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return number
    return None


def _where(path: Path, text: str, key: str) -> str:
    line = line_of(text, key)
    return f"{path}, line {line}" if line else str(path)


def _unknown_key_hint(key: str) -> str:
    close = difflib.get_close_matches(key.replace("-", "_"), SETTINGS, n=1)
    if close:
        return f"did you mean {close[0]!r}? `llmcli config show` lists every key"
    return "`llmcli config show` lists every key"


def validate(path: Path, text: str) -> dict[str, Any]:
    """Parse and check a whole config file; every problem is a ConfigError naming file, line and key."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.match(r"^(.*?) \(at line (\d+), column (\d+)\)$", message)
        if match:
            message = f"{path}, line {match[2]}, column {match[3]}: invalid TOML: {match[1]}"
        else:
            message = f"{path}: invalid TOML: {message}"
        raise ConfigError(message) from None
    values: dict[str, Any] = {}
    for key, raw in data.items():
        if key == "endpoints":  # [endpoints.NAME] tables: served models (llmcli.served.endpoints)
            from llmcli.served.endpoints import validate_table

            values[key] = validate_table(raw, _where(path, text, key))
            continue
        if key not in SETTINGS:
            raise ConfigError(f"{_where(path, text, key)}: unknown key {key!r}", hint=_unknown_key_hint(key))
        try:
            values[key] = parse(SETTINGS[key], raw)
        except ValueError as exc:
            raise ConfigError(f"{_where(path, text, key)}: {exc}") from None
    return values


def read_text(path: Path) -> str | None:
    """The config file's text, or None when there is no file."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None


_cache: dict[str, Any] = {}  # the environment's settings cache, given here when it is installed


def use_cache(cache: dict[str, Any]) -> None:
    """Keep what is read once (the config file) in `cache` (`environment.install` gives its own)."""
    global _cache
    _cache = cache


def load_config() -> dict[str, Any]:
    """The config file's values, validated; an invalid file is an error, never half-applied.
    Read once per environment (its `settings_cache`, see `use_cache`)."""
    cache = _cache
    if "config" not in cache:
        from llmcli import paths

        path = paths.config_file()
        text = read_text(path)
        cache["config"] = {} if text is None else validate(path, text)
    return cache["config"]


def resolve(key: str, flag: Any = None) -> Any:
    """The effective value of a setting: flag, then environment, then config file, then default."""
    return resolve_with_source(key, flag)[0]


def resolve_with_source(key: str, flag: Any = None) -> tuple[Any, str]:
    """The effective value and where it came from: "flag", "env", "config" or "default"."""
    setting = SETTINGS[key]
    if flag is not None:
        return flag, "flag"
    # An empty variable counts as unset, as it does for the flags' own `envvar` handling.
    if raw := os.environ.get(setting.env):
        try:
            return parse(setting, raw, text=True), "env"
        except ValueError as exc:
            raise ConfigError(f"${setting.env}: {exc}") from None
    config = load_config()
    if key in config:
        return config[key], "config"
    return setting.default, "default"


def effective() -> dict[str, tuple[Any, str]]:
    """Every setting's effective value and source, as `config show` prints them."""
    return {key: resolve_with_source(key) for key in SETTINGS}


def think(flag: bool | None = None) -> bool | None:
    """--think/--no-think (`flag`), else the `think` setting: True, False, or None for the
    template's default."""
    value = resolve("think", None if flag is None else ("on" if flag else "off"))
    return {"on": True, "off": False}.get(value)


def color_preference() -> bool | None:
    """The `color` setting as the --color flag would give it: True, False, or None for auto.

    A broken config file is reported by the command that needs it (or `config show`), not here,
    so `llmcli config path` and `config set` still work to repair it.
    """
    try:
        value = resolve("color")
    except ConfigError:
        return None
    return {"always": True, "never": False}.get(value)


def set_value(key: str, raw: str) -> Any:
    """Write `key = value` into the config file atomically, keeping its comments and layout."""
    setting = SETTINGS.get(key)
    if setting is None:
        raise ConfigError(f"unknown key {key!r}", hint=_unknown_key_hint(key))
    try:
        value = parse(setting, raw, text=True)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None

    def assign(doc) -> bool:
        _check_pair(key, value, doc)
        doc[key] = value
        return True

    _edit(assign)
    return value


# (lower, upper) settings that must stay in order: lower <= max(upper, 1) (n-max 0 turns drafting off).
_PAIRS = (("spec_draft_n_min", "spec_draft_n_max"), ("spec_ngram_min", "spec_ngram_max"))


def _check_pair(key: str, value: Any, doc) -> None:
    """`config set` refuses to leave an ordered pair out of order in the file (its other half from the
    file or its default). Reading the file checks each key alone, so a hand-made bad pair stops only
    the runs that use it (the command names it then)."""
    for low, high in _PAIRS:
        if key not in (low, high):
            continue
        other = high if key == low else low
        if other in doc:
            other_value, where = doc[other], " in the config file"
            other_value = other_value.unwrap() if hasattr(other_value, "unwrap") else other_value
        else:
            other_value, where = SETTINGS[other].default, ", its default"
        if not isinstance(other_value, int) or isinstance(other_value, bool):
            return  # a wrong type there is reported by the file's own check
        lower, upper = (value, other_value) if key == low else (other_value, value)
        if lower > max(upper, 1):
            side = "above" if key == low else "below"
            raise ConfigError(f"{key} = {value} is {side} {other} = {other_value}{where}",
                              hint=f"set {other} first")  # fmt: skip


def unset_value(key: str) -> bool:
    """Remove a key from the config file; any key, so that an unknown one can be removed too."""

    def drop(doc) -> bool:
        if key not in doc:
            return False
        del doc[key]
        return True

    return _edit(drop, check=False)


_NEW_FILE_HEADER = (
    "# llmcli configuration. Keys and defaults: `llmcli config show`, `man llmcli` or docs/CONFIG.md.\n"
    "# Precedence: command-line flag > LLMCLI_* environment variable > this file > built-in default.\n"
)


def _edit(change, *, check: bool = True) -> bool:
    """Apply `change` (returns whether it changed anything) to the file's tomlkit document and write
    it atomically; with `check`, the result must be a valid configuration before it is written."""
    import tomlkit
    from tomlkit.exceptions import ParseError

    from llmcli import paths
    from llmcli.atomic import locked, write_atomic

    path = paths.config_file()
    with locked(path):  # read, change and write as one step: a concurrent `config set` is not lost
        text = read_text(path)
        try:
            doc = tomlkit.parse(_NEW_FILE_HEADER if text is None else text)
        except ParseError:
            validate(path, text or "")  # reports the syntax error with its line and column
            raise ConfigError(f"{path}: invalid TOML") from None
        if not change(doc):
            return False
        new_text = tomlkit.dumps(doc)
        if check:
            validate(path, new_text)
        write_atomic(path, new_text, lock=False)
    reset_cache()
    return True


def reset_cache() -> None:
    _cache.clear()
