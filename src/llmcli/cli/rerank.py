"""`llmcli rerank "query" FILE...`: score files against a query with a reranking model (a
cross-encoder: a local GGUF under llama.cpp's rank pooling, or a served `/v1/rerank`), for
pipelines: one line per file, best first, or one JSON document."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from llmcli import render
from llmcli.errors import UsageError


def read_documents(files: list[str]) -> list[tuple[str, str]]:
    """(name, text) of each file (`-`: stdin, once); one line refuses a file that cannot be read."""
    out = []
    for name in files:
        try:
            data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
        except IsADirectoryError:
            raise UsageError(f"{name} is a folder: give files (a shell glob expands them)") from None
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from None
        try:
            out.append((name, data.decode("utf-8")))
        except UnicodeDecodeError as exc:
            raise UsageError(f"{name} is not UTF-8 text (byte {exc.start})") from None
    return out


def rerank(
    query: Annotated[str, typer.Argument(help="What the files are scored against.")],
    files: Annotated[list[str], typer.Argument(help="Text files to score (- reads stdin as one).")],
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            envvar="LLMCLI_RERANK_MODEL",
            show_envvar=True,
            help="A reranking GGUF (a cross-encoder), or a served model "
            "(URL, NAME/MODEL) of llama-server --rerank; default: the rerank_model setting.",
        ),
    ] = "",  # fmt: skip
    json_out: Annotated[
        bool,
        typer.Option(
            "--json", help="One JSON document: the model, the query, the files with their scores, best first."
        ),
    ] = False,  # fmt: skip
    threads: Annotated[
        int | None, typer.Option("--threads", "-t", min=1, help="CPU threads (default: the physical cores).")
    ] = None,
) -> None:
    """Score files by how well they answer a query: one line per file, `SCORE<TAB>FILE`, best first.

    Example: llmcli rerank -m bge-reranker.gguf "how do I pull a model?" docs/*.md
    """
    from llmcli import loader, settings

    model = str(settings.resolve("rerank_model", model or None) or "")
    if not model:
        raise UsageError("rerank needs a reranking model: -m FILE.gguf, a served model, or the rerank_model "
                         "setting (llmcli config set rerank_model FILE.gguf)")  # fmt: skip
    if not query.strip():
        raise UsageError("the query is empty: there is nothing to score the files against")
    if files.count("-") > 1:
        raise UsageError("- (stdin) can be given once")
    documents = read_documents(files)
    reranker = loader.load_reranker(model, threads=threads, debug=render.debug())
    try:
        scores = reranker.rerank(query, [text for _, text in documents])
        cut = reranker.cut
    finally:
        reranker.close()
    if cut:
        render.info(f"{cut} file{'s' if cut != 1 else ''} cut to the reranker's context: scored on "
                    "their beginning only")  # fmt: skip
    ranked = sorted(zip(documents, scores, strict=True), key=lambda pair: -pair[1])
    if json_out:
        results = [{"file": name, "score": score} for (name, _), score in ranked]
        return render.out_json({"model": reranker.ref, "query": query, "results": results},
                               schema="rerank/ranking")  # fmt: skip
    for (name, _), score in ranked:
        render.out_text(f"{score:.6f}\t{name}\n")


def register(app: typer.Typer) -> None:
    app.command("rerank")(rerank)
