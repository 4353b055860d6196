"""What a loaded model makes of the run flags, said on stderr (AMX repacking, --think, the flags a
served model ignores), and the tools the flags name. The values themselves are resolved below the
command line, in `llmcli.runspec`."""

from __future__ import annotations

from pathlib import Path


def build_toolset(functions: list[Path] | None, names: list[str] | None, mcp: list[str] | None):
    """The tools of --functions, --tool and --mcp (MCP servers started here; close the set after)."""
    import functools

    from llmcli import tools
    from llmcli.tools.mcp import connect

    servers = [functools.partial(connect, command) for command in mcp or []]
    return tools.build(functions, names, servers)


def warn_amx_repack(repack: bool | None, loaded) -> None:
    """`--repack` typed on a build that hands repacked weights to llama.cpp's AMX kernels: honoured,
    with a warning, since those kernels crash some hosts (virtual machines) at the first batch."""
    if repack is not True or not loaded.engine.can.load_options:
        return
    from llmcli import render
    from llmcli.engine import backend

    if backend.amx_weights():
        render.warn(AMX_REPACK_WARNING)


AMX_REPACK_WARNING = (
    "--repack: this build hands repacked weights to llama.cpp's AMX kernels, which crash at "
    "the first batch of several tokens on some hosts (virtual machines); --no-repack avoids them"
)


def warn_think(think: bool, fmt) -> None:
    """--think/--no-think where the model's template cannot honour it: said in one line."""
    from llmcli import reasoning, render

    if note := reasoning.switch_note(think, fmt):
        render.warn(f"{'--think' if think else '--no-think'}: {note}")


def warn_local_only(**flags) -> None:
    """A served model has no local context, threads or layers: flags for them are said to be ignored."""
    from llmcli import render

    given = ["--" + name.replace("_", "-") for name, value in flags.items() if value is not None]
    if given:
        render.warn(f"{', '.join(given)}: ignored for a served model (its server decides)")
