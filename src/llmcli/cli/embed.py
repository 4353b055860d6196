"""`llmcli embed`, `llmcli similar` and `llmcli collections list|rm`: texts to vectors with an
embedding model (llmcli.embed), printed or kept in a collection, and searched by meaning."""

from __future__ import annotations

import glob
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from llmcli import render
from llmcli.errors import LlmcliError, UsageError

if TYPE_CHECKING:
    from llmcli.embed.runs import Vectors

POOLINGS = ("mean", "cls", "last")
MAX_LINE_BYTES = 64 << 20  # one text on stdin longer than this is refused rather than held in memory
ID_HEX = 16  # an argument's or stdin line's id: this many hex digits of its content's SHA-256


def text_id(text: str) -> str:
    """The id of a text given as an argument or a stdin line: its content's hash, so the same text
    has the same id in every run and a second batch adds to a collection instead of replacing."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:ID_HEX]


def _stdin_texts(whole: bool) -> list[tuple[str, str]]:
    """(id, text) from stdin: one text per line, or all of it as one; ids are content hashes. A
    blank line is skipped, as `batch` skips one, and how many were is said in one line."""
    data = sys.stdin.buffer.read()
    if whole:
        try:
            text = data.decode("utf-8")
            return [(text_id(text), text)]
        except UnicodeDecodeError as exc:
            raise UsageError(f"stdin is not valid UTF-8 (byte {exc.start})") from None
    out, blank = [], 0
    for n, line in enumerate(data.splitlines(), 1):
        if len(line) > MAX_LINE_BYTES:
            raise UsageError(f"stdin line {n} is {len(line)} bytes, more than {MAX_LINE_BYTES} a text may be")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"stdin line {n} is not valid UTF-8 (byte {exc.start})") from None
        if not text.strip():
            blank += 1
            continue
        out.append((text_id(text), text))
    if blank and not out:
        raise UsageError("no text to embed: every line on stdin was blank")
    if blank:
        render.info(f"{blank} blank line{'s' if blank != 1 else ''} skipped")
    return out


def expand(patterns: list[str]) -> list[str]:
    """Each pattern's files (a glob expanded, recursively with **), in order, each once."""
    out: dict[str, None] = {}
    for pattern in patterns:
        found = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        found = [f for f in found if not Path(f).is_dir()] if glob.has_magic(pattern) else found
        if not found:
            raise UsageError(f"no file matches {pattern}")
        out.update(dict.fromkeys(found))
    return list(out)


def _file_texts(names: list[str]) -> list[tuple[str, str]]:
    """(path, text) of each file; each file is one text."""
    out = []
    for name in names:
        try:
            out.append((name, Path(name).read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            raise UsageError(f"{name} is not UTF-8 text") from None
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror}") from None
    return out


def gather(texts: list[str], files: list[str], whole: bool, prefix: str = "",
           passages: bool = False) -> list[tuple[str, str]]:  # fmt: skip
    """(id, text) of every text: arguments and stdin lines by their content's hash, files by path
    (`passages`: files are not read here, they are cut into passages as they are stored);
    `prefix` before every id."""
    items = [(text_id(t), t) for t in texts] + ([] if passages else _file_texts(files))
    if not texts and not files:
        if sys.stdin.isatty():
            raise UsageError("no text to embed: give TEXT arguments, -i FILE, or lines on stdin")
        items = _stdin_texts(whole)
    if not items and not (passages and files):
        raise UsageError("no text to embed: stdin was empty")
    for i, (id_, text) in enumerate(items):
        if not text.strip():
            raise UsageError(f"text {id_ if files else i + 1} is empty: there is nothing to embed")
    return [(prefix + id_, text) for id_, text in items]


# embed's own options, named here so the command's signature stays readable
Chunk = Annotated[
    int, typer.Option("--chunk", metavar="N", help="With --collection: tokens per passage of a file.")
]
Overlap = Annotated[
    int, typer.Option("--overlap", metavar="N", help="With --collection: tokens a passage repeats of the one "
                      "before.")
]
Normalize = Annotated[
    bool, typer.Option("--normalize/--no-normalize", help="Scale each vector to length 1 (default on).")
]
Truncate = Annotated[
    bool, typer.Option("--truncate/--no-truncate", help="Cut texts longer than the context (default), or "
                       "refuse them.")
]
Jsonl = Annotated[
    bool, typer.Option("--jsonl", help="One JSON object per line: id, tokens (null for a served model), "
                       "vector.")
]


def embed(
    texts: Annotated[
        list[str] | None, typer.Argument(help="Texts to embed (else -i FILE, else stdin).")
    ] = None,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="An embedding GGUF, or a served model (URL, NAME/MODEL); default: the embed_model setting.",
        ),
    ] = "",
    inputs: Annotated[
        list[str] | None,
        typer.Option("--input", "-i", help="A file (or glob, ** for folders below): embedded whole, or "
                     "with --collection cut into passages; repeatable."),
    ] = None,
    chunk: Chunk = 256,
    overlap: Overlap = 32,
    whole: Annotated[bool, typer.Option("--whole", help="Stdin is one text, not one per line.")] = False,
    collection: Annotated[
        str | None,
        typer.Option("--collection", help="Store the vectors in this collection instead of printing them."),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--store", help="With --collection: keep each text's content beside its vector.")
    ] = False,
    prefix: Annotated[
        str, typer.Option("--prefix", help="Put this before every id (a text's id is its content's hash).")
    ] = "",
    pooling: Annotated[
        str | None, typer.Option("--pooling", help="Override the model's pooling: mean, cls or last.")
    ] = None,
    normalize: Normalize = True,
    truncate: Truncate = True,
    jsonl: Jsonl = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the vectors to FILE.npy (float32, one row per text)."),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option("--threads", "-t", min=1,
                     help="CPU threads, fixed (default: adaptive, up to the physical cores)."),
    ] = None,
    batch_tokens: Annotated[
        int | None,
        typer.Option("--batch-tokens", min=1, help="Tokens per batch (default: the model's context)."),
    ] = None,
) -> None:
    """Turn texts into vectors with an embedding model: one JSON array per text on stdout.

    Example: llmcli embed -m all-minilm.gguf "A man is playing a guitar."
    """
    from llmcli.cli.embed_store import default_model

    model = default_model(model)
    _check(model, pooling, output, collection, jsonl)
    from llmcli.embed.passages import check_sizes

    check_sizes(chunk, overlap, None)
    files = expand(inputs or [])
    items = gather(texts or [], files, whole, prefix, passages=bool(collection))
    from llmcli.embed.runs import Model

    engine = Model(model, pooling=pooling, threads=threads, batch_tokens=batch_tokens, debug=render.debug())
    try:
        if collection:
            from llmcli.cli.embed_store import Into, embed_into

            check_sizes(chunk, overlap, engine.n_ctx or None)
            into = Into(keep=keep, truncate=truncate, normalize=normalize, chunk=chunk, overlap=overlap)
            return embed_into(engine, collection, items, [Path(f) for f in files], into)
        result = engine.embed([t for _, t in items], truncate=truncate, normalize=normalize)
    finally:
        engine.close()
    _write(items, result, output, jsonl)


