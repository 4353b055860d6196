"""Where llmcli keeps its files: configuration, data (sessions, history, aliases) and cache.

Each location follows the platform's conventions (platformdirs) and can be moved with an
environment variable, which is also how the tests isolate themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "llmcli"


def config_file() -> Path:
    """The TOML configuration file (`LLMCLI_CONFIG` overrides)."""
    if env := os.environ.get("LLMCLI_CONFIG"):
        return Path(env).expanduser()
    from platformdirs import user_config_path

    return user_config_path(APP) / "config.toml"


def data_dir() -> Path:
    """Sessions, chat history and aliases (`LLMCLI_DATA_DIR`)."""
    if env := os.environ.get("LLMCLI_DATA_DIR"):
        return Path(env).expanduser()
    from platformdirs import user_data_path

    return user_data_path(APP)


def cache_dir() -> Path:
    """Re-creatable files: the assembled default model, hash records, saved KV states, what
    speculative decoding measured (`LLMCLI_CACHE_DIR`)."""
    if env := os.environ.get("LLMCLI_CACHE_DIR"):
        return Path(env).expanduser()
    from platformdirs import user_cache_path

    return user_cache_path(APP)
