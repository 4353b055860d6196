"""`llmcli logs`: the conversation log (llmcli.log) read back: list and search, show, rerun,
speed over time, import from simonw/llm, prune, and the switch that turns logging off or on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from llmcli import render
from llmcli.cli.helptext import ReadableArgs

logs_app = typer.Typer(
    name="logs",
    invoke_without_command=True,
    rich_markup_mode=None,
)

AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of text.")]
ModelFilter = Annotated[
    str | None,
    typer.Option("--model", "-m", help="Only this model (its reference, or part of it).", show_default=False),
]
Since = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="Only entries from this long ago (30m, 12h, 7d, 2w) or since this date (2025-06-01).",
        metavar="WHEN",
        show_default=False,
    ),
]


@logs_app.callback()
def logs(
    ctx: typer.Context,
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            "-q",
            help="Search prompts, answers, reasoning and tool calls (full text, best match first).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    model: ModelFilter = None,
    since: Since = None,
    cid: Annotated[
        str | None, typer.Option("--cid", help="Only this conversation.", show_default=False)
    ] = None,
    count: Annotated[
        int, typer.Option("--limit", "--count", help="Show at most N entries (0: all).", min=0, metavar="N")
    ] = 10,
    as_json: AsJson = False,
    like: Annotated[str | None, typer.Option("--like", metavar="TEXT", show_default=False,
                    help="Rank entries by meaning, the closest to TEXT first (an embedding model: "
                    "--embed-model or the embed_model setting).")] = None,
    embed_model: Annotated[str | None, typer.Option("--embed-model", metavar="MODEL", show_default=False,
                           envvar="LLMCLI_EMBED_MODEL", help="The embedding model of --like.")] = None,
    min_score: Annotated[float | None, typer.Option("--min-score", metavar="S", show_default=False,
                         help="With --like: only entries scoring S or more (cosine similarity, -1 to 1; "
                         "default 0.25).")] = None,
    with_batch: Annotated[bool, typer.Option("--with-batch", help="With --like: rank batch items too (left "
                          "out by default: many, alike, and slow to embed).")] = False,
) -> None:
    """The conversation log: every generate and chat turn, with its settings and timings. Alone:
    the recent entries (the newest last); -q searches them, best match first.

    Example: llmcli logs -q "binary search" -m gemma --limit 5
    """
    if ctx.invoked_subcommand is not None:
        return
    from llmcli.log import queries

    scores: dict[int, float] = {}
    if like is not None or embed_model is not None or min_score is not None or with_batch:
        from llmcli.cli.logs_like import check

        source = ctx.get_parameter_source("embed_model")
        check(like, embed_model, source is not None and source.name == "COMMANDLINE",  # not the env var
              min_score, with_batch)  # fmt: skip
    db = queries.reader()
    try:
        if like is not None:
            from llmcli.cli.logs_like import MIN_SCORE, search

            rows, scores = search(db, like, embed_model, query=query, model=model, since=parse_since(since),
                                  cid=cid, limit=count or None, with_batch=with_batch,
                                  min_score=MIN_SCORE if min_score is None else min_score)  # fmt: skip
        else:
            rows = queries.select(db, query=query, model=model, since=parse_since(since), cid=cid,
                                  limit=count or None)  # fmt: skip
    except Exception as exc:
        import sqlite3

        if isinstance(exc, sqlite3.Error):
            from llmcli.errors import UsageError

            raise UsageError(f"cannot search the log: {exc}") from None
        raise
    finally:
        db.close()
    if as_json:
        render.out_json([{**queries.as_json(r), **({"score": scores[r["id"]]} if like is not None else {})}
                         for r in rows], schema="logs/entries")  # fmt: skip
        return
    if not rows:
        render.info("no log entries" + (" match" if query or model or since or cid or like else " yet"))
        return
    # oldest first (the newest ends on screen); by meaning, the best match last, as -q's
    render.out_text("".join(_entry(r, scores.get(r["id"])) for r in reversed(rows)))


def _entry(r, score: float | None = None) -> str:
    from llmcli.render.tables import printable

    head = (f"#{r['id']}  {_when(r['created'])}  {r['model']}  cid {r['conversation_id']}"
            f"{'  ' + r['finish_reason'] if r['finish_reason'] not in (None, 'stop') else ''}"
            f"{f'  score {score:.2f}' if score is not None else ''}")  # fmt: skip
    seed = f"  seed {r['seed']}" if r["seed"] is not None else ""
    speed = f"  {r['decode_tps']:.1f} tok/s" if r["decode_tps"] else ""
    return (f"{head}{seed}{speed}\n  > {printable(_clip(r['prompt']))}\n"
            f"  < {printable(_clip(r['response']))}\n")  # fmt: skip


def _clip(text: str | None, width: int = 100) -> str:
    one = " ".join((text or "").split())
    return one if len(one) <= width else one[: width - 1] + "…"


def _when(created: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created))


def parse_since(value: str | None) -> float | None:
    """`--since`: a duration back from now (30s, 30m, 12h, 7d, 2w) or a date/time (ISO 8601)."""
    if value is None:
        return None
    import re

    from llmcli.errors import UsageError

    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", value.lower())
    if found:
        seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[found[2]]
        return time.time() - float(found[1]) * seconds
    from datetime import datetime

    try:
        return datetime.fromisoformat(value.strip()).timestamp()
    except ValueError:
        raise UsageError(f"--since: not a duration or a date: {value!r}",
                         hint="e.g. 30m, 12h, 7d, 2w, or 2025-06-01") from None  # fmt: skip


EntryId = Annotated[
    str,
    typer.Argument(help="The entry's id (#N in `llmcli logs`; 42 or #42).", metavar="ID", show_default=False),
]


def entry_id(text: str) -> int:
    """An entry's id as `llmcli logs` shows it (#42) or bare (42); a one-line usage error otherwise."""
    from llmcli.errors import UsageError

    digits = text.strip().removeprefix("#")
    if not digits.isdigit() or not digits.isascii():
        raise UsageError(f"not a log entry id: {text!r}", hint="an id is a number, #N in `llmcli logs`")
    return int(digits)