def _check(model: str, pooling: str | None, output: Path | None, collection: str | None, jsonl: bool) -> None:
    """The flags that can be refused before anything is read or loaded."""
    if not model:
        raise UsageError("embed needs an embedding model: -m FILE.gguf, a served model, or the embed_model "
                         "setting (llmcli config set embed_model FILE.gguf)")  # fmt: skip
    if pooling is not None and pooling not in POOLINGS:
        raise UsageError(f"--pooling is one of {', '.join(POOLINGS)}, not {pooling!r}")
    if collection is not None and (jsonl or output is not None):
        # a collection embeds only what is new or changed: there would be no vectors to print for
        # the rest, and vectors read back from it would not be this run's
        taken = "--jsonl" if jsonl else "-o"
        raise UsageError(f"--collection stores the vectors instead of printing them: it takes no {taken} "
                         f"(llmcli similar {collection} --id ID finds a stored one)")  # fmt: skip
    if output is not None:
        _check_output(output)


def _check_output(output: Path) -> None:
    """-o FILE.npy where it can be written, said before any text is embedded."""
    import os

    if output.suffix != ".npy":
        raise UsageError(f"-o writes a .npy file, not {output.name}")
    folder = output.parent
    if output.is_dir():
        raise UsageError(f"-o {output} is a folder: give a file name ending in .npy")
    if not folder.is_dir():
        raise UsageError(f"-o {output}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (output.exists() and not os.access(output, os.W_OK)):
        raise UsageError(f"-o {output}: cannot write there (permission denied)")


def _write(items: list[tuple[str, str]], result: Vectors, output: Path | None, jsonl: bool) -> None:
    """The vectors: a .npy file (`output`), or one JSON array (`jsonl`: object) per text on stdout."""
    matrix = result.matrix
    if output is not None:
        import numpy as np

        try:
            np.save(output, matrix)
        except OSError as exc:
            raise LlmcliError(f"cannot write {output}: {exc.strerror or exc}") from None
        render.info(f"{len(items)} vectors of {matrix.shape[1]} dimensions written to {output}")
        return
    counts: list[int | None] = [None] * len(items) if result.counts is None else list(result.counts)
    for (id_, _text), row, tokens in zip(items, matrix, counts, strict=True):
        vector = [round(float(x), 7) for x in row]
        if jsonl:
            render.out_json({"id": id_, "tokens": tokens, "vector": vector}, schema="embed/line", line=True)
        else:
            render.out_json(vector, schema="embed/vector", line=True)


def register(app: typer.Typer) -> None:
    from llmcli.cli import embed_store

    app.command("embed", no_args_is_help=False)(embed)
    app.command("similar")(embed_store.similar)
    app.add_typer(embed_store.collections_app, name="collections")
