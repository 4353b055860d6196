"""The models on this machine: found in the HF cache, described from their headers, removed, verified.

Nothing here touches the network. A model is a group of GGUF files (one file or all shards of
a split model) in one snapshot of a cached repository, named the way a user would name it:
`org/repo:QUANT` (or `org/repo/file.gguf` when the quantization does not identify it), with
`@REVISION` when the snapshot is not the one `main` points to.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.errors import InvalidModelError, LlmcliError, ModelNotFoundError, UsageError
from llmcli.hub import aliases, cache, download, hashing, quants, records, refs
from llmcli.hub.quants import Group
from llmcli.hub.refs import HubRef


@dataclass
class LocalModel:
    name: str  # how to refer to it
    kind: str  # "hub", "bundled" or "file"
    paths: list[Path]  # snapshot entries (or the file), first shard first
    repo_id: str | None = None
    commit: str | None = None
    group: Group | None = None
    revisions: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.paths[0]

    @property
    def blobs(self) -> list[Path]:
        return list(dict.fromkeys(cache.blob_of(p) for p in self.paths))

    @property
    def size(self) -> int:
        return sum(b.stat().st_size for b in self.blobs if b.exists())

    @property
    def source(self) -> str:
        if self.kind == "hub":
            return f"{self.repo_id}@{(self.commit or '')[:7]}"
        return "bundled package" if self.kind == "bundled" else "local file"


# -- finding ---------------------------------------------------------------------------------


def find_local(ref: HubRef) -> LocalModel | None:
    """The cached model a hub reference names, if all of it is here (no network)."""
    commit = cache.local_commit(ref.repo_id, ref.rev)
    if commit is None:
        return None
    groups = quants.group_files(cache.snapshot_files(ref.repo_id, commit))
    try:
        group = quants.choose(groups, repo=ref.repo_id, quant=ref.quant, filename=ref.filename)
    except ModelNotFoundError:
        return None
    if not group.complete:
        return None
    return _model(ref.repo_id, commit, group, groups)


def hub_models() -> list[LocalModel]:
    """Every complete GGUF model in the cache, all repositories and snapshots."""
    found = []
    for repo_id in cache.repos():
        for commit in cache.snapshots(repo_id):
            groups = quants.group_files(cache.snapshot_files(repo_id, commit))
            found += [_model(repo_id, commit, g, groups) for g in groups if g.complete]
    return found


def all_models() -> list[LocalModel]:
    """Hub models, the bundled default once assembled, and files that aliases point to."""
    models = hub_models() + _bundled()
    seen = {m.path for m in models}
    for target in sorted(set(aliases.load().values())):
        path = Path(target)
        if path.is_absolute() and path.is_file() and path not in seen:
            models.append(LocalModel(target, "file", [path]))
            seen.add(path)
    return models


def lookup(text: str) -> LocalModel:
    """A downloaded model by any reference (alias, hub reference, path); never downloads."""
    ref = refs.parse(text)
    if isinstance(ref, refs.AliasRef) and (target := aliases.get(ref.name)) is not None:
        ref = refs.parse(target)
    if isinstance(ref, refs.AliasRef):
        bundled = {m.name: m for m in _bundled()}
        if ref.name in bundled:
            return bundled[ref.name]
        raise ModelNotFoundError(f"no model or alias named {ref.name!r}", hint="see `llmcli models list`")
    if isinstance(ref, refs.PathRef):
        if not ref.path.is_file():
            raise ModelNotFoundError(f"no such model file: {ref.path}")
        return LocalModel(str(ref.path), "file", [ref.path])
    model = find_local(ref)
    if model is None:
        raise ModelNotFoundError(f"{ref} is not downloaded", hint=f"run `llmcli pull {ref}`")
    return model


def aliases_of(model: LocalModel) -> list[str]:
    """Aliases that name this model (hub aliases are matched by what they resolve to locally)."""
    names = []
    for name, target in aliases.load().items():
        try:
            ref = refs.parse(target)
        except UsageError:
            continue
        if isinstance(ref, refs.PathRef):
            hit = ref.path == model.path
        elif isinstance(ref, HubRef):
            found = find_local(ref)
            hit = found is not None and found.paths == model.paths
        else:
            hit = ref.name == model.name
        if hit:
            names.append(name)
    return sorted(names)


def completion_names() -> list[str]:
    """Names for shell completion: aliases, the bundled models whose package is installed, and
    downloaded models (cheap: no header reads, nothing assembled)."""
    from llmcli.hub import default_model

    names = set(aliases.load())
    names.update(name for name in default_model.BUNDLED if default_model.installed(name))
    for model in hub_models():
        names.add(model.name)
    return sorted(names)


def _model(repo_id: str, commit: str, group: Group, groups: list[Group]) -> LocalModel:
    revisions = sorted(rev for rev, c in cache.refs_of(repo_id).items() if c == commit)
    paths = [cache.pointer_path(repo_id, commit, name) for name in group.files]
    ref = HubRef(repo_id)
    same_label = [g for g in groups if g.label == group.label and g.complete]
    if group.label and len(same_label) == 1:
        ref = ref.with_(quant=group.label)
    else:
        ref = ref.with_(filename=group.first)
    if "main" not in revisions:
        ref = ref.with_(revision=revisions[0] if revisions else commit[:7])
    return LocalModel(str(ref), "hub", paths, repo_id, commit, group, revisions)


def _bundled() -> list[LocalModel]:
    """The bundled models whose package is installed and whose file is in place (Gemma's is
    assembled on first use)."""
    from llmcli.hub import default_model

    found = []
    for name in default_model.BUNDLED:
        path = default_model.expected_path(name)
        if path is not None and path.is_file():
            found.append(LocalModel(name, "bundled", [path]))
    return found


# -- describing ------------------------------------------------------------------------------


def describe(model: LocalModel, *, keys: bool = False) -> dict[str, Any]:
    """What `models list` and `models show` print, read from the GGUF header(s) only."""
    from llmcli.gguf_file import read_header

    info: dict[str, Any] = {
        "name": model.name,
        "path": str(model.path),
        "files": [str(p) for p in model.paths],
        "size": model.size,
        "source": model.source,
        "kind": model.kind,
        "repo": model.repo_id,
        "commit": model.commit,
        "revisions": model.revisions,
        "aliases": aliases_of(model),
        "projector": _projector(model),
    }
    try:
        headers = [read_header(p) for p in model.paths]
    except LlmcliError as exc:
        info.update(error=exc.message, quantization=model.group.label if model.group else None)
        return info
    head = headers[0]
    info.update(
        architecture=head.architecture,
        model_name=head.name,
        size_label=head.size_label,
        quantization=head.quantization,
        n_params=sum(h.n_params for h in headers),
        n_layers=head.n_layers,
        n_ctx_train=head.n_ctx_train,
        n_vocab=head.n_vocab,
        chat_template=head.chat_template is not None,
        model_type=head.model_type,
        chat_template_problem=_template_problem(head.chat_template),
        reasoning=_reasoning(head.chat_template),
        license=head.license,
        sha256=_recorded_sha256(model),
    )
    if keys:
        info["metadata"] = {k: _short(v) for k, v in head.metadata.items()}
    return info


def _projector(model: LocalModel) -> str | None:
    """The image projector llmcli would load with the model (an mmproj*.gguf beside it), or None."""
    from llmcli.media import projector

    found = projector.find(str(model.path), None)
    return str(found) if found is not None else None


def _template_problem(template: str | None) -> str | None:
    """Why the model's chat template cannot be used (hostile or broken), tried in the sandbox."""
    from llmcli import templates

    if not template:
        return None
    try:
        templates.probe(template)
    except InvalidModelError as exc:
        return exc.message
    return None


