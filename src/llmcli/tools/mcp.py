"""The tools of an MCP server started over stdio (`--mcp 'COMMAND ARGS'`), through the official
`mcp` SDK (the optional extra `llmcli[mcp]`).

The SDK is asynchronous; llmcli is not. Each server gets a thread running its own event loop, which
holds the session open until the run ends (`close`); a call is sent to that loop and waited for.
A server that does not start, or dies, is one clear line (at start) or an error result the model
reads (mid-call)."""

from __future__ import annotations

import asyncio
import shlex
import threading
from collections.abc import Callable
from typing import Any

from llmcli.tools.toolset import Tool, ToolError

START_TIMEOUT = 30.0  # seconds for the server to start and list its tools


def connect(command: str) -> tuple[list[Tool], Callable[[], None]]:
    """Start the server `command` (a shell-like command line, run without a shell), list its tools;
    returns them and the function that stops the server."""
    try:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
    except ImportError:
        raise ToolError("--mcp needs the mcp package", hint="pip install 'llmcli[mcp]'") from None
    argv = shlex.split(command)
    if not argv:
        raise ToolError("--mcp needs a command line, e.g. --mcp 'python server.py'")
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        state["stop"] = stop
        try:
            with open(_devnull(), "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        listed = await session.list_tools()
                        state["session"], state["tools"] = session, listed.tools
                        ready.set()
                        await stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller as one line
            state.setdefault("error", exc)
        finally:
            ready.set()

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), name="mcp", daemon=True)
    thread.start()
    if not ready.wait(START_TIMEOUT) or "session" not in state:
        _stop(loop, state, thread)
        exc = state.get("error")
        why = _reason(exc) if exc is not None else f"no answer in {START_TIMEOUT:g} s"
        raise ToolError(f"the MCP server {command!r} did not start: {why}")
    session = state["session"]

    def make(tool: Any) -> Tool:
        def call(arguments: dict) -> Any:
            if not thread.is_alive():
                raise RuntimeError(f"the MCP server {command!r} is no longer running")
            future = asyncio.run_coroutine_threadsafe(session.call_tool(tool.name, arguments), loop)
            try:
                result = future.result()
            except BaseException as exc:
                raise RuntimeError(f"the MCP server {command!r} failed: {_reason(exc)}") from None
            text = "\n".join(getattr(part, "text", "") or str(part) for part in (result.content or []))
            if getattr(result, "is_error", None) or getattr(result, "isError", None):
                raise RuntimeError(text or "the tool reported an error")
            return text

        schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None)  # mcp 2.x, 1.x
        schema = dict(schema or {"type": "object", "properties": {}})
        return Tool(tool.name, tool.description or "", schema, call, origin=f"mcp: {command}")

    return [make(t) for t in state["tools"]], lambda: _stop(loop, state, thread)


def _stop(loop: asyncio.AbstractEventLoop, state: dict, thread: threading.Thread) -> None:
    stop = state.get("stop")
    if stop is not None and thread.is_alive():
        loop.call_soon_threadsafe(stop.set)
    thread.join(10)


def _devnull() -> str:
    import os

    return os.devnull


def _reason(exc: BaseException) -> str:
    """One line for an exception, through the exception groups anyio raises."""
    while getattr(exc, "exceptions", None):  # an exception group (anyio's task groups)
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
