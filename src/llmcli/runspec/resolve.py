"""A run's values resolved: flag > LLMCLI_* > config > default, each value parsed by its setting's
declaration (`llmcli.values`), the special values (-ngl -1, -c 0) turned into the engine's defaults;
the grammar and the JSON schema read. Every command that runs a model resolves through here
(`llmcli.runspec.resolve_run`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmcli.contract import EngineOptions, SamplingParams, SpecOptions


def resolved_option(key: str, flag: Any) -> Any:
    """A setting resolved (flag > LLMCLI_* > config > default) as the engine option: None where its
    value stands for the engine's own default (`-ngl -1`: all layers; `-cd 0`: the target's)."""
    from llmcli import settings

    return settings.SETTINGS[key].option(settings.resolve(key, flag))


def engine_options(
    ctx_size: int | None,
    gpu_layers: int | None,
    threads: int | None,
    batch_size: int | None,
    flash_attn: bool | None = None,
    speculative: SpecOptions | None = None,
    repack: bool | None = None,
    cache_type_k: str | None = None,
    cache_type_v: str | None = None,
) -> EngineOptions:
    from llmcli import settings
    from llmcli.contract import EngineOptions, SpecOptions
    from llmcli.errors import UsageError
    from llmcli.gguf_file import v_cache_refused

    type_k, type_v = _cache_type("k", cache_type_k), _cache_type("v", cache_type_v)
    draft_v = speculative.type_v_draft if speculative is not None else None
    for v, flag in ((type_v, "-ctv"), (draft_v, "-ctvd")):  # the target's V cache, the draft's
        if v_cache_refused(v, flash_attn):
            raise UsageError(
                f"a quantized V cache ({v}) needs flash attention, and -nfa turns it off",
                hint=f"drop -nfa/--no-flash-attn, or use {flag} f16",
            )
    return EngineOptions(
        ctx_size=resolved_option("ctx_size", ctx_size),
        gpu_layers=resolved_option("gpu_layers", gpu_layers),
        threads=resolved_option("threads", threads),
        batch_size=settings.resolve("batch_size", batch_size),
        flash_attn=flash_attn,
        type_k=settings.SETTINGS["cache_type_k"].option(type_k),
        type_v=settings.SETTINGS["cache_type_v"].option(type_v),
        repack=repack,
        speculative=speculative or SpecOptions(),
    )


def _cache_type(which: str, flag: str | None, name: str | None = None) -> str:
    """-ctk/-ctv (`which` "k", "v") or -ctkd/-ctvd ("k_draft", "v_draft") resolved (flag,
    $LLMCLI_CACHE_TYPE_*, config, default: f16, or "" for the target's) and checked, lowercased."""
    from llmcli import settings, values

    key = f"cache_type_{which}"
    value, source = settings.resolve_with_source(key, flag)
    if source != "flag":
        return value
    setting = settings.SETTINGS[key]
    where = (name or f"--cache-type-{which}") if _typed(flag, key) else f"${setting.env}"
    return values.parse(setting, value, where, text=True)


def sampling_params(
    temperature: float | None,
    top_k: int | None,
    top_p: float | None,
    min_p: float | None,
    repeat_penalty: float | None,
    seed: int | None,
    max_tokens: int | None,
    stop: list[str] | None,
    grammar_file: Path | None = None,
    json_schema: str | None = None,
) -> SamplingParams:
    """Sampling settings resolved and validated, with the grammar text loaded."""
    from llmcli import settings
    from llmcli.contract import SamplingParams

    flags = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p,
             "repeat_penalty": repeat_penalty, "max_tokens": max_tokens}  # fmt: skip
    resolved = {key: settings.resolve_with_source(key, flag) for key, flag in flags.items()}
    params = SamplingParams(
        **{key: value for key, (value, _) in resolved.items()},
        seed=seed,
        stop=list(stop or []),
        defaulted=frozenset(
            {k for k, (_, source) in resolved.items() if source == "default"} | {"repeat_last_n"}
        ),
    )
    params.validate()
    params.grammar = load_grammar(grammar_file, json_schema)
    if json_schema is not None:
        params.json_schema = read_schema(json_schema)  # a served model sends the schema itself
    return params


def reasoning_budget(budget: int | None, message: str | None) -> tuple[int | None, str]:
    """--reasoning-budget and its message, resolved (flag > LLMCLI_* > config > default) and
    checked; a budget of -1 is no limit (None)."""
    from llmcli import settings, values

    setting = settings.SETTINGS["reasoning_budget"]
    value = values.parse(setting, settings.resolve("reasoning_budget", budget), "--reasoning-budget")
    return setting.option(value), settings.resolve("reasoning_budget_message", message)


def load_grammar(grammar_file: Path | None, json_schema: str | None) -> str | None:
    from llmcli.errors import UsageError

    if grammar_file and json_schema:
        raise UsageError("use either --grammar-file or --json-schema, not both")
    if grammar_file:
        try:
            text = grammar_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read grammar file {grammar_file}: {_reason(exc)}") from None
        if not text.strip():
            raise UsageError(f"grammar file {grammar_file} is empty")
        return text
    if json_schema is not None:
        return schema_to_grammar(json_schema)
    return None


def schema_to_grammar(value: str) -> str:
    """A JSON schema (file path or inline JSON) converted to GBNF by llama-cpp-python's converter."""
    import json

    from llmcli.errors import UsageError

    schema = read_schema(value)
    from llmcli.engine.grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:  # the converter raises plain exceptions on unsupported schemas
        raise UsageError(f"--json-schema could not be converted to a grammar: {exc}") from None


def read_schema(value: str) -> dict | bool:
    """The --json-schema value (a file path or inline JSON), parsed and checked."""
    import json

    from llmcli.errors import UsageError

    text = value
    path = Path(value).expanduser()
    if not value.lstrip().startswith(("{", "[")) and len(value) < 4096:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read JSON schema file {value}: {_reason(exc)}") from None
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--json-schema is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(schema, (dict, bool)):
        raise UsageError("--json-schema must be a JSON object")
    return schema


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return getattr(exc, "strerror", None) or str(exc)


def _typed(value: object, key: str, ctx: Any = None) -> bool:
    """Whether a flag's value was typed on this command line: Typer hands over an environment
    variable's value as the flag's, and a variable, like the config file, is a default that a
    flag may contradict without an error. The command's context records where each value came
    from; without one (a direct call) the value is compared with the variable's."""
    import os

    from llmcli import settings

    if value is None:
        return False
    env = settings.SETTINGS[key].env
    if ctx is not None:
        for param in ctx.command.params:
            if param.name and getattr(param, "envvar", None) == env:
                source = ctx.get_parameter_source(param.name)
                return source is not None and source.name == "COMMANDLINE"
    return str(value) != os.environ.get(env)
