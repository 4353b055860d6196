"""Turn a model reference given by the user into a local GGUF path.

A reference is a path to a .gguf file, or nothing (the configured default, else the bundled
default model). Hub references (`org/repo[:QUANT]`, aliases) are resolved by the hub layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmcli.errors import ModelNotFoundError, UsageError


@dataclass
class ResolvedModel:
    path: Path
    ref: str  # what the user named, normalised ("gemma3-270m" for the default)


def resolve_model(ref: str | None, *, offline: bool = False) -> ResolvedModel:
    """Find (and, for hub references not yet downloaded, fetch) the model a user named."""
    from llmcli.hub import default_model

    if not ref:
        return ResolvedModel(default_model.model_path(), default_model.DEFAULT_REF)
    if ref == default_model.DEFAULT_REF:
        return ResolvedModel(default_model.model_path(), ref)
    path = Path(ref).expanduser()
    if path.is_dir():
        raise UsageError(f"{ref} is a directory, not a .gguf file")
    if path.exists():
        return ResolvedModel(path, str(path))
    raise ModelNotFoundError(f"no such model file: {ref}", hint="give a path to a .gguf file")
