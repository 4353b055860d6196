"""One file from the hub into the cache: resumable, hashed as it arrives, checked before use.

The bytes go to `blobs/<etag>.incomplete`, under the same lock file huggingface_hub takes, and
are hashed as they are written. An interrupted transfer is retried from where it stopped (a
`Range` request; a server that answers 200 instead of 206 is read from byte zero again), and
what is left after a failure is resumed by the next `pull`. Only when the size, the hub's hash
and, for .gguf files, the GGUF header all check out is the file renamed to `blobs/<etag>` and
recorded as verified. A partial or corrupt file is never given the final name.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from llmcli import reporting as report
from llmcli.errors import InvalidModelError, LlmcliError, NetworkError, TerminatedError
from llmcli.hub import cache, env, hashing, records, remote
from llmcli.hub.hashing import Expected, Hasher
from llmcli.hub.quants import is_gguf
from llmcli.reporting import Progress, Task
from llmcli.units import human_size

ATTEMPTS = 3  # transfers per file before giving up (each resumes the last)
BACKOFF_S = 1.0
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}


@dataclass(frozen=True)
class Source:
    """Where a file comes from and what it must hash to."""

    repo_id: str
    filename: str
    etag: str  # the blob's name in the cache
    size: int
    expected: Expected | None
    url: str
    headers: dict[str, str]


class DiskFullError(LlmcliError):
    label = "no space left"


class _Restart(Exception):
    """The server ignored our Range request: start the file again from byte zero."""


def ensure_blob(src: Source, progress: Progress, *, force: bool = False) -> Path:
    """The verified blob for `src`, downloaded or resumed first if it is missing or bad."""
    blob = cache.blob_path(src.repo_id, src.etag)
    known_bad = False
    if blob.exists() and not force:
        if check_blob(blob, src.expected, src.filename, progress):
            return blob
        report.warn(f"the cached {src.filename} does not match its hash; downloading it again")
        known_bad = True
    cache.ensure_writable(src.repo_id)
    with lock(src.repo_id, src.etag, src.filename):
        # Another process may have finished this file while we waited for the lock.
        if blob.exists() and not force and not known_bad and check_blob(blob, src.expected, src.filename):
            return blob
        part = cache.partial_path(src.repo_id, src.etag)
        if force:
            part.unlink(missing_ok=True)
        hasher = _download(src, part, progress)
        _install(src, part, blob, hasher)
    return blob


def check_blob(blob: Path, expected: Expected | None, name: str, progress: Progress | None = None) -> bool:
    """True if the blob matches its hash: from the record when unchanged, else by hashing it now."""
    if records.is_verified(blob, expected):
        return True
    size = blob.stat().st_size
    if progress is None:
        hasher = hashing.hash_file(blob, expected)
    else:
        with progress.task(name, size, verb="verifying") as task:
            hasher = hashing.hash_file(blob, expected, task.advance)
    if not hasher.matches():
        return False
    records.save(blob, sha256=hasher.sha256.hexdigest(), expected=expected)
    return True


@contextmanager
def lock(repo_id: str, etag: str, name: str):
    """The per-blob lock huggingface_hub also takes; says so when another process holds it."""
    from filelock import FileLock, Timeout

    path = cache.lock_path(repo_id, etag)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        held = FileLock(str(path))
        try:
            held.acquire(timeout=0.5)
        except Timeout:
            report.info(f"waiting for another download of {name} to finish")
            held.acquire()
    except OSError as exc:
        raise cache.cache_not_writable(exc) from None
    try:
        yield
    finally:
        held.release()


def _download(src: Source, part: Path, progress: Progress) -> Hasher:
    """Bring `part` to the full size, resuming what is there; returns the hash of all of it."""
    offset = _usable_partial(part, src.size)
    check_space(part.parent, src.size - offset, src.filename)
    hasher = Hasher(src.expected, src.size)
    if offset:
        hashing.feed_file(hasher, part, limit=offset)
        if offset == src.size:  # complete, but not yet checked and renamed (e.g. killed just before)
            return hasher
    with progress.task(src.filename, src.size, done=offset) as task:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                _transfer(src, part, hasher, task)
            except _Restart:
                hasher.reset()
                task.reset(0)
                continue
            except remote.http().TransportError as exc:
                _interrupted(src, part, hasher, attempt, remote.describe(exc))
                continue
            except (KeyboardInterrupt, TerminatedError):
                report.info(
                    f"{src.filename}: {human_size(hasher.count)} kept; run the same pull again to resume"
                )
                raise
            if hasher.count == src.size:
                return hasher
            _interrupted(src, part, hasher, attempt, "the connection closed early")
    raise NetworkError(
        f"download of {src.filename} from {env.endpoint()} kept restarting", hint="try again later"
    )


def _interrupted(src: Source, part: Path, hasher: Hasher, attempt: int, why: str) -> None:
    """After a cut transfer: pause and let the loop resume, or give up and keep the partial file."""
    done = f"{human_size(hasher.count)} of {human_size(src.size)}"
    if attempt >= ATTEMPTS:
        raise NetworkError(
            f"download of {src.filename} from {env.endpoint()} interrupted at {done} ({why})",
            hint="run the same `llmcli pull` again to resume where it stopped",
        )
    report.info(
        f"{src.filename}: transfer interrupted at {done} ({why}); resuming ({attempt + 1}/{ATTEMPTS})"
    )
    time.sleep(BACKOFF_S * attempt)


def _transfer(src: Source, part: Path, hasher: Hasher, task: Task) -> None:
    """One GET from `hasher.count` on, appending to `part` and hashing as the bytes arrive."""
    offset = hasher.count
    headers = {**src.headers, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    timeout = remote.http().Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    from huggingface_hub.utils import get_session

    with get_session().stream(
        "GET", src.url, headers=headers, timeout=timeout, follow_redirects=True
    ) as resp:
        start = _response_start(src, resp, offset)
        if start != offset:  # a 200 to a ranged request: the body is the whole file
            report.info(f"{src.filename}: the server does not resume downloads; starting again from zero")
            hasher.reset()
            task.reset(0)
        with _open_at(part, start) as f:
            for chunk in resp.iter_bytes():  # as it arrives: a cut loses nothing already received
                _write(f, chunk, src, part)
                hasher.update(chunk)
                task.advance(len(chunk))
                if hasher.count > src.size:
                    break


def _response_start(src: Source, resp, offset: int) -> int:
    """Where the response body starts in the file; raises for error statuses."""
    status = resp.status_code
    if status == 416 and offset:  # our partial file is no prefix of this file
        raise _Restart()
    if status in remote.RETRY_STATUS:
        raise remote.http().TransportError(f"HTTP {status}")
    if status >= 400:
        resp.read()
        from huggingface_hub.utils import hf_raise_for_status

        try:
            hf_raise_for_status(resp)
        except Exception as exc:
            from llmcli.hub.refs import HubRef

            raise remote.translate(exc, HubRef(src.repo_id), src.filename) from None
    if status == 206:
        match = _CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
        if match is None or int(match.group(1)) != offset:
            raise _Restart()
        return offset
    return 0


@contextmanager
def _open_at(part: Path, start: int):
    """The partial file, unbuffered (a write error shows at the write), cut to `start` bytes."""
    try:
        f = part.open("r+b" if part.exists() else "wb", buffering=0)
        f.seek(start)
        f.truncate(start)
    except OSError as exc:
        raise cache.cache_not_writable(exc) from None
    try:
        yield f
    finally:
        f.close()


def _write(f, chunk: bytes, src: Source, part: Path) -> None:
    view = memoryview(chunk)
    try:
        while view:
            view = view[f.write(view) :]
    except OSError as exc:
        if exc.errno in _DISK_FULL:
            part.unlink(missing_ok=True)
            raise DiskFullError(
                f"the disk filled up while writing {src.filename} to {part.parent}; the partial file is gone",
                hint="free some space, or set HF_HUB_CACHE to a larger disk, and pull again",
            ) from None
        if exc.errno in _READ_ONLY:
            raise cache.cache_not_writable(exc) from None
        raise


def _usable_partial(part: Path, size: int) -> int:
    """Bytes of an earlier attempt worth resuming from (0 if none, or if it is too long)."""
    try:
        have = part.stat().st_size
    except OSError:
        return 0
    return have if have <= size else 0


def check_space(folder: Path, need: int, what: str) -> None:
    """Refuse before writing anything when the disk cannot hold what is about to be downloaded."""
    free = free_space(folder)
    if free is not None and need > free:
        raise DiskFullError(
            f"{what} needs {human_size(need)} but only {human_size(free)} is free in {folder}",
            hint="free some space, or set HF_HUB_CACHE to a larger disk",
        )


def free_space(folder: Path) -> int | None:
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return shutil.disk_usage(candidate).free
    return None


def _install(src: Source, part: Path, blob: Path, hasher: Hasher) -> None:
    """Check size, hash and header; only then give the file its final name and record it."""
    if hasher.count != src.size or not hasher.matches():
        part.unlink(missing_ok=True)
        raise _mismatch(src, hasher)
    if src.expected is None:
        report.warn(f"{env.endpoint()} gave no hash for {src.filename}; its content could not be verified")
    if is_gguf(src.filename):
        _check_header(part, src)
    with part.open("rb+") as f:
        os.fsync(f.fileno())
    os.replace(part, blob)
    records.save(blob, sha256=hasher.sha256.hexdigest(), expected=src.expected, source=env.endpoint())


def _mismatch(src: Source, hasher: Hasher) -> InvalidModelError:
    expected = src.expected
    if hasher.count != src.size:
        got = f"{hasher.count} bytes instead of {src.size}"
    elif expected is not None:
        got = f"{expected.algo} {hasher.checked_digest()[:12]}... instead of {expected.hexdigest[:12]}..."
    else:  # pragma: no cover - matches() is True without an expectation
        got = "unexpected content"
    return InvalidModelError(
        f"downloaded {src.filename} does not match the hub's hash ({got}); it was discarded",
        hint="run the same `llmcli pull` again; if it keeps failing, suspect the server at HF_ENDPOINT",
    )


def _check_header(part: Path, src: Source) -> None:
    from llmcli.gguf_file import read_header

    try:
        read_header(part)
    except InvalidModelError as exc:
        part.unlink(missing_ok=True)
        advice = "the file in the repository is broken; try another quantization"
        raise InvalidModelError(
            f"{src.repo_id}/{src.filename} is not a usable GGUF file: {exc.message}; it was discarded",
            hint=f"{exc.hint}; {advice}" if exc.hint else advice,
        ) from None


def source_for(ref, commit: str, rfile: remote.RemoteFile) -> Source:
    """Ask the hub (HEAD) for the file's ETag, the name huggingface_hub gives its blob, and size.

    Each transfer starts at the hub's /resolve/ URL pinned to the commit and follows its
    redirect, so a resume after a long pause gets a fresh signed CDN link; the HTTP client drops
    the token on a redirect to another host.
    """
    url = remote.resolve_url(ref, commit, rfile.path)
    meta = remote.file_metadata(ref, url, rfile.path)
    etag = meta.etag or rfile.etag
    if not etag:
        raise NetworkError(
            f"the hub named no ETag or hash for {rfile.path}", hint="the server may not be a hub"
        )
    size = meta.size if meta.size is not None else rfile.size
    expected = rfile.expected or hashing.expected_from_etag(etag, size)
    return Source(ref.repo_id, rfile.path, etag, size, expected, url, remote.headers())
