"""`Client`: one endpoint's HTTP connection pool, with the fault handling every request shares
(`faults.py`): 429 and 503 retried a bounded number of times, honouring Retry-After, and never once
a stream was accepted; `read_chunks` reads an accepted stream's JSON events (`sse.py`), and a
stream silent for longer than the `timeout` setting is a stall.

httpx is imported here (and for a type in `reply.py`) only, when a served model is used: `--help`
never loads it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from llmcli import reporting
from llmcli.errors import NetworkError, UsageError
from llmcli.served.config import stall_timeout
from llmcli.served.endpoints import Endpoint
from llmcli.served.faults import (
    CONNECT_TIMEOUT_S,
    body_message,
    error_text,
    reason,
    refusal,
    retry_after,
    short,
    transport_error,
)

if TYPE_CHECKING:
    import httpx

MAX_RETRIES = 3  # for 429 and 503, before any text arrived
MAX_RETRY_WAIT_S = 30.0  # a Retry-After longer than this is not waited for


class Client:
    """One endpoint's HTTP connection pool, with the fault handling every request shares."""

    def __init__(self, endpoint: Endpoint, *, connections: int = 4, debug: bool = False) -> None:
        import httpx

        self.endpoint = endpoint
        self.debug = debug
        self.stall_s = stall_timeout(endpoint)
        key, self.key_source = endpoint.api_key()
        headers = {"Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.stall_s, connect=min(CONNECT_TIMEOUT_S, self.stall_s)),
            verify=_verify(endpoint.verify),
            limits=httpx.Limits(
                max_connections=max(1, connections), max_keepalive_connections=max(1, connections)
            ),
            trust_env=True,
            follow_redirects=False,
        )

    def url(self, path: str, *, root: bool = False) -> str:
        return (self.endpoint.server_root if root else self.endpoint.url) + path

    def get_json(self, path: str, *, root: bool = False, quiet: bool = False) -> Any:
        """GET a JSON document; with `quiet`, None instead of an error (optional probes)."""
        import httpx

        url = self.url(path, root=root)
        try:
            response = self._http.get(url)
        except httpx.HTTPError as exc:
            if quiet:
                return None
            raise transport_error(exc, url, self.stall_s) from None
        if response.status_code >= 400:
            if quiet:
                return None
            raise refusal(response.status_code, body_message(response.text), url, self.key_source)
        try:
            return response.json()
        except ValueError:
            if quiet:
                return None
            raise NetworkError(f"{url} answered with something that is not JSON") from None

    def post_json(self, path: str, body: dict, *, root: bool = False) -> Any:
        import httpx

        url = self.url(path, root=root)
        try:
            response = self._http.post(url, json=body)
        except httpx.HTTPError as exc:
            raise transport_error(exc, url, self.stall_s) from None
        if response.status_code >= 400:
            raise refusal(response.status_code, body_message(response.text), url, self.key_source)
        return response.json()

    def open_stream(self, path: str, body: dict, cancel: threading.Event) -> httpx.Response | None:
        """POST `body` and return the streaming response once the server accepted it (None when
        `cancel` was set first). 429 and 503 are retried up to MAX_RETRIES times, waiting as the
        server's Retry-After says (interruptibly), else 0.5 s, 1 s, 2 s."""
        import httpx

        url = self.url(path)
        if self.debug:
            reporting.debug(f"POST {url} {json.dumps(_loggable(body))[:2000]}")
        for attempt in range(MAX_RETRIES + 1):
            request = self._http.build_request(
                "POST", url, json=body, headers={"Accept": "text/event-stream"}
            )
            try:
                response = self._http.send(request, stream=True)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if cancel.is_set():
                    return None
                try:  # a kept-alive connection the server had closed (a chat idle for a while): once more
                    response = self._http.send(request, stream=True)
                except httpx.HTTPError:
                    raise transport_error(exc, url, self.stall_s) from None
            except httpx.HTTPError as exc:
                if cancel.is_set():
                    return None
                raise transport_error(exc, url, self.stall_s) from None
            if response.status_code < 400:
                return response
            try:
                text = response.read().decode("utf-8", "replace")
            except httpx.HTTPError:
                text = ""
            response.close()
            status = response.status_code
            if status in (429, 503) and attempt < MAX_RETRIES:
                wait = retry_after(response.headers.get("retry-after"))
                if wait is None:
                    wait = 0.5 * 2**attempt
                if wait > MAX_RETRY_WAIT_S:
                    raise NetworkError(
                        f"{url}: HTTP {status} ({reason(status)}); the server asks to retry in {wait:.0f} s",
                        hint="try again later",
                    )
                reporting.debug(
                    f"HTTP {status} from {url}; retry {attempt + 1}/{MAX_RETRIES} in {wait:.1f} s"
                )
                if cancel.wait(wait):
                    return None
                continue
            raise refusal(status, body_message(text), url, self.key_source, retried=attempt)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._http.close()


