"""How a server's faults become one error each: an HTTP error status (`refusal`: 401/403 with where
the key came from, never the key; 404; 429/503 after the retries; a context overflow, exit 4; any
other status the server's refusal in its own words, exit 1; 502/504 a gateway's, exit 6) and a
transport failure (`transport_error`: connection refused, DNS, TLS, a stall, a closed connection).
`retry_after` reads the Retry-After header the client waits by."""

from __future__ import annotations

import json
from email.utils import parsedate_to_datetime
from typing import Any

from llmcli.errors import (
    ContextOverflowError,
    LlmcliError,
    ModelNotFoundError,
    NetworkError,
    RequestRefusedError,
)

CONNECT_TIMEOUT_S = 10.0


def retry_after(value: str | None) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import datetime

    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


def error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error)[:300]
    return str(error)[:300]


def body_message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(data, dict):
        if "error" in data:
            return error_text(data["error"])
        if "detail" in data:
            return str(data["detail"])[:300]
        if "message" in data:
            return str(data["message"])[:300]
    return " ".join(text.split())[:200]


def reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "error"


_CONTEXT_WORDS = (
    "context length",
    "context size",
    "exceeds the available context",
    "maximum context",
    "too many tokens",
    "exceed_context_size",
)


# a proxy in front of the server that could not reach it, or gave up waiting: the network's fault
_GATEWAY = (502, 504)


def refusal(status: int, message: str, url: str, key_source: str, *, retried: int = 0) -> LlmcliError:
    """The one error for an HTTP error status (the key is never part of it: only where it came from)."""
    said = f": {message}" if message else ""
    if status in (401, 403):
        hint = (
            "no API key was sent: set LLMCLI_API_KEY, or api_key_env in the endpoint's config"
            if key_source == "none"
            else f"the key from {key_source} was not accepted"
        )
        return NetworkError(f"{url}: HTTP {status} ({reason(status)}){said}", hint=hint)
    if status == 404:
        return ModelNotFoundError(
            f"{url}: HTTP 404 ({reason(404)}){said}",
            hint="check the URL (usually ending in /v1) and the model name",
        )
    if status in (429, 503):
        again = f" after {retried} retries" if retried else ""
        return NetworkError(f"{url}: HTTP {status} ({reason(status)}){again}{said}", hint="try again later")
    if status in (400, 413, 422) and any(w in message.lower() for w in _CONTEXT_WORDS):
        return ContextOverflowError(
            f"the server refused the prompt{said}", hint="shorten the prompt or the history"
        )
    if status in _GATEWAY:
        return NetworkError(f"{url}: HTTP {status} ({reason(status)}){said}")
    # the server answered and refused the request in its own words, whatever the status (llama-server
    # --embeddings asked for a completion, or without --mmproj for an image, answers 500): exit 1
    return RequestRefusedError(f"{url}: HTTP {status} ({reason(status)}){said}")


def short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


def transport_error(exc: BaseException, url: str, stall_s: float) -> NetworkError:
    """Connection refused, DNS, TLS, timeouts: one line that says which."""
    from urllib.parse import urlsplit

    import httpx

    host = urlsplit(url).netloc
    text = short(exc)
    low = text.lower()
    if isinstance(exc, httpx.ConnectTimeout):
        return NetworkError(
            f"cannot connect to {host}: no answer within {min(CONNECT_TIMEOUT_S, stall_s):g} s"
        )
    if isinstance(exc, httpx.TimeoutException):
        return NetworkError(
            f"{url}: no answer for {stall_s:g} s (stalled)",
            hint="raise the timeout setting (LLMCLI_TIMEOUT) for a slow server",
        )
    if "certificate" in low or "ssl" in low or "tls" in low:
        return NetworkError(
            f"TLS failure talking to {host}: {text}",
            hint="TLS is verified; trust the server's CA with the endpoint's ca_bundle",
        )
    if (
        "name or service not known" in low
        or "nodename nor servname" in low
        or "name resolution" in low
        or "getaddrinfo" in low
        or "no address associated" in low
    ):
        return NetworkError(f"cannot resolve the host name {urlsplit(url).hostname!r}", hint="check the URL")
    if "refused" in low:
        return NetworkError(f"cannot connect to {host}: connection refused", hint="is the server running?")
    if isinstance(exc, httpx.RemoteProtocolError):
        return NetworkError(f"{url}: the server closed the connection ({text})")
    return NetworkError(f"cannot reach {host}: {text}")
