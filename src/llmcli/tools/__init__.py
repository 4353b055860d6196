"""Tools a model may call, and the calls it writes. This package owns where tools come from (a
functions file, `functions.py`; the built-ins, `builtins.py`; an MCP server over stdio, `mcp.py`),
what a tool is (`toolset.py`), running one call with a timeout (`execute.py`), and the calls in a
model's own format: recognised from its chat template and read out of its streamed text
(`calls.py`), and the grammar that constrains a call's JSON while it is written (`grammar.py`).
Its public face is `build` (the tool set of a run's flags) and the names below; the engines read
calls with `calls.Parser`. It sits below the engines and imports only the core; the loop that runs
the calls of one answer and sends the results back is `llmcli.request.tool_loop`, a layer above."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from llmcli.tools.builtins import BUILTINS, builtin
from llmcli.tools.execute import TIMEOUT, check_arguments, run
from llmcli.tools.functions import from_file, from_function
from llmcli.tools.toolset import Outcome, Tool, ToolError, Toolset

__all__ = ["BUILTINS", "TIMEOUT", "Outcome", "Tool", "ToolError", "Toolset", "build", "builtin",
           "check_arguments", "from_file", "from_function", "run"]  # fmt: skip

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
