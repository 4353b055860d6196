"""The standard Hugging Face cache, laid out exactly as huggingface_hub lays it out.

    {HF_HUB_CACHE}/models--org--repo/
        blobs/<etag>                    file contents, named by the hub's ETag (SHA-256 or git blob id)
        blobs/<etag>.incomplete         a download in progress (llmcli resumes these)
        snapshots/<commit>/<filename>   relative symlinks to the blobs
        refs/<branch or tag>            the commit a revision pointed to when last fetched
    {HF_HUB_CACHE}/.locks/models--org--repo/<etag>.lock

so `hf_hub_download(..., local_files_only=True)` finds what llmcli fetched, and llmcli finds
what huggingface_hub (or a tool built on it) fetched. Lock files are the ones huggingface_hub
takes, so the two never write the same blob at once.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from llmcli.atomic import write_atomic
from llmcli.errors import LlmcliError
from llmcli.hub import env

COMMIT = re.compile(r"^[0-9a-f]{40}$")
SHORT_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
PREFIX = "models--"


def repo_folder(repo_id: str) -> Path:
    return env.hub_cache() / (PREFIX + repo_id.replace("/", "--"))


def repo_id_of(folder: Path) -> str | None:
    name = folder.name
    if not name.startswith(PREFIX):
        return None
    return name[len(PREFIX) :].replace("--", "/", 1)


def blob_path(repo_id: str, etag: str) -> Path:
    return repo_folder(repo_id) / "blobs" / etag


def partial_path(repo_id: str, etag: str) -> Path:
    return repo_folder(repo_id) / "blobs" / f"{etag}.incomplete"


def lock_path(repo_id: str, etag: str) -> Path:
    return env.hub_cache() / ".locks" / (PREFIX + repo_id.replace("/", "--")) / f"{etag}.lock"


def snapshot_dir(repo_id: str, commit: str) -> Path:
    return repo_folder(repo_id) / "snapshots" / commit


def pointer_path(repo_id: str, commit: str, filename: str) -> Path:
    return snapshot_dir(repo_id, commit).joinpath(*filename.split("/"))


def read_ref(repo_id: str, revision: str) -> str | None:
    """The commit a branch or tag pointed to when last fetched (None if never fetched)."""
    try:
        text = (repo_folder(repo_id) / "refs" / revision).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if COMMIT.match(text) else None


def write_ref(repo_id: str, revision: str, commit: str) -> None:
    if revision == commit or read_ref(repo_id, revision) == commit:
        return  # unchanged: a read-only cache stays usable
    write_atomic(repo_folder(repo_id) / "refs" / revision, commit, lock=False)


def refs_of(repo_id: str) -> dict[str, str]:
    """Every recorded revision of a repository and the commit it points to."""
    base = repo_folder(repo_id) / "refs"
    found: dict[str, str] = {}
    if not base.is_dir():
        return found
    for path in base.rglob("*"):
        if path.is_file():
            commit = read_ref(repo_id, path.relative_to(base).as_posix())
            if commit:
                found[path.relative_to(base).as_posix()] = commit
    return found


def local_commit(repo_id: str, revision: str) -> str | None:
    """The snapshot a revision names locally: a branch or tag via refs/, or a (short) commit."""
    if commit := read_ref(repo_id, revision):
        return commit
    if SHORT_COMMIT.match(revision):
        base = repo_folder(repo_id) / "snapshots"
        matches = sorted(p.name for p in base.glob(revision + "*")) if base.is_dir() else []
        if len(matches) == 1:
            return matches[0]
    return None


def snapshot_files(repo_id: str, commit: str) -> list[str]:
    """Files present in a snapshot (relative posix paths); dangling links are left out."""
    base = snapshot_dir(repo_id, commit)
    if not base.is_dir():
        return []
    return sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())


def snapshots(repo_id: str) -> list[str]:
    base = repo_folder(repo_id) / "snapshots"
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def repos() -> Iterator[str]:
    """Model repositories present in the cache."""
    root = env.hub_cache()
    if not root.is_dir():
        return
    for folder in sorted(root.iterdir()):
        if folder.is_dir() and (repo_id := repo_id_of(folder)):
            yield repo_id


def blob_of(pointer: Path) -> Path:
    """The blob a snapshot entry points to (itself when symlinks are not used)."""
    return pointer.resolve() if pointer.is_symlink() else pointer


def link(blob: Path, pointer: Path) -> None:
    """Point a snapshot entry at a blob with a relative symlink, as huggingface_hub does."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    tmp = pointer.with_name(f".{pointer.name}.{os.getpid()}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), tmp)
    except OSError:  # no symlinks here (some Windows setups, some network file systems)
        shutil.copyfile(blob, tmp)
    os.replace(tmp, pointer)


def ensure_writable(repo_id: str) -> None:
    """Create the folders a download needs, or explain in one line why the cache is not writable."""
    try:
        for folder in (repo_folder(repo_id) / "blobs", lock_path(repo_id, "x").parent):
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / f".llmcli-probe-{os.getpid()}"
            probe.touch()
            probe.unlink()
    except OSError as exc:
        raise cache_not_writable(exc) from None


def cache_not_writable(exc: OSError) -> LlmcliError:
    return LlmcliError(
        f"cannot write to the Hugging Face cache {env.hub_cache()}: {exc.strerror or exc}",
        hint="set HF_HUB_CACHE or HF_HOME to a writable directory; models already there can still be used",
    )
