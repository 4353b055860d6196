"""The root Typer app, its global flags, and the one error boundary that sets exit codes.

Command modules register themselves here. Nothing in this package imports llama_cpp,
huggingface_hub or numpy at module level, so `--help`, `--version` and completion stay fast.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from llmcli import __version__, render
from llmcli.cli import coercion
from llmcli.errors import ExitCode, LlmcliError

coercion.install()  # plain values converted without importing pydantic (cli/coercion.py)

# Click's base exception, as the running Typer raises it (Typer vendors its own copy of Click, so
# `import click` would name another class): found from the public BadParameter (never missing in
# the Typer releases this supports; were it, Click's own box would show, nothing worse).
_ClickException: type[Exception] = next(
    (c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"),
    type("_Unused", (Exception,), {}),
)


class _Boundary(TyperGroup):
    """The one error boundary: domain errors become one stderr line and their exit code, and so do
    Click's own usage errors (a bad flag value, an unknown option or command), which Click would
    print as a three-line box."""

    def make_context(self, info_name, args, parent=None, **extra):
        if parent is None:  # old spellings of short flags, for one release (cli/vocabulary.py)
            from llmcli.cli.vocabulary import translate

            args = translate(list(args))
        try:  # the root's own flags: `llmcli --bogus`
            ctx = super().make_context(info_name, list(args), parent=parent, **extra)
            ctx.meta["llmcli.argv"] = list(args)  # shared by the subcommand's context: for its errors
            return ctx
        except _ClickException as exc:
            _report_click(exc)
            raise typer.Exit(exc.exit_code) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _ClickException as exc:  # a subcommand's flags and arguments
            sub = getattr(ctx, "invoked_subcommand", None)
            _report_click(exc, f"{ctx.command_path} {sub}" if sub else ctx.command_path)
            raise typer.Exit(exc.exit_code) from None
        except LlmcliError as exc:
            report(exc)
            raise typer.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt:
            sys.stderr.write("llmcli: interrupted\n")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except BrokenPipeError:  # before Click's own handler, which would exit 1
            _silence_stdout()
            raise typer.Exit(int(ExitCode.BROKEN_PIPE)) from None


def _silence_stdout() -> None:
    """The reader of stdout went away (`| head`): send what is still buffered to /dev/null, so the
    exit is quiet (no "Exception ignored" from the final flush)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _report_click(exc, command: str | None = None) -> None:
    """A Click usage error as one line naming the command's help: `llmcli: usage error: invalid
    value for '--threads' / '-t': ... (see 'llmcli generate -h')`. `command`: the command being
    parsed, for an error that carries no context of its own."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # `llmcli`, `llmcli models` alone: the help
        exc.show()
        return
    message = " ".join(exc.format_message().split()).rstrip(".")
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else command
    if message.startswith("got unexpected extra argument") and ctx is not None:
        message += _flag_before_extra(ctx, message)
    label = "usage error" if exc.exit_code == ExitCode.USAGE else "error"
    hint = f" (see '{command} -h')" if command and label == "usage error" else ""
    render.err_line(f"llmcli: {label}: {message}{hint}")


# what to say after "--FLAG takes no value" where a value was given to a flag that has a sibling
FLAG_INSTEAD = {"--resume": "--session NAME continues a named session"}


def _flag_before_extra(ctx, message: str) -> str:
    """`; --resume takes no value (...)` where the first extra argument was typed right after a
    flag, as if the flag took it (`chat --resume notes`); else nothing."""
    import re
    import shlex

    found = re.search(r"\(([^()]+)\)$", message)
    if not found:
        return ""
    first = found.group(1).split()[0]
    argv = ctx.meta.get("llmcli.argv", sys.argv[1:])
    flags = {name: p for p in ctx.command.params if getattr(p, "is_flag", False) for name in p.opts}
    for before, token in zip(argv, argv[1:], strict=False):
        if token == first and before in flags and not getattr(flags[before], "count", False):
            instead = FLAG_INSTEAD.get(flags[before].opts[0])
            return f"; {before} takes no value" + (f" ({instead})" if instead else "")
    positional = {p.name for p in ctx.command.params if p.param_type_name == "argument"}
    prompt = ctx.params.get("prompt") if "prompt" in positional else None
    if isinstance(prompt, str) and prompt:  # `generate Tell me a joke`: the words after the first
        words = " ".join([prompt, *found.group(1).split()])
        quoted = shlex.quote(words) if re.search(r'["$`\\!]', words) else f'"{words}"'
        return f"; the prompt is one argument: quote it ({ctx.command_path} {quoted})"
    return ""


def report(exc: LlmcliError) -> None:
    if render.debug():
        import traceback

        traceback.print_exc()
    render.err_line(exc.one_line())


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"llmcli {__version__}\n")
        raise typer.Exit()


def root(
    version: Annotated[
        bool | None,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
    debug: Annotated[
        bool, typer.Option("--debug", envvar="LLMCLI_DEBUG", help="Show tracebacks and llama.cpp logs.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Silence everything on stderr but errors and warnings.")
    ] = False,
    color: Annotated[
        bool | None,
        typer.Option(
            "--color/--no-color",
            help="Colour on stderr (default: auto; honours NO_COLOR and FORCE_COLOR).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run local language models: download GGUF models, chat, generate, benchmark.

    Example: llmcli generate "Write a haiku about the sea"
    """
    if color is None:
        from llmcli import settings

        color = settings.color_preference()  # LLMCLI_COLOR / config `color`; None = auto; never raises
    render.configure(quiet=quiet, color=color, debug=debug)
    from llmcli import environment
    from llmcli.render.progress import StderrReporter

    environment.configure(reporter=StderrReporter())  # the lower layers report through it, on stderr


