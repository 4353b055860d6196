"""`pull`: from a hub reference to verified files in the cache, and the `--list` preview.

The hub is asked which commit the revision points to and what files it holds; the reference
chooses one model (a quantization, a file, or the default) and, where the repository has one
beside it, its image projector (`quants.choose_projector`); every file of them that is not
already present and verified is downloaded; snapshot links and refs/<revision> are written
last, so a model is visible in the cache only once all of it is there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmcli import reporting
from llmcli.errors import ModelNotFoundError
from llmcli.hub import cache, download, fit, quants, remote
from llmcli.hub.quants import Group
from llmcli.hub.refs import HubRef


@dataclass
class Pulled:
    ref: HubRef  # what was asked for, pinned to the chosen quantization or file
    commit: str
    group: Group
    paths: list[Path]  # snapshot entries, in shard order (the first one is what llama.cpp opens)
    size: int  # the model's (its projector's apart)
    fetched: bool  # False when everything was already there
    projector: Path | None = None  # its image projector (mmproj*.gguf), beside it in the snapshot


@dataclass
class Choice:
    """One model of a repository, for `pull --list`."""

    group: Group
    size: int
    fit: fit.Fit
    default: bool
    local: bool


def pull(ref: HubRef, *, force: bool = False) -> Pulled:
    """Download what `ref` names (unless already present and verified); returns where it is."""
    repo = remote.fetch_repo(ref)
    group = choose(ref, repo)
    projector = quants.choose_projector(repo.files, group)
    files = [repo.files[name] for name in (*group.files, *([projector] if projector else []))]
    linked = {f.path: not force and _linked(ref.repo_id, repo.commit, f) for f in files}
    if not all(linked.values()):
        cache.ensure_writable(ref.repo_id)
        _check_space(ref, [f for f in files if not linked[f.path]])
    fetched = False
    with reporting.progress() as prog:
        for rfile in files:
            pointer = cache.pointer_path(ref.repo_id, repo.commit, rfile.path)
            if linked[rfile.path] and download.check_blob(
                cache.blob_of(pointer), rfile.expected, rfile.path, prog
            ):
                continue
            bad = linked[rfile.path]
            if bad:
                reporting.warn(f"the cached {rfile.path} does not match its hash; downloading it again")
            source = download.source_for(ref, repo.commit, rfile)
            blob = download.ensure_blob(source, prog, force=force or bad)
            cache.link(blob, pointer)
            fetched = True
    _write_ref(ref, repo.commit)
    paths = [cache.pointer_path(ref.repo_id, repo.commit, name) for name in group.files]
    beside = cache.pointer_path(ref.repo_id, repo.commit, projector) if projector else None
    size = sum(repo.files[name].size for name in group.files)
    return Pulled(pinned(ref, group), repo.commit, group, paths, size, fetched, beside)


def choose(ref: HubRef, repo: remote.RemoteRepo) -> Group:
    group = quants.choose(
        quants.group_files(repo.files), repo=ref.repo_id, quant=ref.quant, filename=ref.filename
    )
    if not group.complete:
        raise ModelNotFoundError(
            f"{ref.repo_id}: {group.first} has {len(group.files)} of {group.expected_shards} shards",
            hint="the repository is incomplete; choose another quantization",
        )
    return group


def pinned(ref: HubRef, group: Group) -> HubRef:
    """The reference naming exactly this group: by quantization if that is unambiguous, else by file."""
    if ref.filename or group.label is None:
        return ref.with_(quant=None, filename=ref.filename or group.first)
    return ref.with_(quant=group.label)


def list_choices(ref: HubRef) -> tuple[remote.RemoteRepo, list[Choice]]:
    """Every model in the repository with its size and a memory-fit estimate; downloads nothing."""
    repo = remote.fetch_repo(ref)
    groups = quants.group_files(repo.files)
    if not groups:
        quants.choose(groups, repo=ref.repo_id)  # raises "no GGUF files"
    default = quants.choose(groups, repo=ref.repo_id) if any(g.complete for g in groups) else None
    mem = fit.memory()
    choices = []
    for group in sorted(groups, key=lambda g: (quants.preference_rank(g.label), g.first)):
        size = sum(repo.files[name].size for name in group.files)
        local = all(_linked(ref.repo_id, repo.commit, repo.files[n]) for n in group.files)
        choices.append(Choice(group, size, fit.judge(size, group.label, mem), group == default, local))
    return repo, choices


def _linked(repo_id: str, commit: str, rfile: remote.RemoteFile) -> bool:
    """The snapshot entry exists and points at the blob the hub names (its hash is checked later)."""
    pointer = cache.pointer_path(repo_id, commit, rfile.path)
    if not pointer.exists():
        return False
    return not (pointer.is_symlink() and rfile.etag and cache.blob_of(pointer).name != rfile.etag)


def _check_space(ref: HubRef, missing: list[remote.RemoteFile]) -> None:
    need = 0
    for rfile in missing:
        part = cache.partial_path(ref.repo_id, rfile.etag or "")
        need += rfile.size - (part.stat().st_size if part.exists() and rfile.etag else 0)
    what = f"{ref} ({len(missing)} file{'s' if len(missing) > 1 else ''})"
    download.check_space(cache.repo_folder(ref.repo_id) / "blobs", max(need, 0), what)


def _write_ref(ref: HubRef, commit: str) -> None:
    try:
        cache.write_ref(ref.repo_id, ref.rev, commit)
    except OSError as exc:
        raise cache.cache_not_writable(exc) from None
