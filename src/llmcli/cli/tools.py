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
    """List the tools these flags offer: name, where it comes from, description, JSON schema. With
    no flags, the built-in tools (offer one with --tool NAME).

    Example: llmcli tools list --functions my_tools.py --tool current_time
    """
    from llmcli import tools

    flagged = bool(functions or tool or mcp)
    toolset = o.build_toolset(functions, tool if flagged else list(tools.BUILTINS), mcp)
    try:
        rows = [{"name": t.name, "origin": t.origin, "description": t.description, "parameters": t.parameters}
                for t in toolset.tools.values()]  # fmt: skip
    finally:
        toolset.close()
    if as_json:
        return render.out_json(rows, schema="tools")
    blocks = []
    for row in rows:
        head = f"{row['name']}  ({row['origin']})"
        body = json.dumps(row["parameters"], indent=2, ensure_ascii=False)
        blocks.append(
            f"{head}\n  {row['description']}\n" + "\n".join("  " + line for line in body.splitlines())
        )
    if blocks:
        render.out_text("\n\n".join(blocks) + "\n")
    if not flagged:
        render.info("these are the built-in tools: offer one with --tool NAME; your own with "
                    "--functions FILE.py or --mcp 'COMMAND ARGS'")  # fmt: skip
    elif not rows:
        render.info("no tools: the flags given offer none")


def register(app: typer.Typer) -> None:
    app.add_typer(tools_app, name="tools")