# Every command, and the module that registers it (`register(app)`) where that is not its name.
COMMANDS = ("generate", "pull", "models", "chat", "bench", "kv", "logs", "tools", "config", "doctor", "embed",
            "batch", "rerank", "ask", "completion")  # fmt: skip
REGISTERED_BY = {"similar": "embed", "collections": "embed", "__complete": "completion"}


def new_app(commands: tuple[str, ...] = COMMANDS) -> typer.Typer:
    """The root app with the commands of `commands` (modules of llmcli.cli) registered."""
    made = typer.Typer(
        cls=_Boundary,
        name="llmcli",
        help="Run local language models: download GGUF models, chat, generate, benchmark.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
        rich_markup_mode=None,
    )
    made.callback()(root)
    for name in commands:
        if name == "generate":
            from llmcli.cli import generate

            made.command("generate", no_args_is_help=False)(generate.generate)
            continue
        module = __import__(f"llmcli.cli.{name}", fromlist=["register"])
        module.register(made)
    return made


_whole: list[typer.Typer] = []


def whole_app() -> typer.Typer:
    """The app with every command (built once)."""
    if not _whole:
        _whole.append(new_app())
    return _whole[0]


def __getattr__(name: str):
    if name == "app":  # `from llmcli.cli.app import app`: the whole app
        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fast_complete(argv: list[str]) -> int:
    """`llmcli __complete [--] PATH PARAM [WORD]` without Typer's parsing of the command line.

    Same answers as the hidden command (cli/completion.py), about 150 ms sooner per Tab (Typer's
    value conversion imports pydantic); `main()` calls it when argv[1] is `__complete`.
    """
    args = argv[1:] if argv[:1] == ["--"] else argv
    if len(args) not in (2, 3):
        return int(ExitCode.USAGE)
    from llmcli.cli.completion import print_candidates

    print_candidates(typer.main.get_command(whole_app()), *args)
    return 0


def named(argv: list[str]) -> typer.Typer:
    """The app with only the command that `argv` names, where it names one.

    Typer builds the whole command tree (every command's parameters, from its signature) before it
    parses a word, and registering every command imports every command's module: 60-100 ms for
    llmcli's 37 commands, where a command line needs one of them. The root's own options are all
    flags, so the first word that is not one names the command. Help, a word that names no
    command, and no word at all get the whole app, and with it Click's list of commands and its
    "No such command" error."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    if word is None or "--" in argv[: argv.index(word)]:
        return whole_app()
    module = REGISTERED_BY.get(word, word)
    if module not in COMMANDS:
        return whole_app()
    return new_app((module,))


def main() -> None:
    """Console-script entry point: run the app and map exceptions to one line and an exit code."""
    if sys.argv[1:2] == ["__complete"]:  # Tab in a shell: skip Typer's parsing (cli/completion.py)
        sys.exit(fast_complete(sys.argv[2:]))
    _install_sigterm()
    try:
        named(sys.argv[1:])(prog_name="llmcli")
    except LlmcliError as exc:  # raised outside a command (e.g. by a completion callback)
        report(exc)
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        sys.stderr.write("llmcli: interrupted\n")
        sys.exit(int(ExitCode.INTERRUPTED))
    except BrokenPipeError:
        _silence_stdout()
        sys.exit(int(ExitCode.BROKEN_PIPE))
    finally:
        _quiet_teardown()


def _quiet_teardown() -> None:
    """The command is over and its exit code decided: a Ctrl-C (or SIGTERM) while the interpreter
    frees the models (llama.cpp's free calls run in finalizers) would only print a traceback from
    a finalizer, so from here on SIGINT is ignored and SIGTERM ends the process at once."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _install_sigterm() -> None:
    """SIGTERM unwinds like an error (finally blocks run, workers stop), then exits 143."""
    import signal

    from llmcli.errors import TerminatedError

    def handler(signum, frame):
        raise TerminatedError("received SIGTERM")

    signal.signal(signal.SIGTERM, handler)
