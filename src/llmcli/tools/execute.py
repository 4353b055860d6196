"""Running one call: its arguments checked against the tool's schema, then the tool run in a thread
of its own with a timeout. Whatever goes wrong (arguments the schema refuses, an exception, a
timeout, Ctrl-C) becomes text the model reads as the result, and the call's `Outcome` says so."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from llmcli.tools.toolset import Outcome, Tool

TIMEOUT = 30.0  # seconds a call may run (--tool-timeout)
RESULT_CHARS = 20_000  # a result longer than this is cut (the model's context is not a log file)


def check_arguments(schema: dict, arguments: Any) -> str | None:
    """Why `arguments` do not fit the tool's schema (a subset of JSON Schema: types, required,
    enum, unknown names where `additionalProperties` is false), or None when they do."""
    if not isinstance(arguments, dict):
        return f"the arguments must be a JSON object, got {json.dumps(arguments)[:80]}"
    missing = [name for name in schema.get("required", []) if name not in arguments]
    if missing:
        return f"missing required argument{'s' if len(missing) > 1 else ''}: {', '.join(missing)}"
    properties = schema.get("properties", {})
    unknown = [name for name in arguments if name not in properties]
    if unknown and schema.get("additionalProperties") is False:
        return f"unknown argument{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}"
    for name, value in arguments.items():
        problem = _check_value(properties.get(name, {}), value)
        if problem:
            return f"argument {name!r}: {problem}"
    return None


def _check_value(schema: dict, value: Any) -> str | None:
    if "enum" in schema and value not in schema["enum"]:
        return f"must be one of {', '.join(json.dumps(v) for v in schema['enum'])}"
    if "anyOf" in schema:
        return None if any(_check_value(s, value) is None for s in schema["anyOf"]) else "has the wrong type"
    wanted = schema.get("type")
    if wanted is None:
        return None
    types = wanted if isinstance(wanted, list) else [wanted]
    if any(_is(t, value) for t in types):
        if isinstance(value, list) and "items" in schema:
            for i, item in enumerate(value):
                if problem := _check_value(schema["items"], item):
                    return f"item {i} {problem}"
        return None
    return f"must be {' or '.join(types)}, got {json.dumps(value)[:40]}"


def _is(kind: str, value: Any) -> bool:
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: (
            isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer())
        ),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
        "null": lambda v: v is None,
    }
    return checks.get(kind, lambda v: True)(value)


def run(tool: Tool, arguments: dict, timeout: float = TIMEOUT) -> Outcome:
    """Run one call in a thread of its own, waiting at most `timeout` seconds. Arguments the schema
    refuses, an exception and a timeout each become an error result the model can read. Ctrl-C while
    it runs stops the wait (a Python function cannot be killed: its thread is left to finish alone,
    its result dropped) and the outcome says it was interrupted."""
    started = time.perf_counter()
    problem = check_arguments(tool.parameters, arguments)
    if problem:
        return _failed(f"the arguments do not fit the tool's schema: {problem}", started)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = tool.call(arguments)
        except BaseException as exc:  # noqa: BLE001 - the model reads what went wrong
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"tool {tool.name}", daemon=True)
    thread.start()
    deadline = started + timeout
    try:
        while thread.is_alive() and time.perf_counter() < deadline:
            thread.join(min(0.05, max(deadline - time.perf_counter(), 0)))
    except KeyboardInterrupt:
        outcome = _failed("the user interrupted this call", started)
        outcome.interrupted = True
        return outcome
    if thread.is_alive():
        return _failed(f"the call timed out after {timeout:g} s", started)
    if "error" in box:
        exc = box["error"]
        return _failed(f"{type(exc).__name__}: {exc}", started)
    return Outcome(_text(box.get("value")), None, _ms(started))


def _failed(reason: str, started: float) -> Outcome:
    return Outcome(f"error: {reason}", reason, _ms(started))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _text(value: Any) -> str:
    """A result as the text the model reads: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > RESULT_CHARS:
        text = text[:RESULT_CHARS] + f"... [cut at {RESULT_CHARS} characters]"
    return text
