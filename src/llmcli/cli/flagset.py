"""A command's flags declared once as a dataclass of Annotated options and handed to it as one object:
`with_flags` puts the dataclass's fields in the command's signature (so `--help`, the man page and
the completions list them) and calls the command with them gathered (`RunFlags`, `BenchFlags`)."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import fields


def with_flags(flags_class: type, *, keep_defaults: bool = False) -> Callable[[Callable], Callable]:
    """A decorator: the command's `flags` parameter becomes the fields of `flags_class` (a dataclass
    of Annotated flags), in their order, and the command is called with them as one object. Their
    defaults are None (the settings resolve them) unless `keep_defaults` (the dataclass's own)."""
    hints = typing.get_type_hints(flags_class, include_extras=True)
    declared = fields(flags_class)
    names = [f.name for f in declared]

    def decorate(command: Callable) -> Callable:
        own = typing.get_type_hints(command, include_extras=True)  # resolved in the command's module
        signature = inspect.signature(command)
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name != "flags":
                parameters.append(parameter.replace(annotation=own[parameter.name]))
                continue
            parameters += [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                             default=f.default if keep_defaults else None,
                                             annotation=hints[f.name]) for f in declared]  # fmt: skip

        @functools.wraps(command)
        def with_flags(*args, **kwargs):
            flags = flags_class(**{name: kwargs.pop(name) for name in names})
            return command(*args, flags=flags, **kwargs)

        with_flags.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_flags.__annotations__ = {**{k: v for k, v in own.items() if k != "flags"},
                                      **{name: hints[name] for name in names}}  # fmt: skip
        return with_flags

    return decorate
