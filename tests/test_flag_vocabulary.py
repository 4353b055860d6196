"""One flag vocabulary (cli/vocabulary.py): the table of every command's short flags, built from the
Typer app, holds no short flag with two meanings outside the documented exceptions; old spellings
still work for one release, with a one-line notice."""

from __future__ import annotations

import typer

from llmcli.cli import vocabulary
from llmcli.cli.app import app


def short_flags() -> dict[str, dict[str, list[tuple[str, object]]]]:
    """{short flag: {destination: [(command path, option)]}} of every command, subcommands included."""
    table: dict[str, dict[str, list[tuple[str, object]]]] = {}

    def walk(command, path: str) -> None:
        for param in command.params:
            if param.param_type_name != "option":
                continue
            for name in [*param.opts, *param.secondary_opts]:
                if name.startswith("-") and not name.startswith("--"):
                    table.setdefault(name, {}).setdefault(param.name, []).append((path, param))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return table


def _excepted(path: str, flag: str) -> bool:
    return (path, flag) in vocabulary.EXCEPTIONS or (path.split(" ")[0], flag) in vocabulary.EXCEPTIONS


def test_the_table_has_the_commands_that_run_models():
    table = short_flags()
    assert {path for path, _ in table["-m"]["model"]} >= {"generate", "chat", "batch", "bench", "embed"}
    assert {path for path, _ in table["-c"]["ctx_size"]} >= {"generate", "chat", "batch"}
    assert {path for path, _ in table["-np"]["parallel"]} >= {"batch", "bench"}


def test_a_short_flag_means_one_thing_in_every_command():
    clashes = []
    for flag, by_dest in short_flags().items():
        meaning = vocabulary.MEANINGS.get(flag)
        uses = [(dest, path, param) for dest, found in by_dest.items() for path, param in found]
        if meaning is not None:
            allowed = meaning[1]
            wrong = [(dest, path) for dest, path, _ in uses
                     if dest not in allowed and not _excepted(path, flag)]  # fmt: skip
            if flag == "-o":  # an output FILE: a path wherever it is not an exception
                wrong += [("not a file", path) for dest, path, param in uses if not _excepted(path, flag)
                          and "Path" not in str(param.type_descriptor.annotation)]  # fmt: skip
        else:
            dests = {dest for dest, path, _ in uses if not _excepted(path, flag)}
            wrong = [(dest, path) for dest, path, _ in uses if len(dests) > 1 and not _excepted(path, flag)]
        if wrong:
            clashes.append(f"{flag}: {sorted(set(wrong))}")
    assert not clashes, "short flags with two meanings:\n" + "\n".join(clashes)


def test_the_exceptions_are_few_and_real():
    table = short_flags()
    assert len(vocabulary.EXCEPTIONS) <= 6
    for (path, flag), why in vocabulary.EXCEPTIONS.items():
        paths = {p for found in table.get(flag, {}).values() for p, _ in found}
        assert path in paths, f"{path} {flag} is listed as an exception but takes no {flag} ({why})"


def test_renamed_spellings_name_options_that_exist():
    table = short_flags()
    for (command, old), new in vocabulary.RENAMED.items():
        owners = {p.split(" ")[0] for found in table.get(old, {}).values() for p, _ in found}
        assert command not in owners, f"{command} still declares {old}: the rename would never be seen"
        command_obj = typer.main.get_command(app).commands[command]
        names = {n for c in [command_obj, *getattr(command_obj, "commands", {}).values()]
                 for p in c.params for n in getattr(p, "opts", [])}
        assert new in names, f"{command} {old} is rewritten to {new}, which {command} does not take"


def test_translate_rewrites_after_the_command_only_and_says_so_once():
    said: list[str] = []
    args = ["-q", "logs", "-n", "3", "-q", "x", "-n", "4", "--", "-n"]
    out = vocabulary.translate(args, said.append)
    assert out == ["-q", "logs", "--limit", "3", "-q", "x", "--limit", "4", "--", "-n"]
    assert len(said) == 1 and "-n is now --limit" in said[0]
    assert vocabulary.translate(["generate", "-n", "5"], said.append) == ["generate", "-n", "5"]
    assert len(said) == 1  # generate's -n is the vocabulary's own: nothing to say


def test_a_changed_meaning_is_said_and_the_new_one_taken(fake, tmp_path):
    from helpers import run

    (tmp_path / "p.txt").write_text("first\nsecond\n")
    result = run("batch", str(tmp_path / "p.txt"), "-n", "4", "-np", "1", "--no-log")
    assert result.exit_code == 0, result.output
    assert "-n used to mean sequences at once (now -np)" in result.stderr
    import json

    records = [json.loads(line)["record"] for line in result.stdout.splitlines()]
    assert [r["params"]["max_tokens"] for r in records] == [4, 4]  # -n: tokens per answer, as in generate
