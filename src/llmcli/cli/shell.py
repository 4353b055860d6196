"""How llmcli fits into the shell: `llmcli config ...`, `llmcli doctor`, and the hidden completion helper.

The completion scripts in completions/ are generated from the Typer app by
scripts/gen_artifacts.py. Commands, options and fixed choices are written into them; values
that depend on this machine (model names, aliases) come from `llmcli __complete`, which runs
the parameter's own completion function and loads neither llama.cpp nor huggingface_hub.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from llmcli import render

config_app = typer.Typer(
    name="config",
    help="Show and change the configuration file (flag > LLMCLI_* variable > file > default).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
    app.command("doctor")(doctor)
    app.command("__complete", hidden=True)(complete)


# -- config ----------------------------------------------------------------------------------


def _complete_keys(incomplete: str) -> list[str]:
    from llmcli.settings import SETTINGS

    return [key for key in SETTINGS if key.startswith(incomplete)]


def _complete_keys_in_file(incomplete: str) -> list[str]:
    """The keys set in the config file (valid or not), for `config unset`."""
    import re

    from llmcli import paths

    try:
        text = paths.config_file().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    keys = re.findall(r"^\s*([A-Za-z0-9_-]+)\s*=", text, re.MULTILINE)
    return [key for key in dict.fromkeys(keys) if key.startswith(incomplete)]


Json = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]


@config_app.command("show")
def config_show(as_json: Json = False) -> None:
    """Print every setting's effective value and where it came from (default, file or environment).

    Example: llmcli config show --json | jq .settings.ctx_size
    """
    from llmcli import paths, settings

    values = settings.effective()
    path = paths.config_file()
    if as_json:
        render.out_json(
            {
                "config_file": str(path),
                "config_file_exists": path.exists(),
                "settings": {
                    key: {
                        "value": value,
                        "source": source,
                        "env": settings.SETTINGS[key].env,
                        "default": settings.SETTINGS[key].default,
                        "help": settings.SETTINGS[key].help,
                    }
                    for key, (value, source) in values.items()
                },
            }
        )
        return
    render.out_text(format_show(values, str(path), path.exists()))


def format_show(values: dict[str, tuple[Any, str]], path: str, exists: bool) -> str:
    """`key = value  # source` lines: valid TOML, so they can be pasted into the config file."""
    import tomlkit

    from llmcli.settings import SETTINGS

    origins = {"default": "default", "config": "config file", "env": "$"}
    lines = [
        (
            f"{key} = {tomlkit.item(value).as_string()}",
            origins[source] + (SETTINGS[key].env if source == "env" else ""),
        )
        for key, (value, source) in values.items()
    ]
    width = max(len(assignment) for assignment, _ in lines)
    head = f"# {path}{'' if exists else ' (not present)'}\n"
    return head + "".join(f"{assignment:<{width}}  # {origin}\n" for assignment, origin in lines)


@config_app.command("path")
def config_path() -> None:
    """Print the configuration file's path (LLMCLI_CONFIG, else the user config directory).

    Example: $EDITOR "$(llmcli config path)"
    """
    from llmcli import paths

    render.out_text(f"{paths.config_file()}\n")


# Unknown options pass through as arguments, so that `config set gpu_layers -1` needs no `--`.
@config_app.command("set", context_settings={"ignore_unknown_options": True})
def config_set(
    key: Annotated[
        str,
        typer.Argument(
            help="The setting, as `config show` names it.",
            metavar="KEY",
            autocompletion=_complete_keys,
            show_default=False,
        ),
    ],
    value: Annotated[str, typer.Argument(help="Its new value.", metavar="VALUE", show_default=False)],
) -> None:
    """Set a value in the configuration file, keeping its comments; the file is replaced atomically.

    Example: llmcli config set ctx_size 8192
    """
    import tomlkit

    from llmcli import paths, settings

    stored = settings.set_value(key, value)
    render.info(f"{key} = {tomlkit.item(stored).as_string()} in {paths.config_file()}")


@config_app.command("unset")
def config_unset(
    key: Annotated[
        str,
        typer.Argument(
            help="The setting to remove from the file.",
            metavar="KEY",
            autocompletion=_complete_keys_in_file,
            show_default=False,
        ),
    ],
) -> None:
    """Remove a setting from the configuration file, so that its default applies again.

    Example: llmcli config unset temperature
    """
    from llmcli import paths, settings

    if settings.unset_value(key):
        render.info(f"removed {key} from {paths.config_file()}")
    else:
        render.info(f"{key} is not set in {paths.config_file()}")


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

    report = checks.collect(network=not offline)
    if as_json:
        render.out_json(report)
    else:
        render.out_text(checks.format_text(report))
    if any(problem["level"] == "error" for problem in report["problems"]):
        raise typer.Exit(int(ExitCode.ERROR))


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


def fast_complete(argv: list[str]) -> int:
    """`llmcli __complete [--] PATH PARAM [WORD]` without Typer's parsing of the command line.

    Same answers as the hidden command, about 150 ms sooner per Tab (Typer's value conversion
    imports pydantic); `app.main()` may call it when argv[1] is `__complete`.
    """
    args = argv[1:] if argv[:1] == ["--"] else argv
    if len(args) not in (2, 3):
        from llmcli.errors import ExitCode

        return int(ExitCode.USAGE)
    import typer

    from llmcli.cli.app import app

    print_candidates(typer.main.get_command(app), *args)
    return 0


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
