"""`llmcli bench --scenario embed`: the flags that apply (-m, -t, -b as tokens per batch, -r,
--no-warmup, --delay, -f FILE or --texts N, -o md|json) checked, the run measured
(`llmcli.bench.embed`), and the table or the JSON document written."""

from __future__ import annotations

import sys

from llmcli.cli.bench_flags import BenchFlags
from llmcli.errors import UsageError

FORMATS = ("md", "json")


def run(f: BenchFlags) -> None:
    from llmcli import render
    from llmcli.bench import embed

    request = _request(f)
    if f.output not in FORMATS:
        raise UsageError(f"--scenario embed writes -o md or json, not {f.output}")
    doc = embed.run(request, progress=lambda line: render.info(f"llmcli bench: {line}"), debug=render.debug())
    if f.output == "json":
        render.out_json(doc, schema="bench-embed")
    else:
        from llmcli.render.bench_embed import markdown

        sys.stdout.write(markdown(doc))
        sys.stdout.flush()


def _request(f: BenchFlags):
    from llmcli import settings
    from llmcli.bench import embed
    from llmcli.bench import sweep as s
    from llmcli.engine.threads import physical_cores
    from llmcli.runspec import configured

    given = f.not_for("embed")
    if given:
        raise UsageError(f"{', '.join(given)}: not for --scenario embed (it takes -m, -t, -b, -r, "
                         "--no-warmup, --delay, -f FILE or --texts N, and -o md|json)")  # fmt: skip
    if f.prompt_file is not None and f.texts is not None:
        raise UsageError("-f FILE and --texts N: give one (the file's lines, or N generated sentences)")
    if f.prompt_file is not None:
        texts, source = embed.read_texts(f.prompt_file), str(f.prompt_file)
    else:
        texts, source = embed.sentences(f.texts or embed.DEFAULT_TEXTS), "generated"
    models = [m for m in s.parse_models(f.model) if m] or [settings.resolve("embed_model") or ""]
    if not models[0]:
        raise UsageError("--scenario embed needs an embedding model: -m FILE.gguf",
                         hint="or set one: llmcli config set embed_model FILE.gguf")  # fmt: skip
    return embed.Request(
        models=models, texts=texts, source=source,
        threads=s.parse_ints("-t", f.threads or configured("threads"), [physical_cores()], minimum=1),
        batch_tokens=[b or None for b in s.parse_ints("-b", f.batch_size or configured("batch_size"), [0],
                                                      minimum=0)],  # 0: the context; fmt: skip
        reps=f.repetitions, warmup=not f.no_warmup, delay_s=f.delay,
    )  # fmt: skip
