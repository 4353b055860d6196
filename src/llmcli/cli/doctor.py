"""`llmcli doctor`: check this installation (the checks themselves are in `llmcli.doctor`)."""

from __future__ import annotations

from typing import Annotated

import typer

from llmcli import render


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


# -- doctor ----------------------------------------------------------------------------------


def doctor(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document (for bug reports).")
    ] = False,
    offline: Annotated[bool, typer.Option("--offline", help="Do not check whether the hub answers.")] = False,
) -> None:
    """Check this installation: versions, compute backend and GPU, directories, hub, default model.

    Exits 1 when something is broken (llama.cpp does not load, the config file is invalid).

    Example: llmcli doctor --json > doctor.json
    """
    from llmcli import doctor as checks
    from llmcli.errors import ExitCode
    from llmcli.render.doctor import format_text

    report = checks.collect(network=not offline)
    if as_json:
        render.out_json(report, schema="doctor")
    else:
        render.out_text(format_text(report))
    if any(problem["level"] == "error" for problem in report["problems"]):
        raise typer.Exit(int(ExitCode.ERROR))
