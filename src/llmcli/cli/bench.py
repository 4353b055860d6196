"""`llmcli bench`: llama-bench style tokens-per-second reports, the chat scenario, and `bench compare`.

Thin: the flags (`llmcli.cli.bench_flags`) become one `BenchFlags`, handed to `llmcli.cli.bench_run`,
which makes a `llmcli.bench.run.Request` (or, for served models, a `llmcli.bench.serve.Request`);
progress goes to stderr and the results table (or CSV / JSON / JSON lines) to stdout, both drawn by
`llmcli.render.bench`. Measurement lives in `llmcli.bench`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from llmcli.cli.bench_flags import BenchFlags
from llmcli.cli.flagset import with_flags
from llmcli.cli.helptext import ReadableArgs

bench_app = typer.Typer(
    name="bench",
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


@bench_app.callback(invoke_without_command=True)
@with_flags(BenchFlags, keep_defaults=True)
def bench(ctx: typer.Context, flags: BenchFlags = None) -> None:  # type: ignore[assignment]  # with_flags
    """Measure prefill (pp) and decode (tg) speed, as llama-bench does: mean ± sd over repetitions.

    Example: llmcli bench -p 512 -n 128 -t 1-4 -d 0,4096 -o json > run.json

    Speculative decoding: llmcli bench --scenario spec -n 128 --spec-draft-n-max 2,4,8 --spec-exact 0,1
    """
    if ctx.invoked_subcommand is not None:
        return
    source = ctx.get_parameter_source("model")  # an enum of the click Typer bundles: by its name
    if flags.scenario == "embed" and getattr(source, "name", None) == "ENVIRONMENT":
        flags.model = None  # LLMCLI_MODEL names a generative model: embed's default is embed_model
    from llmcli.cli.bench_run import run

    run(flags)


@bench_app.command("compare")
def compare(
    old: Annotated[
        Path, typer.Argument(help="The baseline: llmcli bench -o json/jsonl, or llama-bench -o json.")
    ],
    new: Annotated[Path, typer.Argument(help="The run to compare against it.")],
    alpha: Annotated[
        float, typer.Option("--alpha", metavar="P", help="Significance level of the t-test.")
    ] = 0.05,
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="FORMAT", help="Output format: md or json.")
    ] = "md",
) -> None:
    """Per test: new/old speed ratio, and whether the difference is larger than the noise (Welch's t-test).

    Example: llmcli bench compare before.json after.json
    """
    from llmcli import render
    from llmcli.bench import compare as cmp
    from llmcli.cli.bench_run import check_choice
    from llmcli.render.bench import comparison

    check_choice("--output", output, ("md", "json"))
    result = cmp.compare(old, new, alpha)
    for side in (result.old, result.new):
        if not side.complete:
            render.warn(f"{side.path} is from a run that did not finish")
    if output == "json":
        render.out_json(result.document(), schema="bench-compare")
    else:
        sys.stdout.write(comparison(result))


@bench_app.command("plot", cls=ReadableArgs)
def plot(
    results: Annotated[
        list[Path],
        typer.Argument(
            help="Result files (llmcli bench -o json or jsonl); several are overlaid.", metavar="RESULTS"
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            show_default=False,
            help="Write the chart as an image here: PNG, SVG or PDF by the suffix (default: a chart on "
            "the terminal).",
        ),
    ] = None,  # fmt: skip
    metric: Annotated[
        str,
        typer.Option(
            "--metric", metavar="NAME", help="Serving runs: the latency drawn: ttft, tpot, itl or e2el."
        ),
    ] = "ttft",
) -> None:
    """Draw results: a serving run's latency percentiles against throughput (SLO line, goodput knee),
    a local run's tokens/s per test kind against the setting it swept (error bars: the spread of
    the repetitions); several files overlaid. Needs the plot extra: pip install 'llmcli[plot]'.

    Example: llmcli bench plot sweep.json -o sweep.png
    """
    from llmcli import render
    from llmcli.render import charts
    from llmcli.render import plot as draw

    if out is not None:
        draw.check_format(out)
    files = [(path.stem, *charts.load(path)) for path in results]
    chart = charts.bench_chart(files, metric)
    if out is None:
        sys.stdout.write(draw.terminal(chart, colour=render.color_enabled(sys.stdout)))
    else:
        draw.save(chart, out)