def _reasoning(template: str | None) -> dict[str, object] | None:
    """The reasoning the chat template shows (its tags, switch, a pre-opened block), or None."""
    from llmcli import reasoning

    found = reasoning.detect(template)
    return found.as_dict() if found else None


def _recorded_sha256(model: LocalModel) -> list[str | None]:
    return [(records.load(b) or {}).get("sha256") for b in model.blobs]


def _short(value: Any) -> Any:
    """Metadata values as JSON-friendly data, long things summarised."""
    from llmcli.gguf_file import ArraySummary

    if isinstance(value, ArraySummary):
        return f"[{value.length} x {value.type_name}]"
    if isinstance(value, list):
        return [_short(v) for v in value] if len(value) <= 16 else f"[{len(value)} items]"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, str) and len(value) > 200:
        return value[:200] + f"... ({len(value)} characters)"
    return value


# -- checking --------------------------------------------------------------------------------


def check(model: LocalModel, progress=None) -> None:
    """Refuse a cached model whose files do not hash to what the hub said (recorded checks are trusted)."""
    if model.kind != "hub":
        return
    for pointer in model.paths:
        blob = cache.blob_of(pointer)
        expected = hashing.expected_from_etag(blob.name, blob.stat().st_size)
        if not download.check_blob(blob, expected, pointer.name, progress):
            raise InvalidModelError(
                f"{model.name}: {pointer.name} does not match its hash; refusing to use it",
                hint=f"download it again with `llmcli pull --force {model.name}`",
            )


