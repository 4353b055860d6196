"""`llmcli ask NAME "question"`: an answer from a collection's passages, citing them ([1], [2]),
with the sources on stderr. It is `generate --from NAME` (cli/generate_run.py, the one request
path) with the question as the prompt; the retrieval flags are declared here once for both."""

from __future__ import annotations

from typing import Annotated

import typer

from llmcli.cli import options as o
from llmcli.request.grounding import MIN_SCORE, PASSAGES, Ask

From = Annotated[
    str | None,
    typer.Option("--from", metavar="NAME", show_default=False,
                 help="Answer from collection NAME's passages (llmcli embed -i FILE --collection NAME), "
                 "citing them; the sources go to stderr."),
]  # fmt: skip
Search = Annotated[
    str,
    typer.Option("--search", metavar="HOW",
                 help="How passages are found: hybrid (words and meaning, fused by rank), vector or text."),
]  # fmt: skip
Passages = Annotated[
    int, typer.Option("--passages", min=1, metavar="N", help="At most N passages in the prompt.")
]
Rerank = Annotated[
    str | None,
    typer.Option("--rerank", metavar="MODEL", show_default=False,
                 help="Order the passages found by a reranking model (a GGUF, or a served one)."),
]  # fmt: skip
MinScore = Annotated[
    float,
    typer.Option("--min-score", metavar="X",
                 help="The cosine a passage needs to count as found; below it, nothing is answered."),
]  # fmt: skip
AlwaysAnswer = Annotated[
    bool,
    typer.Option("--always-answer", help="Answer even when no passage is found (else: said, not answered)."),
]
EmbedModel = Annotated[
    str,
    typer.Option("--embed-model", metavar="MODEL",
                 help="The embedding model for the question (default: the collection's own)."),
]  # fmt: skip


def settings(name: str | None, search: str, passages: int, rerank: str | None, min_score: float,
             always_answer: bool, embed_model: str) -> Ask | None:  # fmt: skip
    """The --from flags as one `Ask` (None without --from); a retrieval flag without it is refused."""
    if name is None:
        given = [f for f, on in (("--rerank", rerank is not None), ("--always-answer", always_answer),
                                 ("--embed-model", bool(embed_model)), ("--search", search != "hybrid"),
                                 ("--passages", passages != PASSAGES)) if on]  # fmt: skip
        if given:
            from llmcli.errors import UsageError

            raise UsageError(f"{given[0]} applies to an answer from passages: add --from NAME")
        return None
    return Ask(name, search, passages, rerank, min_score, always_answer, embed_model)


@o.run_flags
def ask(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The collection to answer from.", metavar="NAME")],
    question: Annotated[str, typer.Argument(help="The question.")],
    model: o.Model = None,
    system: Annotated[
        str | None,
        typer.Option("--system", help="System prompt.", envvar="LLMCLI_SYSTEM", show_default=False),
    ] = None,
    flags: o.RunFlags = None,  # type: ignore[assignment]
    search: Search = "hybrid",
    passages: Passages = PASSAGES,
    rerank: Rerank = None,
    min_score: MinScore = MIN_SCORE,
    always_answer: AlwaysAnswer = False,
    embed_model: EmbedModel = "",
    stats: Annotated[
        bool, typer.Option("--stats", help="Print speed figures on stderr after the text.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document (with its passages) instead of the text.")
    ] = False,
    timeout: o.Timeout = None,
    offline: o.Offline = False,
    force: o.Force = False,
) -> None:
    """Answer a question from a collection's passages, citing them: [1] maps to path:lines.

    Example: llmcli ask docs "How do I keep the model loaded?" -m smollm2-135m
    """
    from llmcli.cli.generate_run import Generate, run

    how = settings(name, search, passages, rerank, min_score, always_answer, embed_model)
    run(ctx, flags, Generate(question, None, model, system, False, False, True, stats, as_json, None, False,
                             timeout, offline, force, [], None, ask=how))  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("ask")(ask)
