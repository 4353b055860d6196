"""The hidden `llmcli __complete` helper that the shell completion scripts call.

The completion scripts in completions/ are generated from the Typer app by
scripts/gen_artifacts.py. Commands, options and fixed choices are written into them; values
that depend on this machine (model names, aliases) come from `llmcli __complete`, which runs
the parameter's own completion function and loads neither llama.cpp nor huggingface_hub.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from llmcli import render


def register(app: typer.Typer) -> None:
    app.command("__complete", hidden=True)(complete)


# -- completion ------------------------------------------------------------------------------

# Parameters that name a model: after "REF:" they complete the quantizations.
MODEL_PARAMS = ("model", "ref")
# Parameters whose completion list depends only on the code: the generator writes it into the
# scripts instead of calling back (command path, parameter name).
STATIC_COMPLETIONS = {("config set", "key")}
# Free-text parameters that also take a file name.
FILE_PARAMS = ("json_schema",)
# Options declared as plain strings but checked against a fixed list in the command body:
# (command path, parameter) -> "module:NAME" of that list. A Literal/Enum type makes an entry moot.
CHOICES_FROM = {("bench", "output"): "llmcli.render.bench:FORMATS"}


def complete(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument()],
    param: Annotated[str, typer.Argument()],
    incomplete: Annotated[str, typer.Argument()] = "",
) -> None:
    """Print completion candidates for one parameter, one a line (for the scripts in completions/).

    Example: llmcli __complete generate model gem
    """
    print_candidates(ctx.find_root().command, path, param, incomplete)


def print_candidates(root, path: str, param: str, incomplete: str = "") -> None:
    try:
        values = complete_values(root, path, param, incomplete)
    except Exception:  # completion must never print an error into the user's prompt line
        if render.debug():
            raise
        return
    sys.stdout.write("".join(f"{value}\n" for value in values))


def complete_values(root, path: str, param_name: str, incomplete: str) -> list[str]:
    """Candidates for `param_name` of the command at `path` ("models rm") under the root command."""
    command = root
    for name in path.split():
        command = command.commands[name]
    param = next(p for p in command.params if p.name == param_name)
    return complete_values_of(command, param, incomplete)


def complete_values_of(command, param, incomplete: str) -> list[str]:
    """A parameter's own completion function; model references also complete quantizations after
    `REF:`, and local model names when the parameter has no function of its own."""
    if param.name in MODEL_PARAMS and ":" in incomplete:
        return quant_candidates(incomplete)
    if not has_own_completion(param):
        if param.name in MODEL_PARAMS:
            from llmcli.cli.options import _complete_models

            return _complete_models(incomplete)
        return []
    ctx = typer.Context(command, info_name=command.name, resilient_parsing=True)
    return [item.value for item in param.shell_complete(ctx, incomplete)]


def has_own_completion(param) -> bool:
    """Whether a parameter was given a completion function (Typer's `autocompletion=`).

    Click keeps it in the private `Parameter._custom_shell_complete` and has no public accessor
    (`Parameter.shell_complete` falls back to the type's completion, which cannot be told apart);
    this is the one place llmcli reads it, and a Click without it counts as "none"."""
    return getattr(param, "_custom_shell_complete", None) is not None


def quant_candidates(incomplete: str) -> list[str]:
    """`org/repo:q4` -> org/repo:Q4_K_M, org/repo:Q4_K_S, ... in order of preference."""
    from llmcli.hub.quants import PREFERENCE

    repo, _, quant = incomplete.rpartition(":")
    return [f"{repo}:{label}" for label in PREFERENCE if label.lower().startswith(quant.lower())]
