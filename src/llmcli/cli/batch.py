"""`llmcli batch INPUT`: many prompts in one run (llmcli.batch), one JSON line per item."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from llmcli import render
from llmcli.errors import LlmcliError, UsageError

if TYPE_CHECKING:  # the command's module loads with `llmcli --help`: the contract only when it runs
    from llmcli.contract import SamplingParams

SERVED_PARALLEL = 4  # requests at once to a server with --parallel auto (the server decides how it batches)


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
Stop = Annotated[
    list[str] | None,
    typer.Option("--stop", help="Stop an answer where this text appears (repeatable; an item may say).",
                 show_default=False),
]  # fmt: skip
GrammarFile = Annotated[
    Path | None,
    typer.Option("--grammar-file", help="Constrain every answer with a GBNF grammar (an item may say).",
                 dir_okay=False, show_default=False),
]  # fmt: skip
JsonSchema = Annotated[
    str | None,
    typer.Option("--json-schema", help="Every answer JSON matching this schema, a file or inline JSON (an "
                 "item's response_format may say).", show_default=False),
]  # fmt: skip


def batch(
    inputs: Inputs,
    model: Annotated[
        str, typer.Option("--model", "-m", help="A GGUF model, or a served model (URL, NAME/MODEL).")
    ] = "",
    parallel: Annotated[
        str, typer.Option("--parallel", "-n", help="Sequences (or requests) at once: a number, or auto.")
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
    system: Annotated[str | None, typer.Option("--system", help="System prompt for every item.")] = None,
    stop: Stop = None,
    grammar_file: GrammarFile = None,
    json_schema: JsonSchema = None,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", min=1, help="Tokens per answer at most (an item may say).")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option("--temperature", min=0.0, help="Sampling temperature (an item may say).")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of every item (an item may say).")] = None,
    ctx_size: Annotated[
        int | None, typer.Option("--ctx-size", "-c", min=256, help="Context tokens of each sequence.")
    ] = None,
    threads: Annotated[int | None, typer.Option("--threads", "-t", min=1, help="CPU threads.")] = None,
    log: Annotated[
        bool | None,
        typer.Option(
            "--log/--no-log",
            help="Write each item to the conversation log, under the batch's id (default: config `log`, on).",
            show_default=False,
        ),
    ] = None,  # fmt: skip
) -> None:
    """Answer many prompts in one run: one JSON line per item, {"id", "work", "record"}.

    Example: llmcli batch prompts.txt -m qwen2.5-coder-0.5b -o answers.jsonl
    """
    from llmcli.batch import run as b
    from llmcli.batch.output import Sink

    n = _parallel(parallel)
    if text and output is not None:
        raise UsageError("--text prints to stdout; -o FILE keeps JSON lines to resume by")
    source = _source(inputs, each, template)
    written = _written(output, overwrite, source)
    plan = b.check(source, skip_bad=skip_bad, written=written)
    _said(plan, source, written)
    params = _params(max_tokens, temperature, seed, stop, grammar_file, json_schema)
    sink = Sink(output, overwrite=overwrite, unordered=unordered)
    try:
        run = Run(model, source, params, system, n, ctx_size, threads, text, log)
        _answer(b, run, plan, written, sink)
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


def _open(model: str, parallel: int | None, todo: int, ctx_size: int | None, threads: int | None):
    """The model, the batch decoder of a local one (None: requests side by side), N and how it was
    chosen."""
    from llmcli.contract import EngineOptions
    from llmcli.loader import batch_room, load_engine, load_served, served_endpoint

    endpoint = served_endpoint(model or None)
    if endpoint is not None:
        n = parallel or SERVED_PARALLEL
        how = "set" if parallel else "auto: requests at once; the server batches them"
        return load_served(endpoint, debug=render.debug(), connections=n), None, n, how
    from llmcli import environment

    env = environment.current()
    opts = EngineOptions(ctx_size=ctx_size, threads=threads)
    loaded = load_engine(model or None, opts, debug=render.debug(),
                         factory=env.engine_factory, check_files=env.checks_model_files)  # fmt: skip
    from llmcli.engine.batched import decoder_for

    room = batch_room(loaded.path, opts, loaded.engine.n_ctx) if loaded.path is not None else None
    decoder, n, how = decoder_for(loaded.engine, parallel, todo, room=room)
    if parallel is None:
        render.info(f"batch: parallel {n} ({how})")
    return loaded, decoder, n, how


def _params(max_tokens: int | None, temperature: float | None, seed: int | None, stop: list[str] | None,
            grammar_file: Path | None, json_schema: str | None):  # fmt: skip
    """The run's sampling settings: those given, the others left for the model's recommendation;
    the stop strings, the grammar or the JSON schema (converted as `generate` converts it)."""
    from dataclasses import fields, replace

    from llmcli.cli.resolve import load_grammar, read_schema
    from llmcli.contract import SamplingParams

    params = SamplingParams(stop=list(stop or []))
    params.grammar = load_grammar(grammar_file, json_schema)
    if json_schema is not None:
        params.json_schema = read_schema(json_schema)
    given = set()
    for name, value in (("max_tokens", max_tokens), ("temperature", temperature), ("seed", seed)):
        if value is not None:
            setattr(params, name, value)
            given.add(name)
    left = frozenset(f.name for f in fields(SamplingParams)) - given - {"stop", "grammar", "json_schema"}
    params = replace(params, defaulted=left)
    params.validate()
    return params


@dataclass
class Run:
    model: str
    source: object  # batch.run.Source
    params: SamplingParams
    system: str | None
    parallel: int | None
    ctx_size: int | None
    threads: int | None
    text: bool
    log: bool | None


def _logged(run: Run, ref: str):
    """What each item is logged with: the batch's one conversation id, command `batch`."""
    from llmcli.log import rows, writer

    if not writer.enabled(run.log):
        return None
    logged = rows.Logged(ref, "batch")
    render.debug_log(f"batch: items logged under conversation {logged.cid}")
    return logged


def _answer(b, run: Run, plan, written, sink) -> None:
    from llmcli.contract import Prepared
    from llmcli.render.batch import progress, summary
    from llmcli.request.log import log_request

    model, source, params, system, text = run.model, run.source, run.params, run.system, run.text
    loaded, decoder, parallel, how = _open(model, run.parallel, plan.todo, run.ctx_size, run.threads)
    logged = _logged(run, loaded.ref)
    from llmcli.sampling import apply_recommended

    if applied := apply_recommended(params, loaded.engine.info, loaded.ref):  # as generate does
        render.debug_log(f"the model's recommended sampling: {applied}")
    tally = b.Tally(started=time.perf_counter())
    work = b.items_to_do(source, written, sink)
    try:
        b.verify(source, written, params, system, b.model_of(loaded))  # before anything is generated
        if plan.todo == 0:
            render.info(f"batch: all {plan.done_before} items are already in {written.path} "
                        "(--overwrite starts again)")  # fmt: skip
            return
        with progress(plan.todo) as bar:

            def finished(order, item, request, done, fmt, error) -> None:
                if done is None:
                    tally.failed += 1
                    render.warn(f"item {item.id}: {error}")
                else:
                    tally.done += 1
                    tally.tokens += done.stats.completion_tokens
                    tally.prompt_tokens += done.stats.prompt_tokens
                    tally.reused += done.stats.cached_tokens
                if text:
                    sink.put(order, done.text if done is not None else None)
                else:
                    sink.put(order, b.line(item, loaded, request.params, done, fmt, error))
                bar.update(tally.done, tally.failed, tally.tok_s())
                if logged is not None:
                    prepared = Prepared(fmt) if fmt is not None else None
                    kind = b.constraint(request.params)  # each item's own
                    log_request(loaded.engine, request, replace(logged, constraint=kind), done, prepared,
                                error=error)  # fmt: skip

            if decoder is not None:
                b.answer_local(decoder, loaded, work, params, system, finished)
            else:
                b.answer_side_by_side(loaded, work, params, system, parallel, finished)
    finally:
        if decoder is not None:
            decoder.close()
        loaded.engine.close()
    summary(items=tally.done, failed=tally.failed, skipped=plan.done_before, tokens=tally.tokens,
            wall_s=tally.wall_s(), parallel=parallel, how=how.split(":")[0],
            prompt_tokens=tally.prompt_tokens, reused=tally.reused)  # fmt: skip
    if tally.failed:
        raise LlmcliError(f"{tally.failed} of {tally.done + tally.failed} items failed (their lines say why)")


def register(app: typer.Typer) -> None:
    app.command("batch", no_args_is_help=True)(batch)
