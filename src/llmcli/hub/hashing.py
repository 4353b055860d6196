"""Content hashes the hub vouches for, and hashing files against them.

The hub identifies every file by a hash: LFS files (all real model weights) by the SHA-256 of
their content; small files kept in git by their git blob id, the SHA-1 of
`b"blob <size>\\0" + content`. A download is checked against whichever the hub gave, and the
SHA-256 is always computed too, since that is what llmcli records and `models verify` re-checks.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
CHUNK = 4 << 20


@dataclass(frozen=True)
class Expected:
    """What a file must hash to: `algo` is "sha256" (LFS) or "git-sha1" (a git blob id)."""

    algo: str
    hexdigest: str
    size: int


def expected_for(size: int, *, sha256: str | None = None, blob_id: str | None = None) -> Expected | None:
    """The strongest hash known for a file: its LFS SHA-256, else its git blob id."""
    if sha256 and _SHA256.match(sha256.lower()):
        return Expected("sha256", sha256.lower(), size)
    if blob_id and _SHA1.match(blob_id.lower()):
        return Expected("git-sha1", blob_id.lower(), size)
    return None


def expected_from_etag(etag: str, size: int) -> Expected | None:
    """Hub ETags are the same hashes: 64 hex digits for LFS, 40 for git blobs."""
    return expected_for(
        size, sha256=etag if len(etag) == 64 else None, blob_id=etag if len(etag) == 40 else None
    )


class Hasher:
    """Feeds bytes to SHA-256 and, for git blobs, to the blob id's SHA-1."""

    def __init__(self, expected: Expected | None, size: int) -> None:
        self.expected = expected
        self.size = size
        self.reset()

    def reset(self) -> None:
        """Forget everything fed so far (a download that starts again from byte zero)."""
        self.sha256 = hashlib.sha256()
        self.sha1 = None
        if self.expected is not None and self.expected.algo == "git-sha1":
            self.sha1 = hashlib.sha1(b"blob %d\0" % self.size)
        self.count = 0

    def update(self, data: bytes | memoryview) -> None:
        self.sha256.update(data)
        if self.sha1 is not None:
            self.sha1.update(data)
        self.count += len(data)

    def checked_digest(self) -> str:
        """The digest to compare with `expected` (the SHA-1 for git blobs)."""
        return self.sha1.hexdigest() if self.sha1 is not None else self.sha256.hexdigest()

    def matches(self) -> bool:
        if self.expected is None:
            return True
        return self.count == self.expected.size and self.checked_digest() == self.expected.hexdigest


def feed_file(
    hasher: Hasher, path: Path, *, limit: int | None = None, advance: Callable[[int], None] | None = None
):
    """Hash a file (or its first `limit` bytes) into `hasher`."""
    remaining = limit
    with path.open("rb") as f:
        while remaining is None or remaining > 0:
            block = f.read(CHUNK if remaining is None else min(CHUNK, remaining))
            if not block:
                break
            hasher.update(block)
            if remaining is not None:
                remaining -= len(block)
            if advance:
                advance(len(block))
    return hasher


def hash_file(path: Path, expected: Expected | None, advance: Callable[[int], None] | None = None) -> Hasher:
    size = path.stat().st_size
    return feed_file(Hasher(expected, expected.size if expected else size), path, advance=advance)
