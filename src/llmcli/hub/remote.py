"""Talking to the hub (or a mirror at HF_ENDPOINT): what a repository holds, and clear errors.

Every call goes through `call()`, which retries a few times when the hub cannot be reached or
answers 429/5xx, then turns huggingface_hub's exceptions into llmcli's one-line errors with
a hint. huggingface_hub is imported inside functions only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from llmcli import __version__, reporting
from llmcli.errors import LlmcliError, ModelNotFoundError, NetworkError
from llmcli.hub import env, hashing
from llmcli.hub.refs import HubRef

T = TypeVar("T")

ATTEMPTS = 3  # tries per request when the hub cannot be reached
BACKOFF_S = 0.5  # first pause between tries; doubled each time
TIMEOUT_S = 10.0  # connect/read timeout for metadata requests
RETRY_STATUS = {429, 500, 502, 503, 504}


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository at a commit, with the hash the hub vouches for."""

    path: str
    size: int
    sha256: str | None  # LFS files
    blob_id: str | None  # git object id (for LFS files, the pointer's id)

    @property
    def expected(self) -> hashing.Expected | None:
        return hashing.expected_for(
            self.size, sha256=self.sha256, blob_id=None if self.sha256 else self.blob_id
        )

    @property
    def etag(self) -> str | None:
        """The blob name huggingface_hub uses: the LFS SHA-256, else the git blob id."""
        return self.sha256 or self.blob_id


@dataclass(frozen=True)
class RemoteRepo:
    repo_id: str
    revision: str
    commit: str
    files: dict[str, RemoteFile]


def http():
    """The HTTP library huggingface_hub talks through (httpx2 in huggingface_hub 2.x, httpx in 1.x),
    found from its own session: the hub names that library's errors and timeouts but imports no
    HTTP client of its own (the served engine's is llmcli's one)."""
    import importlib

    from huggingface_hub.utils import get_session

    return importlib.import_module(type(get_session()).__module__.partition(".")[0])


def api():
    from huggingface_hub import HfApi

    return HfApi(
        endpoint=env.endpoint(), token=env.token(), library_name="llmcli", library_version=__version__
    )


def headers() -> dict[str, str]:
    """Authorization and user agent, exactly as huggingface_hub builds them."""
    from huggingface_hub.utils import build_hf_headers

    return build_hf_headers(token=env.token(), library_name="llmcli", library_version=__version__)


def fetch_repo(ref: HubRef) -> RemoteRepo:
    """Resolve the reference's revision to a commit and list every file at that commit."""
    hub = api()
    try:
        info = call(lambda: hub.model_info(ref.repo_id, revision=ref.rev), ref)
    except ModelNotFoundError:
        # Some mirrors answer "repository not found" for a missing revision: tell the two apart.
        if ref.rev != "main" and _exists(hub, ref):
            raise revision_not_found(ref) from None
        raise
    commit = info.sha or ref.rev
    entries = call(lambda: list(hub.list_repo_tree(ref.repo_id, revision=commit, recursive=True)), ref)
    files = {}
    for entry in entries:
        if getattr(entry, "blob_id", None) is None:  # a folder
            continue
        lfs = getattr(entry, "lfs", None)
        sha256 = lfs.sha256 if lfs else None
        size = lfs.size if lfs else entry.size
        files[entry.path] = RemoteFile(entry.path, int(size), sha256, entry.blob_id)
    return RemoteRepo(ref.repo_id, ref.rev, commit, files)


def _exists(hub, ref: HubRef) -> bool:
    try:
        call(lambda: hub.model_info(ref.repo_id, revision="main"), ref)
    except ModelNotFoundError:
        return False
    return True


def revision_not_found(ref: HubRef) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"{ref.repo_id} has no revision {ref.rev!r}", hint="use a branch, tag or full commit hash"
    )


def resolve_url(ref: HubRef, commit: str, filename: str) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(ref.repo_id, filename, revision=commit, endpoint=env.endpoint())


def file_metadata(ref: HubRef, url: str, filename: str):
    """HEAD of a file: its ETag (the blob name), size and download location."""
    from huggingface_hub import get_hf_file_metadata

    return call(
        lambda: get_hf_file_metadata(url, token=env.token(), timeout=TIMEOUT_S), ref, filename=filename
    )


def call(fn: Callable[[], T], ref: HubRef, *, filename: str | None = None) -> T:
    """Run one hub request with bounded retries; raise llmcli errors only."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    transport = http().TransportError
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return fn()
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status not in RETRY_STATUS or attempt == ATTEMPTS:
                raise translate(exc, ref, filename) from None
            reason = f"HTTP {status}"
        except transport as exc:
            if attempt == ATTEMPTS:
                raise unreachable(exc) from None
            reason = describe(exc)
        except OfflineModeIsEnabled:
            raise offline_refusal(ref) from None
        reporting.info(f"{env.endpoint()}: {reason}; retrying ({attempt + 1}/{ATTEMPTS})")
        time.sleep(BACKOFF_S * 2 ** (attempt - 1))
    raise AssertionError("unreachable")  # pragma: no cover


def translate(exc: Exception, ref: HubRef, filename: str | None = None) -> LlmcliError:
    """One line for each way the hub can say no."""
    from huggingface_hub.errors import (
        GatedRepoError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo, where = ref.repo_id, env.endpoint()
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError):
        return NetworkError(
            f"{repo} is gated: {where} refused access (HTTP {status})", hint=_token_hint(repo)
        )
    if isinstance(exc, RepositoryNotFoundError):
        hint = "check the spelling; " + _token_hint(repo, private=True)
        return ModelNotFoundError(f"repository {repo} not found on {where}", hint=hint)
    if isinstance(exc, RevisionNotFoundError):
        return ModelNotFoundError(
            f"{repo} has no revision {ref.rev!r}", hint="use a branch, tag or full commit hash"
        )
    if isinstance(exc, RemoteEntryNotFoundError):
        return ModelNotFoundError(f"{repo} has no file {filename or ref.filename} at {ref.rev}")
    if status in (401, 403):
        return NetworkError(f"{where} refused access to {repo} (HTTP {status})", hint=_token_hint(repo))
    return NetworkError(f"{where} answered HTTP {status} for {repo}", hint="try again later")


def unreachable(exc: Exception) -> NetworkError:
    return NetworkError(
        f"cannot reach the hub at {env.endpoint()} after {ATTEMPTS} attempts: {describe(exc)}",
        hint="check the connection, proxy and HF_ENDPOINT; downloaded models work with --offline",
    )


def offline_refusal(ref: HubRef | str) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"{ref} is not downloaded and offline mode is on",
        hint=f"run `llmcli pull {ref}` while online (unset HF_HUB_OFFLINE, drop --offline)",
    )


def describe(exc: Exception) -> str:
    """A short reason for a transport error: 'connection refused', 'timed out', ..."""
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "refused" in lowered:
        return "connection refused"
    if "peer closed" in lowered or "incomplete" in lowered or "reset" in lowered:
        return "the connection was cut"
    if isinstance(exc, http().TimeoutException) or "timed out" in lowered:
        return "timed out"
    if "name or service not known" in lowered or "nodename nor servname" in lowered:
        return "unknown host"
    return text.splitlines()[0][:120]


def _token_hint(repo: str, *, private: bool = False) -> str:
    if env.has_token():
        return f"the token in HF_TOKEN may not have access to {repo}; request access on its page"
    what = "if it is private or gated" if private else "accept its terms on the model page, then"
    return f"{what} set HF_TOKEN to an access token (https://huggingface.co/settings/tokens)"
