"""Output channels: stdout carries data (model text or one JSON document), stderr everything else.

Model text is written to stdout as plain strings, never through Rich, so markup in a model's
answer is printed as it is. Rich is used only for stderr decorations and tables.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from llmcli import environment


def configure(*, quiet: bool = False, color: bool | None = None, debug: bool = False) -> None:
    """The invocation's output options from the global flags (once, in the root callback)."""
    environment.configure(quiet=quiet, color=color, debug=debug)
    global _err_console
    _err_console = None


def quiet() -> bool:
    return environment.current().quiet


def debug() -> bool:
    return environment.current().debug


def color_enabled(stream: Any = None) -> bool:
    """Colour on a terminal unless NO_COLOR; FORCE_COLOR or --color forces it."""
    if (forced := environment.current().color) is not None:
        return forced
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


_err_console = None


def err_console():
    """A Rich console on stderr honouring the colour settings."""
    global _err_console
    if _err_console is None:
        from rich.console import Console

        enabled = color_enabled(sys.stderr)
        _err_console = Console(
            file=sys.stderr,
            force_terminal=True if enabled and environment.current().color else None,
            no_color=not enabled,
            highlight=False,
            soft_wrap=True,
        )
    return _err_console


def err_line(text: str) -> None:
    """One message on stderr, broken to the terminal's width where stderr is one
    (`render.wrap`)."""
    from llmcli.render.wrap import for_stream

    sys.stderr.write(for_stream(text, sys.stderr) + "\n")
    sys.stderr.flush()


def info(message: str) -> None:
    """A plain informational line on stderr, silenced by --quiet."""
    if not quiet():
        err_line(message)


def warn(message: str) -> None:
    """A warning on stderr; warnings show even with --quiet."""
    err_line(f"llmcli: warning: {message}")


def debug_log(message: str) -> None:
    """A line on stderr shown only with --debug."""
    if debug():
        sys.stderr.write(f"llmcli: debug: {message}\n")
        sys.stderr.flush()


def out_text(text: str) -> None:
    """Model text to stdout, unbuffered-ish so pipelines see it as it comes."""
    sys.stdout.write(text)
    sys.stdout.flush()


def out_json(doc: Any, *, schema: str, line: bool = False) -> None:
    """Exactly one JSON document on stdout, with its `schema_version`: `schema` names its published
    schema, "FILE/DEF" for `docs/FILE.schema.json`'s `$defs/DEF` (llmcli.render.documents). `line`:
    on one line, one of a stream of them (JSON lines: `embed`'s vectors, `similar`'s matches)."""
    from llmcli.render.documents import stamped

    text = json.dumps(stamped(doc, schema), indent=None if line else 2, ensure_ascii=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
