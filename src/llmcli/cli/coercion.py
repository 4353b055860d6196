"""Typer's value conversion without pydantic for the plain values a command line carries.

Typer (0.2x) converts every parameter's value through a pydantic TypeAdapter, and building the
first adapter imports pydantic: 70-90 ms of every command's start, a tenth of a short `generate`.
Nearly every llmcli value is a string, a flag, a whole or decimal number in its plain spelling, or
a path, and for those the answer is known without pydantic. So `install()` gives Typer's
parameters a conversion that answers those itself and hands everything else (a spelling it does not
know: `1e3`, `0x10`, `inf`, a number out of its range, a choice, a custom parser) to Typer's own
adapter, which gives the same result or the same error as before. tests/test_cli_coercion.py holds
the two to the same answers.

Typer's parameter class and its runtime conversion are private names. Where a Typer release lacks
them, `install()` changes nothing and Typer converts as it always did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_WHOLE = re.compile(r"[+-]?[0-9]+\Z")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)\Z")
_ASK_TYPER = object()  # not a plain value: Typer's own conversion decides


def _number(kind: type, value: Any) -> Any:
    if isinstance(value, str):
        if not (_WHOLE if kind is int else _DECIMAL).match(value):
            return _ASK_TYPER
        return kind(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _ASK_TYPER
    if kind is int:
        return value if isinstance(value, int) else _ASK_TYPER
    return float(value)


def _in_range(info: Any, value: Any) -> bool:
    return (info.min is None or value >= info.min) and (info.max is None or value <= info.max)


def plain(annotation: Any, info: Any, value: Any) -> Any:
    """The converted value, or `_ASK_TYPER`; `annotation` is a leaf (str, bool, int, float)."""
    if annotation is str:
        return value if isinstance(value, str) else _ASK_TYPER
    if annotation is bool:
        return value if isinstance(value, bool) else _ASK_TYPER
    if annotation is int or annotation is float:
        number = _number(annotation, value)
        if number is _ASK_TYPER or not _in_range(info, number):
            return _ASK_TYPER
        return number
    return _ASK_TYPER


def _simple(descriptor: Any, routes_to_path: Any) -> bool:
    """Whether a parameter's values can ever be plain: a leaf or a list of leaves, with no parser,
    clamp, file or choice, and a path only where it is a `Path` (Typer's path checks then run on
    it as they would)."""
    info = descriptor.parameter_info
    if info.parser is not None or info.clamp or descriptor.file_annotation is not None:
        return False
    leaf = descriptor.annotation
    if getattr(leaf, "__origin__", None) is list:
        (leaf,) = leaf.__args__
    if leaf is Path:
        return getattr(info, "path_type", None) in (None, Path)
    return leaf in (str, bool, int, float) and not routes_to_path(leaf, info)


def install() -> bool:
    """Give Typer's parameters the plain conversion; False (nothing changed) on a Typer without the
    private names it needs."""
    try:
        from typer import _coercion, _param_types
        from typer.core import _TyperParameter
    except ImportError:
        return False
    needed = (
        hasattr(_TyperParameter, "get_runtime_param")
        and hasattr(_coercion, "RuntimeParam")
        and hasattr(_coercion, "build_runtime_param")
        and hasattr(_param_types, "coerce_cli_path")
        and hasattr(_param_types, "routes_to_path")
    )
    if not needed or getattr(_TyperParameter, "_llmcli_plain", False):
        return needed

    @dataclass(frozen=True)
    class PlainRuntimeParam(_coercion.RuntimeParam):
        descriptor: Any

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            leaf = self.annotation
            many = getattr(leaf, "__origin__", None) is list
            if many:
                (leaf,) = leaf.__args__
                if not isinstance(value, (list, tuple)):
                    return self._typer(value, param, ctx)
                items = list(value)
            else:
                items = [value]
            done = []
            for item in items:
                if leaf is Path:
                    if not isinstance(item, (str, Path)) or item == "":
                        return self._typer(value, param, ctx)
                    path = item if isinstance(item, Path) else Path(item)
                    converted = _param_types.coerce_cli_path(
                        path, self.parameter_info, path_type=Path, param=param, ctx=ctx
                    )
                else:
                    converted = plain(leaf, self.parameter_info, item)
                if converted is _ASK_TYPER:
                    return self._typer(value, param, ctx)
                done.append(converted)
            return done if many else done[0]

        def _typer(self, value: Any, param: Any, ctx: Any) -> Any:
            return _coercion.build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)

    typer_own = _TyperParameter.get_runtime_param

    def get_runtime_param(self):
        if self._runtime_param is None and _simple(self.type_descriptor, _param_types.routes_to_path):
            d = self.type_descriptor
            self._runtime_param = PlainRuntimeParam(
                parameter_info=d.parameter_info, annotation=d.annotation, descriptor=d
            )
        return typer_own(self)

    _TyperParameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
    _TyperParameter._llmcli_plain = True  # type: ignore[attr-defined]
    return True

