"""`llmcli bench --scenario spec`'s flags: the proposers and settings swept, the draft model's own
flags (not swept), and the prompt, parsed by the settings' declarations (`llmcli.values`)."""

from __future__ import annotations

from pathlib import Path

from llmcli import defaults
from llmcli.errors import UsageError
from llmcli.runspec.speculative import require_draft_model


def spec_sweep(kinds, k, k_min, ngram_max, ngram_min, adaptive, exact, draft, ngld, cd, ctkd, ctvd):
    from llmcli import values
    from llmcli.bench import spec
    from llmcli.bench import sweep as s
    from llmcli.engine.speculation.proposal import kind_of
    from llmcli.settings import SETTINGS

    # the setting's names (llama.cpp's aliases among them), then the proposers they name
    names = [kind_of(item) for item in values.setting_list(SETTINGS["spec_type"], "--spec-type", kinds or [])]
    if not names:
        names = ["none", "draft" if draft else "lookup"]
    if "draft" in names and not draft:
        raise UsageError("--spec-type draft needs a draft model: -md/--model-draft REF")
    if draft and "draft" not in names:
        raise UsageError(
            "-md/--model-draft is given but --spec-type lists no draft", hint="add draft to --spec-type"
        )
    require_draft_model(any(v is not None for v in (ngld, cd, ctkd, ctvd)), bool(draft))
    if cd is not None:
        cd = values.parse(SETTINGS["ctx_size_draft"], cd, "-cd/--ctx-size-draft")
    sweep = spec.SpecSweep(
        kinds=values.dedupe(["none", *names]),
        draft_max=s.parse_ints("--spec-draft-n-max", k, [defaults.SPEC_DRAFT_N_MAX]),
        draft_min=s.parse_ints("--spec-draft-n-min", k_min, [defaults.SPEC_DRAFT_N_MIN]),
        ngram_max=s.parse_ints("--spec-ngram-max", ngram_max, [defaults.SPEC_NGRAM_MAX], minimum=1),
        ngram_min=s.parse_ints("--spec-ngram-min", ngram_min, [defaults.SPEC_NGRAM_MIN], minimum=1),
        adaptive=adaptive, exact=exact, model_draft=draft,
        gpu_layers_draft=SETTINGS["gpu_layers_draft"].option(ngld),
        ctx_size_draft=SETTINGS["ctx_size_draft"].option(cd),
        type_k_draft=_one_cache_type("-ctkd", ctkd), type_v_draft=_one_cache_type("-ctvd", ctvd),
    )  # fmt: skip
    drafting = [k for k in sweep.draft_max if k > 0]
    if too_big := [m for m in sweep.draft_min if drafting and all(m > k for k in drafting)]:
        # a smaller k than n-min runs with n-min = k (a sweep over k); above every k it is a mistake
        raise UsageError(f"--spec-draft-n-min {too_big[0]} exceeds every --spec-draft-n-max "
                         f"({', '.join(map(str, drafting))})")  # fmt: skip
    if "lookup" in names and not any(b <= a for a in sweep.ngram_max for b in sweep.ngram_min):
        raise UsageError("--spec-ngram-min must not exceed --spec-ngram-max (in at least one combination)")
    sweep.points()  # every setting checked (k at most 64, n-gram lengths at most 16) before anything runs
    return sweep


def _one_cache_type(flag: str, value: str | None) -> str | None:
    """-ctkd/-ctvd: one KV cache type for the draft model (not swept), or None for the target's."""
    from llmcli.bench import sweep as s

    if value is None:
        return None
    types = s.parse_cache_types(flag, [value])
    if len(types) != 1:
        raise UsageError(f"{flag} takes one KV cache type, got {value!r}")
    return types[0]


def bools(flag: str, values: list[str] | None, off: bool, default: bool = True) -> list[bool]:
    from llmcli import values as v

    if off and values:
        raise UsageError(f"give {flag} or --no-{flag[2:]}, not both")
    if off:
        return [False]
    if not values:
        return [default]
    return v.word_list(flag, values, v.BOOL_WORDS, "0 or 1 (a comma list sweeps)")


def spec_prompt(prompt: str | None, file: Path | None) -> tuple[str, str]:
    """The prompt's text and where it came from, for the record."""
    from llmcli.bench.spec import DEFAULT_PROMPT

    if prompt is not None and file is not None:
        raise UsageError("give --prompt or -f/--file, not both")
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{file} is not UTF-8 text (invalid byte at offset {exc.start})") from None
        except OSError as exc:
            raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
        if not text.strip():
            raise UsageError(f"{file} is empty: no prompt to generate from")
        return text, str(file)
    if prompt is not None:
        if not prompt.strip():
            raise UsageError("--prompt is empty")
        return prompt, "--prompt"
    return DEFAULT_PROMPT, "default"

