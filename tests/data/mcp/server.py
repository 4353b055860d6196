"""A tiny MCP server over stdio for the tests, written with the official SDK (FastMCP in mcp 1.x,
renamed MCPServer in 2.x): `add` and `shout` tools, and `die`, which ends the process mid-call."""

import os

try:
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server

server = Server("llmcli-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@server.tool()
def die() -> str:
    """End the server at once."""
    os._exit(3)


if __name__ == "__main__":
    server.run()