@dataclass
class Verified:
    file: str
    sha256: str
    ok: bool
    why: str = ""


def verify(model: LocalModel, progress=None) -> list[Verified]:
    """Re-hash every file of a model against the hub's hash and the recorded SHA-256."""
    results = []
    for pointer in model.paths:
        blob = cache.blob_of(pointer)
        size = blob.stat().st_size
        expected = hashing.expected_from_etag(blob.name, size) if model.kind == "hub" else None
        recorded = (records.load_any(blob) or {}).get("sha256")
        if progress is not None:
            with progress.task(pointer.name, size, verb="verifying") as task:
                hasher = hashing.hash_file(blob, expected, task.advance)
        else:
            hasher = hashing.hash_file(blob, expected)
        sha256 = hasher.sha256.hexdigest()
        why = "" if hasher.matches() else f"{expected.algo if expected else 'hash'} differs from the hub's"
        if not why and recorded and recorded != sha256:
            why = "SHA-256 differs from the one recorded at download"
        if why:
            records.forget(blob)
        else:
            records.save(blob, sha256=sha256, expected=expected)
        results.append(Verified(pointer.name, sha256, not why, why))
    return results


# -- removing --------------------------------------------------------------------------------


def remove(model: LocalModel) -> int:
    """Delete a model's snapshot entries and the blobs no other entry uses; returns bytes freed."""
    if model.kind != "hub" or model.repo_id is None or model.commit is None:
        raise UsageError(f"{model.name} is not in the Hugging Face cache; delete the file yourself")
    repo_id, blobs = model.repo_id, model.blobs
    for pointer in model.paths:
        pointer.unlink(missing_ok=True)
    blobs += _orphan_projectors(repo_id, model.commit)
    still_used = _blobs_in_use(repo_id)
    freed = 0
    for blob in blobs:
        if blob in still_used or not blob.exists():
            continue
        freed += blob.stat().st_size
        blob.unlink()
        records.forget(blob)
        partial = blob.with_name(blob.name + ".incomplete")
        if partial.exists():
            freed += partial.stat().st_size
            partial.unlink()
    return freed + _prune(repo_id, model.commit)


def _orphan_projectors(repo_id: str, commit: str) -> list[Path]:
    """The image projectors no model left in the snapshot would be pulled with go too: their
    entries are unlinked and their blobs returned (deleted where no other snapshot uses them)."""
    files = cache.snapshot_files(repo_id, commit)
    kept = {quants.choose_projector(files, group) for group in quants.group_files(files)}
    blobs = []
    for name in files:
        if quants.is_projector(name) and name not in kept:
            pointer = cache.snapshot_dir(repo_id, commit) / name
            blobs.append(cache.blob_of(pointer))
            pointer.unlink(missing_ok=True)
    return blobs


def _blobs_in_use(repo_id: str) -> set[Path]:
    used = set()
    for commit in cache.snapshots(repo_id):
        base = cache.snapshot_dir(repo_id, commit)
        used |= {cache.blob_of(p) for p in base.rglob("*") if p.is_symlink() or p.is_file()}
    return used


def _prune(repo_id: str, commit: str) -> int:
    """Remove empty folders, refs to a vanished snapshot, and the repository once nothing is left.

    Returns the bytes of partial downloads removed with the repository."""
    snapshot = cache.snapshot_dir(repo_id, commit)
    for folder in sorted((p for p in snapshot.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        _rmdir_if_empty(folder)
    _rmdir_if_empty(snapshot)
    if not snapshot.exists():
        for revision, target in cache.refs_of(repo_id).items():
            if target == commit:
                (cache.repo_folder(repo_id) / "refs" / revision).unlink(missing_ok=True)
    folder = cache.repo_folder(repo_id)
    blobs = folder / "blobs"
    leftovers = list(blobs.glob("*"))
    if cache.snapshots(repo_id) or any(not p.name.endswith(".incomplete") for p in leftovers):
        return 0
    freed = sum(p.stat().st_size for p in leftovers)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(cache.lock_path(repo_id, "x").parent, ignore_errors=True)
    return freed


def _rmdir_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass
