"""`llmcli batch INPUT`: many prompts in one run (llmcli.batch), one JSON line per item."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from llmcli import render
from llmcli.cli import options as o
from llmcli.errors import LlmcliError, UsageError

if TYPE_CHECKING:  # the command's module loads with `llmcli --help`: the run's types only when it runs
    from llmcli.runspec import RunSpec


# the options of what each item is and how it is answered (an item of JSON lines may say its own)
Inputs = Annotated[
    list[str],
    typer.Argument(help="Prompts: a text file (one per line) or JSON lines; with --each, files (or globs), "
                   "one prompt each.", metavar="INPUT", show_default=False),
]  # fmt: skip
Each = Annotated[
    bool, typer.Option("--each", help="Each INPUT file (or glob) is one prompt; its id is its path.")
]
Template = Annotated[
    str | None,
    typer.Option("--template", help='Put each prompt into this text: {content}, and with --each {name} and '
                 '{path}, e.g. "Summarise: {content}".', show_default=False),
]  # fmt: skip


@o.model_flags
def batch(
    ctx: typer.Context,
    inputs: Inputs,
    model: o.Model = None,
    parallel: Annotated[
        str, typer.Option("--parallel", "-np", help="Sequences (or requests) at once: a number, or auto.")
    ] = "auto",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Append each finished line to FILE; a rerun skips the ids in it."
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="With -o: start FILE again.")] = False,
    unordered: Annotated[bool, typer.Option("--unordered", help="Write items as they finish.")] = False,
    text: Annotated[bool, typer.Option("--text", help="Print each answer's text, not JSON lines.")] = False,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip input lines that cannot be read.")
    ] = False,
    each: Each = False,
    template: Template = None,
    system: Annotated[
        str | None,
        typer.Option("--system", help="System prompt for every item (an item's own messages may have one).",
                     envvar="LLMCLI_SYSTEM", show_default=False),
    ] = None,  # fmt: skip
    raw: Annotated[bool, typer.Option("--raw", help="Plain text completion: no chat template.")] = False,
    fallback_template: o.FallbackTemplate = False,
    flags: o.ModelFlags = None,  # type: ignore[assignment]  # model_flags: ctx_size ... log
    timeout: o.Timeout = None,
    offline: o.Offline = False,
    force: o.Force = False,
) -> None:
    """Answer many prompts in one run: one JSON line per item, {"id", "work", "record"}.

    Every item is a request as `generate` makes it: the same settings (flags, LLMCLI_*, the config
    file, the model's recommendation), template, system prompt and constraints; an item's own
    options (JSON lines, OpenAI bodies) count over all but the flags typed here.

    Example: llmcli batch prompts.txt -m qwen2.5-coder-0.5b -o answers.jsonl
    """
    from llmcli.batch import run as b
    from llmcli.batch.output import Sink

    n = _parallel(parallel)
    if text and output is not None:
        raise UsageError("--text prints to stdout; -o FILE keeps JSON lines to resume by")
    source = _source(inputs, each, template)
    spec = flags.spec(ctx, speculative=False, system=system, raw=raw, fallback_template=fallback_template)
    written = _written(output, overwrite, source)
    plan = b.check(source, skip_bad=skip_bad, written=written)
    _said(plan, source, written)
    sink = Sink(output, overwrite=overwrite, unordered=unordered)
    try:
        run = Run(model, source, spec, n, text, Load(timeout, offline, force))
        _answer(b, run, flags, plan, written, sink)
    except KeyboardInterrupt:
        _interrupted(plan, sink, output)
        raise
    finally:
        sink.close()


def _written(output: Path | None, overwrite: bool, source):
    """What `-o FILE` already holds (nothing with --overwrite or no -o): refused where FILE is one
    of the inputs, or holds lines that are not batch output."""
    from llmcli.batch.identity import Written

    if output is None:
        return Written()
    inputs = source.files if source.files is not None else [source.path]
    for name in inputs:
        if Path(name).resolve() == output.resolve():
            raise UsageError(f"-o {output} is an input file: write the answers to another file")
    return Written(output) if overwrite else Written.read(output)


def _said(plan, source, written) -> None:
    """What the check of the input found that the user should know, a line each: bad lines
    skipped (the first few named), blank lines, fields of OpenAI bodies not read, and lines
    already in -o that cannot be checked; an -o FILE of the other format is refused."""
    if written.openai is not None and written.openai != plan.openai:
        kinds = ("llmcli's lines", "OpenAI batch lines")
        raise UsageError(f"-o {written.path} holds {kinds[written.openai]} and this input writes "
                         f"{kinds[plan.openai]}: write to another file, or --overwrite")  # fmt: skip
    if plan.bad:
        render.warn(plan.bad_said())
    if plan.blank:
        render.info(f"batch: {plan.blank} blank line(s) of {source.label} skipped (a blank line is no item)")
    for name, items in plan.unknown.items():
        render.warn(f"`{name}` is not read ({items} item(s)): llmcli batch does not know it")
    if plan.done_before and written.unchecked:
        render.info(f"batch: {written.unchecked} line(s) of {written.path} record no prompt, model or "
                    "settings (an older llmcli's, or another tool's): resumed by id, unchecked")  # fmt: skip


def _interrupted(plan, sink, output: Path | None) -> None:
    """Ctrl-C: how many items are saved, and the command that resumes."""
    import shlex
    import sys

    if output is None:
        render.warn(f"batch: {sink.written} item(s) printed before Ctrl-C; with -o FILE a rerun resumes")
        return
    args = [a for a in sys.argv[1:] if a != "--overwrite"]
    saved = plan.done_before + sink.written
    render.warn(f"batch: {saved} of {plan.total} item(s) saved in {output}; resume with: "
                f"llmcli {shlex.join(args)}")  # fmt: skip


def _source(inputs: list[str], each: bool, template: str | None):
    """Where the items come from: one input file, or --each's files; the template checked."""
    from llmcli.batch.each import Template, expand
    from llmcli.batch.run import Source

    shaped = Template(template, each=each) if template is not None else None
    if each:
        return Source(files=expand(inputs), template=shaped)
    if len(inputs) != 1:
        raise UsageError(f"batch reads one input file, not {len(inputs)}",
                         hint="--each makes each file one prompt")  # fmt: skip
    path = inputs[0]
    if path == "-":
        raise UsageError("batch reads a file: its lines are checked before anything is generated",
                         hint="write the prompts to a file first")  # fmt: skip
    if not Path(path).is_file():
        raise UsageError(f"no input file {path}")
    return Source(path=path, template=shaped)


def _parallel(text: str) -> int | None:
    """--parallel: a number from 1 to 256, or None for auto."""
    if text.strip().lower() == "auto":
        return None
    try:
        n = int(text)
    except ValueError:
        raise UsageError(f"--parallel is a number or auto, not {text!r}") from None
    if not 1 <= n <= 256:
        raise UsageError(f"--parallel is from 1 to 256, not {n}")
    return n


@dataclass
class Load:
    timeout: float | None
    offline: bool
    force: bool


@dataclass
class Run:
    model: str | None
    source: object  # batch.run.Source
    spec: RunSpec
    parallel: int | None
    text: bool
    load: Load


def _open(run: Run, flags: o.ModelFlags):
    """The model, loaded as `generate` loads it, and the run's settings made what it runs with: the
    model's recommended sampling, and how its prompts are built ("raw" or the template's source)."""
    from llmcli import environment
    from llmcli.loader import load_engine

    env = environment.current()
    loaded = load_engine(run.model, run.spec.engine, offline=run.load.offline, force=run.load.force,
                         debug=render.debug(), timeout=run.load.timeout, factory=env.engine_factory,
                         check_files=env.checks_model_files)  # fmt: skip
    flags.after_load(loaded)
    if applied := run.spec.recommend(loaded.engine.info, loaded.ref):  # as generate does
        render.debug_log(f"the model's recommended sampling: {applied}")
    how, notice = run.spec.template(loaded.engine)
    if notice:
        ignored = " (--system does not apply to plain text and is ignored)" if run.spec.system else ""
        render.info(f"{loaded.ref}: {notice}{ignored}")
    return loaded, how == "raw"


def _answer(b, run: Run, flags: o.ModelFlags, plan, written, sink) -> None:
    from llmcli.loader import respond_many
    from llmcli.render.batch import summary

    loaded, raw = _open(run, flags)
    try:
        b.verify(run.source, written, run.spec, raw, b.model_of(loaded))  # before anything is generated
        if plan.todo == 0:
            render.info(f"batch: all {plan.done_before} items are already in {written.path} "
                        "(--overwrite starts again)")  # fmt: skip
            return
        # each sequence's share of the context: what the items need, unless -c (or the settings) say
        context = None if run.spec.engine.ctx_size else b.context_needed(run.source, run.spec, written.ids)
        many = respond_many(loaded, run.parallel, plan.todo, context)
        if run.parallel is None:
            render.info(f"batch: parallel {many.n} ({many.how})")
        tally = b.Tally(started=time.perf_counter())
        try:
            work = b.items_to_do(run.source, written, sink)
            _each(b, run, flags, loaded, many, raw, work, tally, plan, sink)
        finally:
            many.close()
    finally:
        loaded.engine.close()
    summary(items=tally.done, failed=tally.failed, skipped=plan.done_before, tokens=tally.tokens,
            wall_s=tally.wall_s(), parallel=many.n, how=many.how.split(":")[0],
            prompt_tokens=tally.prompt_tokens, reused=tally.reused)  # fmt: skip
    if tally.failed:
        raise LlmcliError(f"{tally.failed} of {tally.done + tally.failed} items failed (their lines say why)")


def _each(b, run: Run, flags: o.ModelFlags, loaded, many, raw: bool, work, tally, plan, sink) -> None:
    """Every item answered (`batch.run.answer`), its line written, counted, shown and logged."""
    from dataclasses import replace

    from llmcli.contract import Prepared
    from llmcli.render.batch import progress
    from llmcli.request.log import log_request

    logged = flags.logged(loaded.ref, "batch")
    if logged is not None:
        render.debug_log(f"batch: items logged under conversation {logged.cid}")
    with progress(plan.todo) as bar:
        for item, answered in b.answer(many, work, run.spec, raw):
            order, request = answered.key, answered.request
            done, fmt, error = answered.done, answered.prompt_format, answered.error
            if done is None:
                tally.failed += 1
                render.warn(f"item {item.id}: {error}")
            else:
                tally.done += 1
                tally.tokens += done.stats.completion_tokens
                tally.prompt_tokens += done.stats.prompt_tokens
                tally.reused += done.stats.cached_tokens
            if run.text:
                sink.put(order, done.text if done is not None else None)
            else:
                sink.put(order, b.line(item, loaded, request.params, done, fmt, error, request.fragments))
            bar.update(tally.done, tally.failed, tally.tok_s())
            if logged is not None:
                prepared = Prepared(fmt) if fmt is not None else None
                kind = b.constraint(request.params)  # each item's own
                log_request(loaded.engine, request, replace(logged, constraint=kind), done, prepared,
                            error=error)  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("batch", no_args_is_help=True)(batch)
