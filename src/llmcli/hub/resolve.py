"""Turn a model reference given by the user into a local GGUF path.

The reference syntax is in `hub.refs`. Nothing means the configured default model
(`settings.resolve("model")`), else the bundled default. An alias is followed once. A hub
reference is looked up in the local cache first, with no network at all; only when it is not
there is it pulled (with the same progress display as `llmcli pull`), unless offline
(`--offline` or HF_HUB_OFFLINE=1), where that is refused with a hint instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from llmcli.errors import ModelNotFoundError, UsageError


@dataclass
class ResolvedModel:
    path: Path  # the file to open (the first shard of a split model)
    ref: str  # what the user named, normalised ("smollm2-135m" for the default)
    files: list[Path] = field(default_factory=list)  # every file of the model, first shard first
    repo_id: str | None = None
    commit: str | None = None
    quantization: str | None = None


def resolve_model(ref: str | None, *, offline: bool = False) -> ResolvedModel:
    """Find (and, for hub references not yet downloaded, fetch) the model a user named."""
    from llmcli import settings
    from llmcli.hub import default_model, env, refs

    offline = offline or env.offline()
    text = (ref or "").strip() or settings.resolve("model") or ""
    text = text or default_model.DEFAULT_REF
    if text in default_model.BUNDLED:
        path = default_model.model_path(text)
        return ResolvedModel(path, text, [path])
    parsed = refs.parse(text)
    if isinstance(parsed, refs.AliasRef):
        return _resolve_alias(parsed.name, offline)
    if isinstance(parsed, refs.PathRef):
        return _resolve_path(text, parsed.path)
    return _resolve_hub(parsed, offline)


def _resolve_path(text: str, path: Path) -> ResolvedModel:
    if path.is_dir():
        raise UsageError(f"{text} is a directory, not a .gguf file")
    if path.exists():
        return ResolvedModel(path, str(path), [path])
    raise ModelNotFoundError(
        f"no such model file: {text}", hint="give a path to a .gguf file, or org/repo[:QUANT]"
    )


def _resolve_alias(name: str, offline: bool) -> ResolvedModel:
    from llmcli.hub import aliases, refs

    target = aliases.get(name)
    if target is None:
        close = did_you_mean(name)
        raise ModelNotFoundError(
            f"no model or alias named {name!r}" + (f"; did you mean {' or '.join(close)}?" if close else ""),
            hint="hub models are named org/repo[:QUANT]; set a name with `llmcli models alias NAME REF`",
        )
    parsed = refs.parse(target)
    if isinstance(parsed, refs.AliasRef):  # only the bundled default's name can be stored here
        resolved = resolve_model(parsed.name, offline=offline)
    elif isinstance(parsed, refs.PathRef):
        resolved = _resolve_path(target, parsed.path)
    else:
        resolved = _resolve_hub(parsed, offline)
    resolved.ref = name
    return resolved


def did_you_mean(name: str) -> list[str]:
    """The known names (bundled models, aliases) `name` may have meant: those it begins, then the
    close spellings, at most three."""
    import difflib

    from llmcli.hub import aliases, default_model

    names = [*default_model.BUNDLED, *aliases.load()]
    wanted = name.lower()
    begun = [n for n in names if n.lower().startswith(wanted)]
    close = difflib.get_close_matches(wanted, [n.lower() for n in names], n=3, cutoff=0.6)
    spelled = [n for n in names if n.lower() in close]
    return list(dict.fromkeys(begun + spelled))[:3]


def _resolve_hub(ref, offline: bool) -> ResolvedModel:
    from llmcli import reporting
    from llmcli.hub import pull, remote, store

    local = store.find_local(ref)
    if local is not None:
        with reporting.progress() as prog:
            store.check(local, prog)
        quant = local.group.label if local.group else None
        return ResolvedModel(local.path, str(ref), local.paths, ref.repo_id, local.commit, quant)
    if offline:
        raise remote.offline_refusal(ref)
    reporting.info(f"{ref} is not downloaded yet; pulling it")
    pulled = pull.pull(ref)
    return ResolvedModel(
        pulled.paths[0], str(ref), pulled.paths, ref.repo_id, pulled.commit, pulled.group.label
    )
