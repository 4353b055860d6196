"""Served models: a model on an OpenAI-compatible server, named like any other model.

    http://HOST:PORT/v1#MODEL       an endpoint URL and the model name the server knows it by
    http://HOST:PORT/v1             the server's only model (a server with several needs #MODEL)
    NAME/MODEL                      a named endpoint from the config file, and a model it serves
    NAME                            a named endpoint's `model` (else the server's only model)
    ALIAS                           `llmcli models alias ALIAS REF` where REF is one of the above

Named endpoints live in the config file:

    [endpoints.local]
    url = "http://127.0.0.1:8080/v1"
    model = "smollm2"                # optional default model
    api_key_env = "LOCAL_API_KEY"    # optional: the variable holding the key
    api_key = "..."                  # optional: the key itself (the file is yours; never a flag)
    timeout = 60                     # optional: seconds without a byte from the server (a stall;
                                     # else LLMCLI_TIMEOUT / the `timeout` setting, default 120)
    verify = true                    # optional: false skips TLS verification (never the default)
    ca_bundle = "/path/to/ca.pem"    # optional: trust this CA for TLS

The API key is never taken from a flag (it would land in shell history) nor from the URL: a named
endpoint's `api_key_env` variable, then its `api_key`, then `LLMCLI_API_KEY`, then
`OPENAI_API_KEY`. The key lives only in the request's Authorization header: `Endpoint` does not
show it, and no record, log line or error message contains it.

This module is the syntax and the tables' schema, reading nothing (settings validates the config
file with it); which endpoint a reference names, from the config file, is `served.config`, and
through an alias, `loader.served_endpoint`.

Light on purpose (no HTTP client here): `--help` and parsing never import httpx.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from llmcli.errors import ConfigError, UsageError
from llmcli.names import is_alias_name

KEY_VARIABLES = ("LLMCLI_API_KEY", "OPENAI_API_KEY")
_ENDPOINT_KEYS = {
    "url": str,
    "model": str,
    "api_key_env": str,
    "api_key": str,
    "timeout": float,
    "verify": bool,
    "ca_bundle": str,
}


@dataclass(frozen=True)
class Endpoint:
    url: str  # the API's base URL, ending before /chat/completions (usually .../v1); no credentials
    model: str | None = None  # the model's name on the server; None: ask the server for its only one
    name: str | None = None  # the config file's endpoint name, if it came from there
    alias: str | None = None  # the alias the user typed, if any
    key_env: str | None = None  # a named endpoint's api_key_env
    config_key: str | None = field(default=None, repr=False)  # a named endpoint's api_key
    verify: bool | str = True  # True, False, or a CA bundle path
    timeout_flag: float | None = None  # --timeout, which comes before every other source

    @property
    def ref(self) -> str:
        """How the model is shown: the alias, NAME/MODEL, or URL#MODEL."""
        if self.alias:
            return self.alias
        if self.name:
            return f"{self.name}/{self.model}" if self.model else self.name
        return f"{self.url}#{self.model}" if self.model else self.url

    def with_model(self, model: str) -> Endpoint:
        from dataclasses import replace

        return replace(self, model=model)

    def api_key(self) -> tuple[str | None, str]:
        """The key and where it came from (a variable's name, "config file" or "none")."""
        if self.key_env:
            if value := os.environ.get(self.key_env, "").strip():
                return value, f"${self.key_env}"
        if self.config_key:
            return self.config_key, "config file"
        for var in KEY_VARIABLES:
            if value := os.environ.get(var, "").strip():
                return value, f"${var}"
        return None, "none"

    @property
    def server_root(self) -> str:
        """The server's root (llama-server's /health, /props and /tokenize live there, not under /v1)."""
        parts = urlsplit(self.url)
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):
            path = path[: -len("/v1")]
        return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def short_model(model: str) -> str:
    """A served model's name for a banner or a table: llama-server names its model by the path it
    loaded (unless --alias), so a file path is shown by its file name; any other name is kept."""
    import re
    from pathlib import PureWindowsPath

    if model.startswith("/") or re.match(r"[A-Za-z]:[\\/]", model) or model.lower().endswith(".gguf"):
        return PureWindowsPath(model).name or model  # splits at / and at \\
    return model


def display_ref(ref: str) -> str:
    """`ref` for a banner: URL#MODEL whose MODEL is a file path as `FILE at URL`; else `ref`."""
    url, sep, model = ref.partition("#")
    if sep and is_url(url) and (short := short_model(model)) != model:
        return f"{short} at {url}"
    return ref


def is_url(text: str) -> bool:
    return text.lower().startswith(("http://", "https://"))


def parse_url(text: str) -> Endpoint:
    """`http(s)://HOST[:PORT][/PATH][#MODEL]`; a bare host gets /v1."""
    url, _, model = text.strip().partition("#")
    parts = urlsplit(url)
    if not parts.hostname:
        raise UsageError(
            f"malformed endpoint URL {url!r}: no host", hint="e.g. http://127.0.0.1:8080/v1#MODEL"
        )
    if parts.username or parts.password:
        raise UsageError(
            "an endpoint URL must not carry credentials (they would land in shell history and logs)",
            hint="put the key in LLMCLI_API_KEY, or in the config file's [endpoints.NAME] api_key_env",
        )
    if parts.query:
        raise UsageError(f"an endpoint URL takes no query string: {url!r}")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise UsageError(f"malformed endpoint URL {url!r}: bad port") from None
    path = parts.path.rstrip("/") or "/v1"
    clean = urlunsplit((parts.scheme.lower(), parts.netloc, path, "", ""))
    return Endpoint(clean, model or None)


def validate_table(raw: Any, where: str) -> dict[str, dict[str, Any]]:
    """Check the config file's `[endpoints.NAME]` tables; every problem names the file and key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: endpoints must be a table of [endpoints.NAME] tables")
    out: dict[str, dict[str, Any]] = {}
    for name, table in raw.items():
        if not is_alias_name(name):
            raise ConfigError(
                f"{where}: {name!r} is not a valid endpoint name (letters, digits, '.', '_', '-')"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: endpoints.{name} must be a table")
        for key, value in table.items():
            kind = _ENDPOINT_KEYS.get(key)
            if kind is None:
                raise ConfigError(
                    f"{where}: unknown key endpoints.{name}.{key}",
                    hint=f"endpoint keys: {', '.join(_ENDPOINT_KEYS)}",
                )
            ok = isinstance(value, kind) or (
                kind is float and isinstance(value, int) and not isinstance(value, bool)
            )
            if not ok or (kind is not bool and isinstance(value, bool)):
                raise ConfigError(f"{where}: endpoints.{name}.{key} must be {_kind_name(kind)}")
        if "url" not in table:
            raise ConfigError(f"{where}: endpoints.{name} needs a url")
        if not is_url(table["url"]):
            raise ConfigError(f"{where}: endpoints.{name}.url must start with http:// or https://")
        try:
            parse_url(table["url"])
        except UsageError as exc:
            raise ConfigError(f"{where}: endpoints.{name}.url: {exc.message}") from None
        if "timeout" in table and table["timeout"] <= 0:
            raise ConfigError(f"{where}: endpoints.{name}.timeout must be > 0")
        out[name] = dict(table)
    return out


def _kind_name(kind: type) -> str:
    return {str: "a string", float: "a number", bool: "true or false"}[kind]