def _row(rowid: int, read=None):
    """Row `rowid`; with `read`, also what `read(db, rowid)` gives (its attachments, its images)."""
    from llmcli.errors import UsageError
    from llmcli.log import queries

    db = queries.reader()
    try:
        row = queries.one(db, rowid)
        extra = read(db, rowid) if read is not None and row is not None else None
    finally:
        db.close()
    if row is None:
        raise UsageError(f"no log entry #{rowid}", hint="`llmcli logs` lists them")
    return row if read is None else (row, extra)


@logs_app.command("show", cls=ReadableArgs)
def show(
    entry: EntryId,
    as_json: AsJson = False,
) -> None:
    """Show one entry whole: prompt messages, reasoning, answer, settings and timings.

    Example: llmcli logs show 42 --json
    """
    import json

    from llmcli.log import queries

    row, attachments = _row(entry_id(entry), queries.attachments)
    if as_json:
        render.out_json({**queries.as_json(row), "attachments": attachments}, schema="logs/entry")
        return
    d = queries.as_json(row)
    out = [f"#{d['id']}  {_when(d['created'])}  {d['command']}  conversation {d['conversation_id']}",
           f"model: {d['model']}" + (f"  ({d['endpoint']})" if d["endpoint"] else "")]  # fmt: skip
    params = d.get("params") or {}
    if params:
        from llmcli.sampling import settings_text

        out.append(f"settings: {settings_text(params)}")
    out += _figures(d)
    if d["finish_reason"]:
        out.append(f"finish: {d['finish_reason']}" + (f" ({d['error']})" if d["error"] else ""))
    if d["command"] == "import":
        out.append("imported from simonw/llm's log")
    out += _attachment_lines(attachments)
    out.append("")
    for i, m in enumerate(d.get("messages") or [{"role": "text", "content": d["prompt"]}]):
        here = [a for a in attachments if a["message"] == i]
        names = [str(a["name"]) for a in here if str(a["media_type"]).startswith("image/")]
        texts = [str(a["name"]) for a in here if not str(a["media_type"]).startswith("image/")]
        images = f" [image: {', '.join(names)}]" if names else ""
        images += f" [text: {', '.join(texts)}]" if texts else ""
        out.append(f"## {m['role']}{images}\n{m['content']}\n")
    if d["reasoning"]:
        out.append(f"## reasoning\n{d['reasoning']}\n")
    if d["tool_calls"]:
        out.append(f"## tool calls\n{json.dumps(d['tool_calls'], indent=2, ensure_ascii=False)}\n")
    out.append(f"## answer\n{d['response']}\n")
    render.out_text("\n".join(out))


