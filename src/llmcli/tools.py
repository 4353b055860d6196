"""Tools a model may call: where they come from, their JSON schemas, and running one call.

Three sources, each giving `Tool`s with one shape (a name, a description, a JSON schema of the
arguments, and how to run it):

- `--functions FILE.py`: every top-level public function of the file (the user's own code, run with
  the user's rights): its name, its docstring's first paragraph, and its type-annotated parameters
  as the schema (`int` integer, `float` number, `str` string, `bool` boolean, `list[...]` array,
  `dict` object, `Literal[...]` enum; a parameter with a default is optional).
- `--tool NAME`: built-in tools that are safe by construction (`BUILTINS`): they read no files, start
  nothing and reach no network.
- `--mcp 'COMMAND ARGS'`: the tools of an MCP server started over stdio (`llmcli.mcp_tools`).

`run` runs one call with a timeout; whatever goes wrong (arguments the schema refuses, an exception,
a timeout) becomes text the model reads as the result, and the call's record says so.
"""

from __future__ import annotations

import inspect
import json
import math
import threading
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.errors import UsageError

TIMEOUT = 30.0  # seconds a call may run (--tool-timeout)
RESULT_CHARS = 20_000  # a result longer than this is cut (the model's context is not a log file)


class ToolError(UsageError):
    """A tool set that cannot be built: a file that fails to import, two tools with one name, an
    unknown built-in, an MCP server that does not start."""

    label = "tools"


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict  # the JSON schema of the arguments (an object)
    call: Callable[[dict], Any] = field(repr=False)
    origin: str = "builtin"  # "builtin", the functions file's path, or "mcp: COMMAND"

    def spec(self) -> dict:
        """The OpenAI-style tool definition that templates and servers take."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class Outcome:
    """What one call gave: `result` is the text the model reads; `error` the one-line reason when
    the call did not succeed (the result then says it too)."""

    result: str
    error: str | None
    ms: float
    interrupted: bool = False


class Toolset:
    """The tools of one run, by name; closes what it started (MCP servers) when done."""

    def __init__(self, tools: list[Tool] | None = None, closers: list[Callable[[], None]] | None = None):
        self.tools: dict[str, Tool] = {}
        self.closers = list(closers or [])
        for tool in tools or []:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self.tools:
            other = self.tools[tool.name].origin
            raise ToolError(
                f"two tools are named {tool.name!r} ({other} and {tool.origin})",
                hint="rename one of them",
            )
        self.tools[tool.name] = tool

    def __bool__(self) -> bool:
        return bool(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def specs(self) -> list[dict]:
        return [tool.spec() for tool in self.tools.values()]

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def close(self) -> None:
        while self.closers:
            try:
                self.closers.pop()()
            except Exception:  # a server that is already gone
                pass


def build(
    functions: list[Path] | None = None,
    names: list[str] | None = None,
    servers: Sequence[Callable[[], tuple[list[Tool], Callable[[], None]]]] | None = None,
) -> Toolset:
    """The tool set of a run's flags: functions files, built-ins, then each server's tools
    (`servers`: functions that start one and return its tools and how to stop it)."""
    toolset = Toolset()
    try:
        for path in functions or []:
            for tool in from_file(path):
                toolset.add(tool)
        for name in names or []:
            toolset.add(builtin(name))
        for start in servers or []:
            tools, close = start()
            toolset.closers.append(close)
            for tool in tools:
                toolset.add(tool)
    except BaseException:
        toolset.close()
        raise
    return toolset


# -- functions files ---------------------------------------------------------------------------


def from_file(path: Path) -> list[Tool]:
    """Every top-level public function defined in the Python file `path`, as a tool."""
    import importlib.util
    import sys

    path = Path(path)
    if not path.is_file():
        raise ToolError(f"no functions file {path}")
    name = f"llmcli_functions_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ToolError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing look the module up while it runs
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # SystemExit and the like too: the file is the user's
        sys.modules.pop(name, None)
        raise ToolError(f"{path} failed to import: {type(exc).__name__}: {exc}") from None
    tools = []
    for fname, fn in vars(module).items():
        if fname.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != name:
            continue
        tools.append(from_function(fn, origin=str(path)))
    if not tools:
        raise ToolError(f"{path} defines no public top-level function")
    return tools


def from_function(fn: Callable, origin: str = "builtin") -> Tool:
    """A tool from a Python function: its name, docstring and annotated parameters."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ToolError(f"{origin}: {fn.__name__}: its annotations do not resolve ({exc})") from None
    properties: dict[str, dict] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = _schema(hints.get(param.name, Any), f"{origin}: {fn.__name__}({param.name})")
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif param.default is None or isinstance(param.default, (str, int, float, bool)):
            schema = {**schema, "default": param.default}
        properties[param.name] = schema
    # a function refuses other names, so the schema does too
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required,
                                  "additionalProperties": False}  # fmt: skip
    doc = inspect.getdoc(fn) or ""
    description = doc.split("\n\n")[0].replace("\n", " ").strip()

    def call(arguments: dict) -> Any:
        return fn(**arguments)

    return Tool(fn.__name__, description, parameters, call, origin)


