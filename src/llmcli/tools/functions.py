"""`--functions FILE.py`: every top-level public function of the file (the user's own code, run with
the user's rights) as a tool: its name, its docstring's first paragraph, and its type-annotated
parameters as the schema (`int` integer, `float` number, `str` string, `bool` boolean, `list[...]`
array, `dict` object, `Literal[...]` enum; a parameter with a default is optional)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmcli.tools.toolset import Tool, ToolError


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