def _attachment_lines(attachments: list[dict[str, Any]]) -> list[str]:
    """`logs show`'s images and texts: name, media type, size, sha256 (and the positions each took)."""
    from llmcli.units import human_size

    lines = [f"attachments: {len(attachments)}"] if attachments else []
    for a in attachments:
        tokens = f", {a['tokens']} tok" if a.get("tokens") is not None else ""
        size = human_size(a["bytes"])
        lines.append(f"  {a['name']}  {a['media_type']}  {size}{tokens}  sha256 {a['sha256']}")
    return lines


def _figures(d: dict[str, Any]) -> list[str]:
    """The tokens and timings lines of `logs show`: "?" where a figure is unknown (a served model's
    server gave no count, a speed that cannot be measured from one token)."""
    usage = (d.get("record") or {}).get("usage") or {}
    out = []
    if d["prompt_tokens"] is not None or d["completion_tokens"] is not None:
        out.append(
            f"tokens: prompt {_n(d['prompt_tokens'])} ({d['cached_tokens'] or 0} cached), "
            f"answer {_n(d['completion_tokens'])}"
            + (f", reasoning {usage.get('reasoning_tokens')}" if usage.get("reasoning_tokens") else "")
        )
    if d["prefill_tps"] is not None or d["decode_tps"] is not None or d["ttft_ms"] is not None:
        out.append(f"timings: prefill {_n(d['prefill_ms'])} ms ({_n(d['prefill_tps'])} tok/s), "
                   f"decode {_n(d['decode_ms'])} ms ({_n(d['decode_tps'])} tok/s), "
                   f"first token {_n(d['ttft_ms'])} ms")  # fmt: skip
    return out


def _n(value: float | None) -> str:
    """A figure as a person reads it: "?" when unknown, at most one decimal."""
    if value is None:
        return "?"
    return str(round(value)) if abs(value) >= 100 or float(value).is_integer() else f"{value:.1f}"


@logs_app.command("rerun", cls=ReadableArgs)
def rerun(
    entry: EntryId,
    as_json: AsJson = False,
    log: Annotated[bool, typer.Option("--log/--no-log", help="Log the rerun as a new entry.")] = False,
    mmproj: Annotated[
        str | None,
        typer.Option("--mmproj", help="The image projector, for an entry with images (else an mmproj*.gguf "
                     "beside the model).", metavar="FILE", show_default=False),
    ] = None,  # fmt: skip
) -> None:
    """Run a logged request again: the same model, messages, settings and seed. The text goes to
    stdout; stderr says whether it is identical, or from which token it differs. A request that
    offered tools is refused: the log keeps its calls, not the tools.

    Example: llmcli logs rerun 42
    """
    from dataclasses import replace

    from llmcli import environment
    from llmcli.cli import logs_rerun
    from llmcli.contract import Request, SamplingParams
    from llmcli.errors import UsageError
    from llmcli.loader import load_engine
    from llmcli.log import queries, rows, writer
    from llmcli.request.generate import consume
    from llmcli.runspec import resolve_run

    number = entry_id(entry)
    found, (placed, attached) = _row(number, lambda db, n: (queries.images(db, n), queries.texts(db, n)))
    row = queries.as_json(found)
    if row["command"] == "import":
        raise UsageError(f"entry #{number} was imported from llm: its model and settings are llm's")
    rec = row.get("record") or {}
    logs_rerun.refuse_tools(number, row, rec)
    saved = row.get("params") or {}
    known = set(SamplingParams.__dataclass_fields__) - {"grammar", "json_schema", "defaulted"}
    params = SamplingParams(**{k: v for k, v in saved.items() if k in known})
    params.seed = row["seed"]
    params.grammar = row["grammar"]
    model = rec.get("model") or {}
    # how it is loaded: the run's settings (threads, layers, batch size: LLMCLI_*, the config), with
    # what the entry recorded over them (its context and KV cache types)
    options = replace(resolve_run({}).engine, ctx_size=model.get("context_size"), mmproj=mmproj,
                      type_k=logs_rerun.kv(model.get("cache_type_k")),
                      type_v=logs_rerun.kv(model.get("cache_type_v")))  # fmt: skip
    env = environment.current()
    loaded = load_engine(row["model"], options, debug=render.debug(), factory=env.engine_factory,
                         check_files=env.checks_model_files)  # fmt: skip
    messages = row.get("messages")
    think = None if row["think"] is None else bool(row["think"])
    last = max((i for i, m in enumerate(messages or []) if m.get("role") == "user"), default=-1)
    images = placed.pop(last, ())  # the last user message's, as generate sends them; the rest its history's
    request = (
        Request(params, text=row["prompt"], fragments=attached)
        if row["raw"]
        else Request(params, messages=messages, think=think, images=images, history_images=placed,
                     fragments=attached)  # fmt: skip
    )
    logged = rows.Logged(loaded.ref, "rerun") if log and writer.enabled() else None
    done, _, _ = consume(loaded.engine, request, stream_stdout=not as_json, log=logged)
    verdict = logs_rerun.compare(row, done)
    if as_json:
        render.out_json({"id": number, **verdict, "text": done.text, "original_text": row["response"],
                         "seed": done.seed}, schema="logs/rerun")  # fmt: skip
        return
    render.err_line(logs_rerun.describe(verdict, number))


