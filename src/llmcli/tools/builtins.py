"""`--tool NAME`: the built-in tools, safe by construction: they read no files, start nothing and
reach no network."""

from __future__ import annotations

import json
import math
import typing
from collections.abc import Callable

from llmcli.tools.functions import from_function
from llmcli.tools.toolset import Tool, ToolError


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