_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema(annotation: Any, where: str) -> dict:
    """The JSON schema of one annotation (a small subset: what a tool's arguments need)."""
    import types

    if annotation is Any or annotation is inspect.Parameter.empty:
        return {}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if annotation in (list, tuple):
        return {"type": "array"}
    if annotation is dict:
        return {"type": "object"}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        inner = _schema(rest[0], where) if len(rest) == 1 else {"anyOf": [_schema(a, where) for a in rest]}
        if len(rest) < len(args) and "type" in inner:
            return {**inner, "type": [inner["type"], "null"]}
        return inner
    if origin in (list, tuple, set, frozenset):
        return {"type": "array", "items": _schema(args[0], where)} if args else {"type": "array"}
    if origin is dict:
        return {"type": "object"}
    raise ToolError(f"{where}: type {annotation!r} has no JSON schema here", hint="use str, int, float, "
                    "bool, list, dict or Literal")  # fmt: skip


# -- built-in tools ------------------------------------------------------------------------------


def current_time() -> str:
    """The current date and time: local (with its UTC offset) and UTC, in ISO 8601."""
    import datetime

    now = datetime.datetime.now().astimezone()
    utc = now.astimezone(datetime.timezone.utc)
    return json.dumps({"local": now.isoformat(timespec="seconds"), "utc": utc.isoformat(timespec="seconds")})


def arithmetic(operation: typing.Literal["add", "subtract", "multiply", "divide", "power"],
               a: float, b: float) -> float:  # fmt: skip
    """Exact arithmetic on two numbers: add, subtract, multiply, divide (a / b) or power (a ** b)."""
    if operation == "add":
        value = a + b
    elif operation == "subtract":
        value = a - b
    elif operation == "multiply":
        value = a * b
    elif operation == "divide":
        if b == 0:
            raise ZeroDivisionError("division by zero")
        value = a / b
    elif operation == "power":
        if abs(b) > 1024 or (abs(a) > 1 and abs(b) * math.log10(abs(a)) > 308):
            raise OverflowError("the power is too large")
        value = float(a) ** float(b)
    else:
        raise ValueError(f"unknown operation {operation!r}")
    if isinstance(value, complex) or not math.isfinite(value):
        raise ValueError("the result is not a finite real number")
    return int(value) if float(value).is_integer() and abs(value) < 2**53 else value


BUILTINS: dict[str, Callable] = {"current_time": current_time, "arithmetic": arithmetic}


def builtin(name: str) -> Tool:
    if name not in BUILTINS:
        raise ToolError(f"no built-in tool {name!r}", hint=f"built-in tools: {', '.join(BUILTINS)}")
    return from_function(BUILTINS[name], origin="builtin")


# -- one call ------------------------------------------------------------------------------------


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