@logs_app.command("stats")
def stats(
    model: ModelFilter = None,
    since: Since = None,
    as_json: AsJson = False,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            show_default=False,
            help="Also draw the figures: an image (PNG, SVG or PDF by the suffix), or - for a chart on the "
            "terminal instead of the table. Needs pip install 'llmcli[plot]'.",
        ),
    ] = None,
) -> None:
    """Prefill and decode speed per model and prompt length, from the log: median and spread
    (quartiles), with a bar chart of the medians. A prefill served mostly from the KV cache is
    left out of the prefill figures (it measures the cache, not the model), and batch items of
    the figures (each decoded beside others: its speed is a share of the batch's).

    Example: llmcli logs stats -m gemma --since 30d --plot speeds.png
    """
    from llmcli.errors import UsageError
    from llmcli.log.queries import reader
    from llmcli.log.stats import batch_items, speeds

    if plot == "-" and as_json:
        raise UsageError("--plot - draws on stdout, where --json prints: choose one, or --plot FILE")
    if plot not in (None, "-"):
        from llmcli.render import plot as draw

        draw.check_format(Path(plot))
    db = reader()
    try:
        when = parse_since(since)
        groups = speeds(db, model=model, since=when)
        batched = batch_items(db, model=model, since=when)
    finally:
        db.close()
    if batched:
        items = f"{batched} batch item{'s' if batched != 1 else ''}"
        render.info(f"{items} left out: each decoded beside others, so its speed is a share of the "
                    "batch's (llmcli batch's summary says its throughput)")  # fmt: skip
    if plot is not None and groups:
        _plot_speeds(groups, plot)
    if as_json:
        for g in groups:
            for key in ("prefill_tokens_per_s", "decode_tokens_per_s"):
                if g[key]:
                    g[key].pop("series")
        render.out_json(groups, schema="logs/stats")
        return
    if not groups:
        render.info("no timed entries" + (" match" if model or since else " yet"))
        return
    if plot != "-":
        from llmcli.render.log_stats import speed_table

        render.out_text(speed_table(groups))


def _plot_speeds(groups: list[dict[str, Any]], where: str) -> None:
    """`--plot`: the figures drawn on the terminal (-) or into an image file."""
    import sys

    from llmcli.render import charts
    from llmcli.render import plot as draw

    chart = charts.speeds_chart(groups, "Speed by prompt length, from llmcli's log")
    if where == "-":
        sys.stdout.write(draw.terminal(chart, colour=render.color_enabled(sys.stdout)))
    else:
        draw.save(chart, Path(where))


@logs_app.command("import")
def import_llm(
    path: Annotated[
        Path,
        typer.Argument(help="simonw/llm's logs.db (`llm logs path` prints it).", dir_okay=False, exists=True),
    ],  # fmt: skip
) -> None:
    """Import simonw/llm's log: every response with its conversation, prompt, system prompt,
    answer, reasoning, tool calls, options and token counts. Importing again skips what is there.

    Example: llmcli logs import "$(llm logs path)"
    """
    from llmcli.errors import UsageError
    from llmcli.log import llm_import, store

    try:
        db = store.connect()
    except Exception as exc:
        raise UsageError(f"cannot open the log {store.db_path()}: {exc}") from None
    try:
        imported, skipped, conversations = llm_import.import_llm(path, db)
    finally:
        db.close()
    render.info(f"imported {imported} entr{'y' if imported == 1 else 'ies'} in {conversations} "
                f"conversation{'' if conversations == 1 else 's'} from {path}"
                + (f"; {skipped} already there" if skipped else ""))  # fmt: skip


