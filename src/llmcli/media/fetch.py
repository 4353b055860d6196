"""An image named by an http(s) URL (`generate -a https://...`): fetched into memory, never to disk,
at most `image.MAX_BYTES` (refused as soon as the server says or sends more), within
`FETCH_TIMEOUT_S` for the whole transfer. What arrives is then checked like a file (magic bytes,
header, pixel count). A failure is one line: a transport fault or an HTTP error status is a
`NetworkError` (exit 6), an answer that is too big a `UsageError` (exit 2)."""

from __future__ import annotations

import time

from llmcli.errors import NetworkError, UsageError

FETCH_TIMEOUT_S = 30.0  # the whole transfer; a server silent or dripping past it fails the run
_CHUNK = 64 * 1024


def is_url(name: str) -> bool:
    return name.lower().startswith(("http://", "https://"))


def fetch(url: str, limit: int, *, offline: bool = False, timeout: float | None = None,
          what: str = "image") -> bytes:  # fmt: skip
    """The body at `url`, at most `limit` bytes, or a one-line error (`what`: an image, or an
    attachment of either kind)."""
    if offline:
        raise UsageError(f"cannot fetch {what} {url}: --offline", hint="download it and attach the file")
    timeout = FETCH_TIMEOUT_S if timeout is None else timeout
    import http.client  # here, not at the top: a local file's run need not load the HTTP stack
    import urllib.error
    import urllib.request

    from llmcli import __version__

    accept = "image/*" if what == "image" else "*/*"
    request = urllib.request.Request(url, headers={"User-Agent": f"llmcli/{__version__}", "Accept": accept})
    deadline = time.monotonic() + timeout
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > limit:
                raise UsageError(f"{url}: {int(length)} bytes, larger than {_mib(limit)}")
            chunks: list[bytes] = []
            total = 0
            while chunk := response.read(_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise UsageError(f"{url}: larger than {_mib(limit)}")
                if time.monotonic() > deadline:
                    raise NetworkError(f"cannot fetch {what} {url}: not done within {timeout:g} s")
                chunks.append(chunk)
            if length.isdigit() and total < int(length):
                raise http.client.IncompleteRead(b"".join(chunks), int(length) - total)
            return b"".join(chunks)
    except urllib.error.HTTPError as e:
        raise NetworkError(f"cannot fetch {what} {url}: HTTP {e.code} ({e.reason})") from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, TimeoutError):
            raise NetworkError(f"cannot fetch {what} {url}: no answer within {timeout:g} s") from None
        said = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
        raise NetworkError(f"cannot fetch {what} {url}: {said}") from None
    except TimeoutError:
        raise NetworkError(f"cannot fetch {what} {url}: no answer within {timeout:g} s") from None
    except http.client.IncompleteRead as e:
        raise NetworkError(
            f"cannot fetch {what} {url}: the transfer broke off after {len(e.partial)} bytes"
        ) from None
    except (http.client.HTTPException, OSError, ValueError) as e:
        text = (str(e) or type(e).__name__).splitlines()[0][:200]
        raise NetworkError(f"cannot fetch {what} {url}: {text}") from None


def _mib(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"
