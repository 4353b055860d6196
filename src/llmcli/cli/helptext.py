"""`--help` that shows a command's arguments as a user types them: `RESULTS...`, `[PROMPT]`, never
Typer's `{results}...` and `<list[Path]>`. A command asks for it with `cls=ReadableArgs`."""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand


def _shown(param: Any) -> str:
    """The argument's name as help shows it: its metavar (else its name in capitals), "..." after
    one that takes several."""
    name = param.metavar or (param.name or "").upper()
    return name + ("..." if param.nargs != 1 else "")


class ReadableArgs(TyperCommand):
    # Typer carries its own copy of click: its types are not the `click` package's, hence Any
    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                pieces.append(_shown(param) if param.required else f"[{_shown(param)}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((_shown(param), record[1]))  # the name without Typer's <type>
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
