"""What a tool is, whichever source it comes from: a `Tool` (a name, a description, a JSON schema
of its arguments, and how to run it), the `Outcome` of one call, and the `Toolset` of one run,
which closes what it started (MCP servers) when done."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmcli.errors import UsageError


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
