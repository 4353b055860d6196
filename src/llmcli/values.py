"""Values as users type them: a setting's declaration and the one parser that applies it.

A `Setting` (the registry is `llmcli.settings.SETTINGS`) declares everything a value of it must
be: its type, its range, its choices, and the special values that stand for "the engine's own
default" (`-ngl -1`: every layer the build can offload; `-cd 0`: the target's context). `parse`
applies a declaration to a value wherever it was typed: a flag, an `LLMCLI_*` variable, the config
file, `config set`, chat's `/set` or an item of bench's sweep lists. The caller passes the name the
user typed (`--gpu-layers-draft`, `$LLMCLI_CACHE_TYPE_K`, `ctx_size`, `ctx-size-draft`) and the
error says it; nothing rewrites a message afterwards. `items` and `int_list` read bench's comma
lists and ranges (`-p 16,32 -p 64-512*2`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmcli.errors import UsageError

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}

# The words Click's boolean flags take, so that LLMCLI_SPEC_EXACT=y means what --spec-exact does.
BOOL_WORDS = {word: True for word in ("1", "true", "t", "yes", "y", "on")} | {
    word: False for word in ("0", "false", "f", "no", "n", "off")
}


def negative(value: Any) -> bool:
    return value < 0


def zero(value: Any) -> bool:
    return value == 0


@dataclass(frozen=True)
class Setting:
    key: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    fold_case: bool = False  # choices taken in any case (as the flag takes them), kept lowercased
    # The values that stand for the engine's own default (the option is None then): `negative` for
    # the GPU layers (all the build can offload), `zero` for a context size (the model's, the target's)
    none_if: Callable[[Any], bool] | None = None
    # what those values mean, said where a value is out of range: "0: the target's"
    note: str = ""
    # what a choice is, where a name the user typed is refused: "-ctk: unknown KV cache type 'q9'"
    noun: str = ""

    @property
    def env(self) -> str:
        return "LLMCLI_" + self.key.upper()

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES[self.type]

    def option(self, value: Any) -> Any:
        """`value` as the engine option: None for a value that stands for the engine's default."""
        if value is None or (self.none_if is not None and self.none_if(value)):
            return None
        return value


class Invalid(UsageError, ValueError):
    """A value its setting does not take: one line naming what the user typed (and a hint)."""


def _shown(raw: Any) -> str:
    return {dict: "a table", list: "an array", bool: "a boolean"}.get(type(raw), repr(raw))


def parse(setting: Setting, raw: Any, name: str | None = None, *, text: bool = False) -> Any:
    """`raw` checked against `setting` (type, choices, range) and returned as its type; `text`:
    `raw` is text as typed (an environment variable, `config set`, `/set`, a list item) and is
    converted. `name` is what the user typed (a flag, `$LLMCLI_X`, a `/set` key; default the config
    key), and the `Invalid` error says it."""
    typed, name = name is not None, name or setting.key
    if text and isinstance(raw, str) and setting.type is not str:
        word = raw.strip()
        try:
            value: Any = BOOL_WORDS[word.lower()] if setting.type is bool else setting.type(word)
        except (KeyError, ValueError):
            raise Invalid(f"{name} must be {setting.type_name}, got {_shown(word)}") from None
    elif setting.type is float and isinstance(raw, int) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, setting.type) and not (setting.type is int and isinstance(raw, bool)):
        value = raw
    else:
        raise Invalid(f"{name} must be {setting.type_name}, got {_shown(raw)}")
    if setting.fold_case and isinstance(value, str):
        value = value.strip().lower()
    if setting.choices and value not in setting.choices:
        if setting.noun and typed:  # a flag or /set name reads as the thing; a config key as the setting
            raise Invalid(f"{name}: unknown {setting.noun} {raw!r}",
                          hint="one of " + ", ".join(c for c in setting.choices if c))  # fmt: skip
        names = ", ".join(c or '"" (empty)' for c in setting.choices)
        raise Invalid(f"{name} must be one of {names}, got {value!r}")
    low, high = setting.minimum, setting.maximum
    if low is not None and value < low:
        if setting.note and typed:  # what the special values mean, to whoever typed the flag
            raise Invalid(f"{name} must be >= {low:g} ({setting.note}), got {value!r}")
        raise Invalid(f"{name} must be at least {low:g}, got {value!r}")
    if high is not None and value > high:
        raise Invalid(f"{name} must be at most {high:g}, got {value!r}")
    return value


# -- bench's sweep lists ---------------------------------------------------------------------------

_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?:([+*])(\d+))?)?$")


def items(name: str, values: list[str]) -> list[str]:
    """The items of comma lists given once or repeated: `-t 1,2 -t 4` -> ["1", "2", "4"]."""
    found = [part.strip() for value in values for part in value.split(",")]
    if any(not item for item in found):
        raise UsageError(
            f"{name}: empty value in {','.join(values)!r}", hint="separate values with single commas"
        )
    return found


def dedupe(found: list) -> list:
    return list(dict.fromkeys(found))


def int_list(name: str, values: list[str], minimum: int = 0) -> list[int]:
    """`-p 128,256 -p 512-2048*2` -> [128, 256, 512, 1024, 2048]: numbers and ranges
    `first-last`, `first-last+step`, `first-last*mult`, each at least `minimum`."""
    out: list[int] = []
    for item in items(name, values):
        out += _int_item(name, item, minimum)
    return dedupe(out)


def _int_item(name: str, item: str, minimum: int) -> list[int]:
    match = _ITEM.match(item)
    if not match:
        if re.fullmatch(r"-\d+", item):
            raise UsageError(f"{name} must be >= {minimum}, got {item}")
        raise UsageError(
            f"{name}: malformed value {item!r}",
            hint="use a number, a comma list, or a range first-last, first-last+step or first-last*mult",
        )
    first, last, op, step = match.groups()
    found = (
        [int(first)] if last is None else _range(name, item, int(first), int(last), op or "+", int(step or 1))
    )
    low = min(found)
    if low < minimum:
        raise UsageError(f"{name} must be >= {minimum}, got {low}")
    return found


def _range(name: str, item: str, first: int, last: int, op: str, step: int) -> list[int]:
    if last < first:
        raise UsageError(
            f"{name}: malformed range {item!r}: the last value {last} is below the first {first}"
        )
    if op == "+" and step < 1:
        raise UsageError(f"{name}: malformed range {item!r}: the step must be at least 1")
    if op == "*" and (step < 2 or first < 1):
        raise UsageError(f"{name}: malformed range {item!r}: multiply a first value >= 1 by at least 2")
    found, value = [], first
    while value <= last:
        found.append(value)
        value = value + step if op == "+" else value * step
    return found


def word_list(name: str, values: list[str], words: dict[str, Any], expected: str) -> list:
    """Each item one of `words` (any case), as llama-bench's 0/1 lists: `-fa 0,1`."""
    out = []
    for item in items(name, values):
        if item.lower() not in words:
            raise UsageError(f"{name}: expected {expected}, got {item!r}")
        out.append(words[item.lower()])
    return dedupe(out)


def setting_list(setting: Setting, name: str, values: list[str]) -> list:
    """Each item parsed as a value of `setting`, named by the flag (`-ctk q8_0,f16`)."""
    return dedupe([parse(setting, item, name, text=True) for item in items(name, values)])
