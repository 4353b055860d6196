"""One flag vocabulary: a short flag means the same in every command.

The letters follow llama.cpp where it has them: `-m` model, `-n` tokens to generate, `-c` context
size, `-t` threads, `-s` seed, `-b` batch size, `-np` sequences (or requests) at once, `-f` a
prompt or input file, `-o` an output file, `-a` an attachment. A command's own option that wanted a
letter a run flag owns has another letter or none. `tests/test_flag_vocabulary.py` builds the table
of every command's options from the Typer app and fails on a short flag with two meanings outside
`EXCEPTIONS`.

Spellings that changed keep working for one release: `translate` rewrites them before Click parses
the command line and says so in one line on stderr (`RENAMED`); a letter that now means something
else in its command (`MEANING_CHANGED`) is taken with its new meaning, and the line says so.
"""

from __future__ import annotations

import sys

# A short flag's one meaning, and the names its option has in the commands that take it (Click's
# destination: bench's `-n` is llama-bench's --n-gen, tokens to generate as generate's --max-tokens).
MEANINGS: dict[str, tuple[str, frozenset[str]]] = {
    "-m": ("the model", frozenset({"model"})),
    "-n": ("tokens to generate", frozenset({"max_tokens", "n_gen"})),
    "-c": ("the context size", frozenset({"ctx_size"})),
    "-t": ("CPU threads", frozenset({"threads"})),
    "-s": ("the seed", frozenset({"seed"})),
    "-b": ("the batch size", frozenset({"batch_size"})),
    "-np": ("sequences or requests at once", frozenset({"parallel"})),
    "-f": ("a prompt or input file", frozenset({"file", "prompt_file"})),
    "-o": ("an output file", frozenset({"output", "out"})),
    "-a": ("an attachment", frozenset({"attach"})),
}

# (command path, short flag): why it may mean something else there. Keep this short.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("bench", "-o"): "llama-bench's -o: the output format (md, csv, json, jsonl, sql)",
    ("bench compare", "-o"): "as bench's -o: the output format",
    ("bench", "-p"): "llama-bench's -p: prompt sizes of the pp tests",
    ("bench", "-d"): "llama-bench's -d: tokens already in the KV cache",
    ("bench", "-r"): "llama-bench's -r: repetitions",
    ("logs", "-q"): "`llmcli -q` (before any command) is --quiet; after `logs`, the query (simonw/llm's)",
}

# (command, old short flag) -> the spelling that replaces it; works for one release, with a notice.
RENAMED: dict[tuple[str, str], str] = {
    ("embed", "-c"): "--collection",
    ("similar", "-n"): "--limit",
    ("logs", "-n"): "--limit",
    ("bench", "-c"): "--concurrency",
    ("pull", "-f"): "--force",
    ("models", "-a"): "--all",
    ("models", "-d"): "--delete",
}

# (command, short flag) -> what it meant before this release; taken with its new meaning.
MEANING_CHANGED: dict[tuple[str, str], str] = {
    ("batch", "-n"): "sequences at once (now -np); -n is tokens per answer, as in generate",
}

# The root's own options that take a value (so that value is not read as the command's name): none.
_ROOT_VALUED: set[str] = set()


def command_of(args: list[str]) -> tuple[int, str | None]:
    """The index and name of the command in `args` (the root's own flags skipped)."""
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return i, None
        if not token.startswith("-"):
            return i, token
        i += 2 if token in _ROOT_VALUED else 1
    return i, None


def translate(args: list[str], notice=None) -> list[str]:
    """`args` with the old spellings of `RENAMED` replaced (after the command's name, before a
    `--`), each said once through `notice` (default: one line on stderr)."""
    say = notice or _stderr
    start, command = command_of(args)
    if command is None:
        return args
    out = list(args)
    said: set[str] = set()
    for i in range(start + 1, len(out)):
        token = out[i]
        if token == "--":
            break
        key = (command, token)
        if key in RENAMED:
            out[i] = RENAMED[key]
            if token not in said:
                said.add(token)
                say(f"llmcli {command}: {token} is now {RENAMED[key]}; {token} still works in this release "
                    "and goes in the next (a short flag means one thing in every command)")
        elif key in MEANING_CHANGED and token not in said:
            said.add(token)
            say(f"llmcli {command}: {token} used to mean {MEANING_CHANGED[key]}")
    return out


def _stderr(line: str) -> None:
    sys.stderr.write(f"llmcli: note: {line.removeprefix('llmcli ')}\n")
