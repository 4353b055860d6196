"""Collections from the command line: `embed --collection NAME` (store), `similar NAME TEXT`
(search), `collections list|rm` (llmcli.embed.collections). A collection knows its model by what
it is (llmcli.embed.identity), not where it is: a copy of the GGUF elsewhere searches it too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from llmcli import render
from llmcli.errors import UsageError

if TYPE_CHECKING:
    from llmcli.embed.runs import Model

collections_app = typer.Typer(
    name="collections",
    help="Collections of embeddings (llmcli embed --collection NAME): list, sync, rm.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def default_model(flag: str | None) -> str:
    """The embedding model: -m, else the `embed_model` setting (LLMCLI_EMBED_MODEL, the config
    file), as `logs --like` takes it."""
    from llmcli import settings

    return str(settings.resolve("embed_model", flag or None) or "")


@dataclass
class Into:
    """How `embed --collection` stores: texts' content kept (`keep`), cut or refused when long;
    files' passages (`chunk`, `overlap` tokens)."""

    keep: bool
    truncate: bool
    normalize: bool
    chunk: int
    overlap: int


def embed_into(engine: Model, name: str, items: list[tuple[str, str]], files: list[Path], how: Into) -> None:
    """Embed what is new or changed in `items` (one write) and `files` (one write each, as
    passages) and store it in collection `name`."""
    from llmcli.embed import collections as store

    with store.connect() as db:
        found = store.get(db, name)
        if found is not None:
            model_id = store.check_model(db, found, engine)
        else:
            from llmcli.embed import identity

            model_id = identity.of_model(db, engine)
        if items:
            _texts_into(db, engine, name, items, how, found, model_id)
        if files:
            from llmcli.embed.sources import add_files

            outcome = add_files(db, name, engine, files, chunk=how.chunk, overlap=how.overlap,
                                normalize=how.normalize, model_id=model_id, say=render.warn)  # fmt: skip
            render.info(outcome.line(name))


def _texts_into(db, engine: Model, name: str, items: list[tuple[str, str]], how: Into, found,
                model_id: str) -> None:  # fmt: skip
    from llmcli.embed import collections as store
    from llmcli.embed.runs import content_hash

    keep, truncate, normalize = how.keep, how.truncate, how.normalize
    # one row per id: a text given twice (the same hash, so the same id) is embedded once
    hashed = list({id_: (id_, text, content_hash(text)) for id_, text in items}.values())
    same = store.unchanged(db, name, [(i, h) for i, _, h in hashed]) if found else set()
    todo = [(i, t, h) for i, t, h in hashed if i not in same]
    if todo:
        result = engine.embed([t for _, t, _ in todo], truncate=truncate, normalize=normalize)
        rows = [
            (i, h, t if keep else None, row.tobytes())
            for (i, t, h), row in zip(todo, result.matrix, strict=True)
        ]
        dimensions = int(result.matrix.shape[1])
        store.check_dimensions(found, dimensions)
        store.store(db, name, engine.name, rows, dimensions, model_id=model_id)
    render.info(f"collection {name}: {len(todo)} embedded, {len(same)} unchanged")


def similar(
    name: Annotated[str, typer.Argument(help="The collection to search.")],
    text: Annotated[str | None, typer.Argument(help="The text to search for (or --id).")] = None,
    id_: Annotated[
        str | None, typer.Option("--id", help="Search with the vector of this stored id instead.")
    ] = None,
    number: Annotated[
        int, typer.Option("--limit", "--number", min=1, metavar="N", help="How many matches to print.")
    ] = 10,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="The model (default: the embed_model setting, else the model the "
            "collection was last stored with).",
        ),
    ] = "",
) -> None:
    """The stored items closest in meaning to TEXT, best first: one JSON object per line.

    Example: llmcli similar notes "how do I undo a commit" --limit 5 -m all-minilm.gguf
    """
    from llmcli.embed import collections as store

    if (text is None) == (id_ is None):
        raise UsageError("give the text to search for, or --id ID, not both")
    with store.connect() as db:
        found = store.require(db, name)
        if id_ is not None:
            query = store.vector_of(db, name, id_)
        else:
            query = _query_vector(db, found, model, text or "")
        matches = store.rank(db, name, query, number, skip=id_)
    for match in matches:
        render.out_json(match, schema="embed/match", line=True)