@logs_app.command("prune")
def prune(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Remove entries older than this (30d, 12h, 2w) or a date.",
            metavar="WHEN",
            show_default=False,
        ),
    ] = None,  # fmt: skip
    keep: Annotated[
        int | None,
        typer.Option("--keep", help="Keep only the newest N entries.", min=0, show_default=False),
    ] = None,
    max_mb: Annotated[
        int | None,
        typer.Option(
            "--max-mb",
            help="Remove the oldest entries until the log is within this many "
            "megabytes (default: log_max_mb, which every write keeps to).",
            envvar="LLMCLI_LOG_MAX_MB",
            min=0,
            show_default=False,
        ),
    ] = None,  # fmt: skip
) -> None:
    """Remove old entries and compact the file (the size cap, log_max_mb, removes the oldest by
    itself).

    Example: llmcli logs prune --older-than 90d
    """
    from llmcli.errors import UsageError
    from llmcli.log import cap, queries, store

    if older_than is None and keep is None and max_mb is None:
        raise UsageError("say what to remove: --older-than WHEN, --keep N and/or --max-mb N")
    db = queries.reader()
    try:
        before = store.db_path().stat().st_size
        removed = cap.prune(db, before=parse_since(older_than), keep=keep)
        if max_mb:
            removed += cap.prune_to(db, max_mb * 1_000_000)
            db.execute("VACUUM")
    finally:
        db.close()
    from llmcli.units import human_size

    after = store.db_path().stat().st_size
    render.info(f"removed {removed} entr{'y' if removed == 1 else 'ies'}; the log is {human_size(after)} "
                f"(was {human_size(before)})")  # fmt: skip


@logs_app.command("off")
def off() -> None:
    """Stop logging (sets config `log = false`; `--log` still logs one request).

    Example: llmcli logs off
    """
    from llmcli import settings

    settings.set_value("log", "false")
    render.info("logging is off (config: log = false)")


@logs_app.command("on")
def on() -> None:
    """Log every request again (sets config `log = true`).

    Example: llmcli logs on
    """
    from llmcli import settings

    settings.set_value("log", "true")
    render.info("logging is on (config: log = true)")


@logs_app.command("path")
def path() -> None:
    """Print where the log is (logs.db in the data directory), after moving in the entries one-shot
    generates left waiting beside it, so that SQLite's own tools see every entry.

    Example: sqlite3 "$(llmcli logs path)" .schema
    """
    from llmcli.errors import UsageError
    from llmcli.log import pending, queries, store

    if pending.pending_path().exists():
        try:
            queries.reader().close()
        except UsageError as exc:  # the path is still the answer; why the entries wait goes to stderr
            render.warn(f"entries wait beside the log: {exc.message}")
    render.out_text(f"{store.db_path()}\n")


@logs_app.command("status")
def status() -> None:
    """Whether logging is on, where the log is, how many entries and bytes on disk.

    The bytes are the database's, its write-ahead log's and those of the entries one-shot generates
    left waiting beside it: in all, then each file apart.

    Example: llmcli logs status
    """
    from llmcli import settings
    from llmcli.log import pending, queries, store
    from llmcli.log.cap import cap_bytes
    from llmcli.units import human_size

    value, source = settings.resolve_with_source("log")
    where = store.db_path()
    lines = [f"logging: {'on' if value else 'off'} ({source})", f"path: {where}"]
    if where.exists() or pending.pending_path().exists():
        db = queries.reader()  # moves in the entries left waiting: the counts are every entry
        try:
            n = db.execute("SELECT count(*) FROM responses").fetchone()[0]
            c = db.execute("SELECT count(*) FROM conversations").fetchone()[0]
        finally:
            db.close()
        cap = cap_bytes()
        files = _disk(where)
        lines.append(f"entries: {n} in {c} conversations; {human_size(sum(files.values()))} on disk of "
                     f"{human_size(cap) if cap else 'no cap'} (log_max_mb)")  # fmt: skip
        lines.append("files: " + ", ".join(f"{name} {human_size(size)}" for name, size in files.items()))
    render.out_text("".join(line + "\n" for line in lines))


def _disk(where: Path) -> dict[str, int]:
    """The log's files and their sizes: the database, its write-ahead log (entries written but not
    yet folded into the database) and the entries one-shot generates left waiting beside it."""
    from llmcli.log.pending import pending_path

    sizes = {}
    for path in (where, where.with_name(where.name + "-wal"), pending_path(where)):
        try:
            sizes[path.name] = path.stat().st_size
        except OSError:  # not there (a folded WAL, nothing waiting)
            continue
    return sizes


def register(app: typer.Typer) -> None:
    app.add_typer(logs_app, name="logs")
