"""Speculative decoding's flags (generate, chat, bench --scenario spec): resolved, checked together,
and the draft model's own flags refused without a draft model (one rule for every command)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmcli.errors import UsageError
from llmcli.runspec.resolve import _cache_type, _typed, resolved_option

if TYPE_CHECKING:
    from llmcli.contract import SpecOptions

DRAFT_FLAGS = "-ngld, -cd, -ctkd and -ctvd"


def require_draft_model(given: bool, draft: bool) -> None:
    """The draft model's own flags (`given`) set up a draft model: without one (`draft`) they are
    a mistake, said in the same words by every command."""
    if given and not draft:
        raise UsageError(f"{DRAFT_FLAGS} set up the draft model: give it with -md/--model-draft")


def spec_options(
    spec_type: str | None = None,
    draft_max: int | None = None,
    draft_min: int | None = None,
    ngram_max: int | None = None,
    ngram_min: int | None = None,
    adaptive: bool | None = None,
    exact: bool | None = None,
    model_draft: str | None = None,
    gpu_layers_draft: int | None = None,
    ctx_size_draft: int | None = None,
    ctx: Any = None,
    cache_type_k_draft: str | None = None,
    cache_type_v_draft: str | None = None,
) -> SpecOptions:
    """Speculative decoding's settings, resolved (flag > env > config > default) and checked. The
    draft model reference is resolved to a file by the loader, like -m."""
    from llmcli import settings, values
    from llmcli.contract import SpecOptions
    from llmcli.engine.speculation.proposal import kind_of

    draft_ref, draft_source = settings.resolve_with_source("model_draft", model_draft)
    draft_ref = draft_ref or None
    kind_value, kind_source = settings.resolve_with_source("spec_type", spec_type)
    try:  # the setting's names (llama.cpp's aliases among them), then the proposer they name
        kind = kind_of(values.parse(settings.SETTINGS["spec_type"], kind_value, "--spec-type"))
    except values.Invalid as exc:
        hint = _came_from("spec_type", kind_value, kind_source, spec_type, ctx)
        raise UsageError(exc.message, hint=hint) from None
    if draft_ref and (
        kind_source == "default"
        or (_typed(model_draft, "model_draft", ctx) and not _typed(spec_type, "spec_type", ctx))
    ):
        kind = "draft"  # -md alone turns the draft model on, as in llama.cpp (over a configured type)
    if kind != "draft" and _typed(model_draft, "model_draft", ctx):
        raise UsageError(f"-md/--model-draft is given but --spec-type is {kind}",
                         hint="use --spec-type draft, or leave out -md")  # fmt: skip
    draft_flags = {"gpu_layers_draft": gpu_layers_draft, "ctx_size_draft": ctx_size_draft,
                   "cache_type_k_draft": cache_type_k_draft,
                   "cache_type_v_draft": cache_type_v_draft}  # fmt: skip
    require_draft_model(any(_typed(value, key, ctx) for key, value in draft_flags.items()), kind == "draft")
    draft_from = _came_from("model_draft", draft_ref, draft_source, model_draft, ctx)
    counts = {"spec_draft_n_max": draft_max, "spec_draft_n_min": draft_min,
              "spec_ngram_max": ngram_max, "spec_ngram_min": ngram_min}  # fmt: skip
    resolved = {key: settings.resolve_with_source(key, flag) for key, flag in counts.items()}
    spec = SpecOptions(
        kind=kind,
        draft_max=resolved["spec_draft_n_max"][0],
        draft_min=resolved["spec_draft_n_min"][0],
        ngram_max=resolved["spec_ngram_max"][0],
        ngram_min=resolved["spec_ngram_min"][0],
        adaptive=settings.resolve("spec_adaptive", adaptive),
        exact=settings.resolve("spec_exact", exact),
        model_draft_ref=draft_ref if kind == "draft" else None,
        model_draft=draft_ref if kind == "draft" else None,
        model_draft_from=draft_from if kind == "draft" else None,
        gpu_layers_draft=resolved_option("gpu_layers_draft", gpu_layers_draft),
        ctx_size_draft=resolved_option("ctx_size_draft", ctx_size_draft),
        type_k_draft=settings.SETTINGS["cache_type_k_draft"].option(
            _cache_type("k_draft", cache_type_k_draft, "-ctkd/--cache-type-k-draft")
        ),
        type_v_draft=settings.SETTINGS["cache_type_v_draft"].option(
            _cache_type("v_draft", cache_type_v_draft, "-ctvd/--cache-type-v-draft")
        ),
    )
    try:
        spec.validate()
    except UsageError as exc:  # the flags' names, but a value may come from the config or the environment
        given = []
        for key, (value, source) in {**resolved, "spec_type": (kind_value, kind_source)}.items():
            if "--" + key.removeprefix("spec_").replace("_", "-") in exc.message.replace("--spec-", "--"):
                given.append(
                    _came_from(key, value, source, spec_type if key == "spec_type" else counts[key], ctx)
                )
        if any(given) and exc.hint is None:
            exc.hint = "; ".join(g for g in given if g)
        raise
    return spec


def _came_from(key: str, value: object, source: str, flag: object, ctx: Any) -> str | None:
    """Where a setting that was not typed on the command line came from, for an error's hint:
    `$LLMCLI_SPEC_TYPE = bogus` or `spec_draft_n_min = 9 in the config file`; None when typed."""
    import json
    import os

    from llmcli import settings

    if source == "config":  # as TOML writes it
        shown = json.dumps(value) if isinstance(value, (str, bool)) else value
        return f"{key} = {shown} in the config file"
    if source == "env" or (source == "flag" and not _typed(flag, key, ctx)):
        return f"${settings.SETTINGS[key].env} = {os.environ.get(settings.SETTINGS[key].env, value)}"
    return None
