"""`llmcli tools list`: the tools a set of flags would offer the model, with each schema."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from llmcli import render
from llmcli.cli import options as o

tools_app = typer.Typer(
    name="tools",
    help="Tools a model may call (--functions, --tool, --mcp): list them with their schemas.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@tools_app.command("list")
def list_tools(
    functions: o.Functions = None,
    tool: o.ToolName = None,
    mcp: o.Mcp = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document (a list).")] = False,
) -> None:
    """List the tools these flags offer: name, where it comes from, description, JSON schema.

    Example: llmcli tools list --functions my_tools.py --tool current_time
    """
    from llmcli import tools

    toolset = o.build_toolset(functions, tool, mcp)
    try:
        rows = [{"name": t.name, "origin": t.origin, "description": t.description, "parameters": t.parameters}
                for t in toolset.tools.values()]  # fmt: skip
    finally:
        toolset.close()
    if as_json:
        return render.out_json(rows, schema="tools")
    if not rows:
        render.info("no tools: name them with --functions FILE.py, --tool NAME or --mcp 'COMMAND ARGS' "
                    f"(built-in: {', '.join(tools.BUILTINS)})")  # fmt: skip
        return
    blocks = []
    for row in rows:
        head = f"{row['name']}  ({row['origin']})"
        body = json.dumps(row["parameters"], indent=2, ensure_ascii=False)
        blocks.append(
            f"{head}\n  {row['description']}\n" + "\n".join("  " + line for line in body.splitlines())
        )
    render.out_text("\n\n".join(blocks))


def register(app: typer.Typer) -> None:
    app.add_typer(tools_app, name="tools")