def _query_vector(db, found, model: str, text: str):
    """TEXT's vector by the model of -m, else of the embed_model setting, else the collection's."""
    from llmcli.embed import collections as store
    from llmcli.embed.runs import Model

    engine = Model(default_model(model) or found.model, debug=render.debug())
    try:
        store.check_model(db, found, engine)
        query = engine.embed([text]).matrix[0]
    finally:
        engine.close()
    store.check_dimensions(found, int(query.shape[0]))
    return query


@collections_app.command("list")
def list_collections(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document instead of a table.")
    ] = False,
) -> None:
    """List the collections: name, model, dimensions, items.

    Example: llmcli collections list
    """
    from llmcli.embed import collections as store
    from llmcli.render.tables import plain

    with store.connect() as db:
        found = store.listing(db)
    rows = [{"name": c.name, "model": c.model, "dimensions": c.dimensions, "items": c.count} for c in found]
    if as_json:
        return render.out_json(
            {"database": str(store.db_path()), "collections": rows}, schema="embed/collections"
        )
    if not rows:
        render.info(f"no collections in {store.db_path()}")
        return
    render.out_text(plain(["NAME", "MODEL", "DIMENSIONS", "ITEMS"], [list(r.values()) for r in rows]))


@collections_app.command("rm")
def remove(name: Annotated[str, typer.Argument(help="The collection to delete.")]) -> None:
    """Delete a collection and its vectors.

    Example: llmcli collections rm notes
    """
    from llmcli.embed import collections as store

    with store.connect() as db:
        count = store.remove(db, name)
    render.info(f"removed collection {name} ({count} items)")


@collections_app.command("sync")
def sync(
    name: Annotated[str, typer.Argument(help="The collection whose files to bring up to date.")],
    model: Annotated[
        str, typer.Option("--model", "-m", help="The model (default: the collection's, as last stored).")
    ] = "",
) -> None:
    """Bring a collection's files up to date: a changed file's passages replaced, a file that is
    gone removed, an unchanged one left as it is.

    Example: llmcli collections sync docs
    """
    from llmcli.embed import collections as store
    from llmcli.embed import sources
    from llmcli.embed.passages import file_sha256

    with store.connect() as db:
        found = store.require(db, name)
        files = sources.tracked(db, name)
        if not files:
            raise UsageError(f"collection {name!r} holds no files to sync",
                             hint=f"llmcli embed -i FILE --collection {name}")  # fmt: skip
        gone = [path for path, _, _ in files if not Path(path).is_file()]
        for path in gone:
            sources.prune(db, name, path)
        here = [(p, c, o) for p, c, o in files if p not in gone]
        stored = dict(db.execute("SELECT path, sha256 FROM sources WHERE collection = ?", (name,)).fetchall())
        changed = [(p, c, o) for p, c, o in here if _hash_or_none(file_sha256, p) != stored.get(p)]
        outcome = sources.Outcome(unchanged=len(here) - len(changed), pruned=len(gone))
        if changed:
            _resync(db, found, model, changed, outcome)
    render.info(outcome.line(name))


def _hash_or_none(hasher, path: str) -> str | None:
    try:
        return hasher(Path(path))
    except OSError:
        return None


def _resync(db, found, model: str, changed: list[tuple[str, int, int]], outcome) -> None:
    """The changed files embedded again with the collection's model, each with its own sizes."""
    from llmcli.embed import collections as store
    from llmcli.embed import sources
    from llmcli.embed.runs import Model

    engine = Model(model or found.model, debug=render.debug())
    try:
        model_id = store.check_model(db, found, engine)
        for path, chunk, overlap in changed:
            made = sources.add_files(db, found.name, engine, [Path(path)], chunk=chunk, overlap=overlap,
                                     normalize=True, model_id=model_id, say=render.warn)  # fmt: skip
            outcome.embedded += made.embedded
            outcome.passages += made.passages
            outcome.skipped += made.skipped
    finally:
        engine.close()
