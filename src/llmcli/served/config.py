"""Which served model a reference names, from the config file's `[endpoints.NAME]` tables (see
`llmcli.served.endpoints` for the syntax and the tables' schema), and how long a stream may stall."""

from __future__ import annotations

from typing import Any

from llmcli import settings
from llmcli.errors import UsageError
from llmcli.served.endpoints import Endpoint, is_url, parse_url


def configured() -> dict[str, dict[str, Any]]:
    """The config file's named endpoints (validated with the rest of the file)."""
    return settings.load_config().get("endpoints", {})


def named(name: str, model: str | None = None) -> Endpoint:
    table = configured()[name]
    base = parse_url(table["url"])
    verify: bool | str = table.get("ca_bundle") or table.get("verify", True)
    return Endpoint(
        base.url,
        model or table.get("model") or base.model,
        name,
        None,
        table.get("api_key_env"),
        table.get("api_key"),
        verify,
    )


def lookup(text: str | None) -> Endpoint | None:
    """The endpoint a model reference names (a URL, or NAME[/MODEL] of a config table), or None when
    it names a local or hub model or an alias (`loader.served_endpoint` follows those)."""
    if not text:
        return None
    text = text.strip()
    if is_url(text):
        return parse_url(text)
    endpoints = configured()
    head, sep, rest = text.partition("/")
    if head in endpoints:
        if sep and not rest:
            raise UsageError(f"{text!r} names endpoint {head!r} but no model", hint=f"use {head}/MODEL")
        return named(head, rest or None)
    return None


def stall_timeout(endpoint: Endpoint | None = None) -> float:
    """Seconds without a byte before a stream counts as stalled: --timeout, else LLMCLI_TIMEOUT,
    else the named endpoint's `timeout`, else the config file's `timeout`, else the default."""
    value, source = settings.resolve_with_source("timeout", endpoint.timeout_flag if endpoint else None)
    if source in ("flag", "env") or endpoint is None or endpoint.name is None:
        return float(value)
    return float(configured()[endpoint.name].get("timeout", value))
