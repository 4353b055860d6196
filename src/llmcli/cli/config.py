"""`llmcli config ...`: show and change the configuration file."""

from __future__ import annotations

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
            },
            schema="config",
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
