"""The Hugging Face environment, read when it is needed rather than when a module is imported.

huggingface_hub reads HF_HOME, HF_HUB_CACHE, HF_ENDPOINT and HF_HUB_OFFLINE once, at import
time. llmcli reads them on every call (the same variables, the same precedence), and passes
the endpoint, cache directory and token to huggingface_hub explicitly, so the two always agree.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "on", "yes", "true"}


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE


def hf_home() -> Path:
    """HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface."""
    if env := os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(env)).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.path.expandvars(xdg)).expanduser() / "huggingface"


def hub_cache() -> Path:
    """The shared model cache: HF_HUB_CACHE (or the legacy HUGGINGFACE_HUB_CACHE), else HF_HOME/hub."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(os.path.expandvars(env)).expanduser()
    return hf_home() / "hub"


def endpoint() -> str:
    """The hub or mirror to talk to (HF_ENDPOINT), without a trailing slash."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    """True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) asks for no network at all."""
    return _is_true(os.environ.get("HF_HUB_OFFLINE")) or _is_true(os.environ.get("TRANSFORMERS_OFFLINE"))


def token() -> str | bool:
    """HF_TOKEN, else the token file `hf auth login` writes; False (send none) when there is neither."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if value := (os.environ.get(var) or "").strip():
            return value
    path = os.environ.get("HF_TOKEN_PATH") or str(hf_home() / "token")
    try:
        value = Path(os.path.expandvars(path)).expanduser().read_text().strip()
    except (OSError, UnicodeDecodeError):
        return False
    return value or False


def has_token() -> bool:
    return bool(token())
