"""Aliases: short names for model references, kept in `paths.data_dir()/aliases.json`.

An alias maps a name (letters, digits, '.', '_', '-') to a hub reference or to the absolute
path of a .gguf file. Aliases to aliases are flattened when set. The file is rewritten
atomically (temp file, fsync, rename), so a crash never leaves it half-written, and each change
reads and writes it under the lock, so two processes setting aliases at once both get theirs.
"""

from __future__ import annotations

import json
from pathlib import Path

from llmcli import paths
from llmcli.atomic import locked, write_atomic
from llmcli.errors import ConfigError, ModelNotFoundError, UsageError
from llmcli.hub import refs
from llmcli.hub.default_model import BUNDLED, DEFAULT_REF
from llmcli.served import config as endpoint_config

DEFAULT_NAME = DEFAULT_REF  # the bundled default model's name
RESERVED = set(BUNDLED)  # the bundled models' names


def _file() -> Path:
    return paths.data_dir() / "aliases.json"


def load() -> dict[str, str]:
    path = _file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", hint="fix or delete the file") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ConfigError(
            f"{path} is not a JSON object of names to references", hint="fix or delete the file"
        )
    return data


def get(name: str) -> str | None:
    return load().get(name)


def set_alias(name: str, target: str) -> str:
    """Point `name` at `target`; returns the stored (normalised) reference."""
    if not refs.is_alias_name(name):
        raise UsageError(f"{name!r} is not a valid alias name", hint="use letters, digits, '.', '_' and '-'")
    if name in RESERVED:
        raise UsageError(f"{name!r} is the name of a bundled model", hint="choose another alias")
    stored = normalise(target)
    with locked(_file()):  # read, change and write as one step: concurrent edits are not lost
        table = load()
        table[name] = stored
        _save(table)
    return stored


def delete(name: str) -> str:
    with locked(_file()):
        table = load()
        if name not in table:
            raise ModelNotFoundError(f"no alias named {name!r}", hint="see `llmcli models alias`")
        target = table.pop(name)
        _save(table)
    return target


def normalise(target: str) -> str:
    """A reference worth storing: hub references canonical, paths absolute, aliases flattened; a
    served model (llmcli.served.endpoints) as its URL#MODEL or NAME/MODEL, never with a key."""
    endpoint = endpoint_config.lookup(target)
    if endpoint is not None:
        return endpoint.ref
    ref = refs.parse(target)
    if isinstance(ref, refs.PathRef):
        if not ref.path.is_file():
            raise ModelNotFoundError(f"no such model file: {target}")
        return str(ref.path.resolve())
    if isinstance(ref, refs.AliasRef):
        if ref.name in RESERVED:
            return ref.name
        resolved = get(ref.name)
        if resolved is None:
            raise ModelNotFoundError(
                f"no alias named {ref.name!r}", hint="an alias must point at org/repo or a file"
            )
        return resolved
    return str(ref)


def names_for(target: str) -> list[str]:
    return sorted(name for name, value in load().items() if value == target)


def _save(table: dict[str, str]) -> None:
    """Write the table; the caller holds the lock."""
    write_atomic(_file(), json.dumps(dict(sorted(table.items())), indent=2) + "\n", lock=False)