class Chunk:
    """One streamed event's JSON and when it arrived (monotonic seconds)."""

    __slots__ = ("at", "data")

    def __init__(self, at: float, data: dict) -> None:
        self.at = at
        self.data = data


def read_chunks(response: httpx.Response, url: str, stall_s: float) -> Iterator[Chunk]:
    """The JSON events of an OpenAI-style stream until `[DONE]`. Raises NetworkError for a
    malformed event, an `error` event, a stall, or a connection that breaks; a stream that simply
    ends without `[DONE]` ends the iteration (the caller decides whether the answer was finished)."""
    import httpx

    from llmcli.served import sse

    kind = response.headers.get("content-type", "")
    if "text/event-stream" not in kind and "application/x-ndjson" not in kind:
        raise NetworkError(f"{url} did not answer with an event stream (content-type {kind or 'none'!r})")
    try:
        for _, data in sse.events(response.iter_lines()):
            if data.strip() == "[DONE]":
                return
            try:
                parsed = json.loads(data)
            except ValueError:
                raise NetworkError(f"{url} sent a malformed event: {data[:80]!r}") from None
            if not isinstance(parsed, dict):
                raise NetworkError(f"{url} sent a malformed event: {data[:80]!r}")
            if "error" in parsed and not parsed.get("choices"):
                raise NetworkError(f"the server reported an error mid-stream: {error_text(parsed['error'])}")
            yield Chunk(time.monotonic(), parsed)
    except sse.MalformedEvent as exc:
        raise NetworkError(f"{url} sent a malformed event stream: {str(exc)[:80]!r}") from None
    except httpx.ReadTimeout:
        raise NetworkError(
            f"{url}: the stream stalled: nothing for {stall_s:g} s",
            hint="raise the timeout setting (LLMCLI_TIMEOUT) for a slow server",
        ) from None
    except httpx.HTTPError as exc:
        raise NetworkError(f"{url}: the connection broke mid-stream ({short(exc)})") from None


def shutdown(response: httpx.Response) -> None:
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _verify(value: bool | str):
    if isinstance(value, str):
        import ssl

        try:
            return ssl.create_default_context(cafile=value)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"cannot read the CA bundle {value}: {exc}") from None
    return value


def _loggable(body: dict) -> dict:
    """The request as --debug shows it: long prompts shortened (the key is in a header, never here)."""
    shown = dict(body)
    if isinstance(shown.get("prompt"), list) and len(shown["prompt"]) > 16:
        shown["prompt"] = f"[{len(shown['prompt'])} token ids]"
    if isinstance(shown.get("messages"), list):  # an image's data URI: its length, not its bytes
        shown["messages"] = [_shortened(m) for m in shown["messages"]]
    return shown


def _shortened(message: Any) -> Any:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    parts = []
    for part in message["content"]:
        url = part.get("image_url", {}).get("url") if isinstance(part, dict) else None
        if isinstance(url, str) and url.startswith("data:") and len(url) > 64:
            part = {**part, "image_url": {**part["image_url"], "url": f"{url[:32]}... ({len(url)} chars)"}}
        parts.append(part)
    return {**message, "content": parts}
