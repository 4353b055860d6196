"""Quantizations: naming them from file names, grouping split files, and choosing the default.

A repository's GGUF files are grouped into models: a single file, or the shards of a split
model (`name-00001-of-00003.gguf` ...), which are always fetched and removed together. Each
group is labelled with the quantization found in its file name (Q4_K_M, IQ4_XS, UD-Q4_K_XL,
F16...). Vision projectors (`mmproj`) and importance matrices (`imatrix`) are not models; a
model's projector is fetched with it (`choose_projector`).

With no quantization asked for, the first label present in `PREFERENCE` is chosen: the
4-5 bit K-quants that are the usual best trade of size for quality, then larger ones, then
smaller ones, with unquantized weights last. A repository whose files carry no recognisable
label gets its first model in name order.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from llmcli.errors import ModelNotFoundError

PREFERENCE: tuple[str, ...] = (
    "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q4_0", "Q8_0", "IQ4_XS", "IQ4_NL", "Q5_K_S", "Q6_K",
    "UD-Q4_K_XL", "Q4_K_L", "Q4_1", "Q5_0", "Q5_1", "UD-Q5_K_XL", "UD-Q6_K_XL", "UD-Q8_K_XL",
    "Q3_K_L", "Q3_K_M", "IQ3_M", "Q3_K_S", "IQ3_S", "IQ3_XS", "IQ3_XXS", "UD-Q3_K_XL",
    "Q2_K_L", "Q2_K", "UD-Q2_K_XL", "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S",
    "TQ2_0", "TQ1_0", "MXFP4", "MXFP4_MOE", "BF16", "F16", "F32",
)  # fmt: skip

# Approximate bits per weight, for a parameter count estimated from a file size.
BITS_PER_WEIGHT: dict[str, float] = {
    "F32": 32, "F16": 16, "BF16": 16, "Q8_0": 8.5, "Q6_K": 6.56, "Q5_1": 6.0, "Q5_0": 5.5,
    "Q5_K_M": 5.69, "Q5_K_S": 5.54, "Q4_1": 5.0, "Q4_0": 4.55, "Q4_K_L": 5.0, "Q4_K_M": 4.85,
    "Q4_K_S": 4.58, "IQ4_NL": 4.5, "IQ4_XS": 4.25, "Q3_K_L": 4.27, "Q3_K_M": 3.91, "Q3_K_S": 3.5,
    "IQ3_M": 3.66, "IQ3_S": 3.44, "IQ3_XS": 3.3, "IQ3_XXS": 3.06, "Q2_K": 3.35, "Q2_K_L": 3.5,
    "IQ2_M": 2.7, "IQ2_S": 2.5, "IQ2_XS": 2.31, "IQ2_XXS": 2.06, "IQ1_M": 1.75, "IQ1_S": 1.56,
    "TQ1_0": 1.69, "TQ2_0": 2.06, "MXFP4": 4.25, "MXFP4_MOE": 4.25,
}  # fmt: skip

_LABEL = r"(?:UD-)?(?:I?Q[1-8](?:_[0-9A-Z]{1,4})*|BF16|F16|F32|F64|MXFP4(?:_MOE)?|TQ[12]_0)"
_LABEL_IN_NAME = re.compile(rf"(?:^|[-._])({_LABEL})(?=$|[-._])", re.IGNORECASE)
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_NOT_MODELS = re.compile(r"mmproj|imatrix", re.IGNORECASE)


@dataclass(frozen=True)
class Group:
    """One model in a repository: one file, or every shard of a split file (in order)."""

    label: str | None  # quantization from the file name, upper-case; None if none is recognisable
    files: tuple[str, ...]
    expected_shards: int = 1

    @property
    def first(self) -> str:
        return self.files[0]

    @property
    def complete(self) -> bool:
        return len(self.files) == self.expected_shards

    @property
    def display_label(self) -> str:
        return self.label or "?"


def is_gguf(path: str) -> bool:
    return path.lower().endswith(".gguf")


def is_model_file(path: str) -> bool:
    return is_gguf(path) and not _NOT_MODELS.search(posixpath.basename(path))


def label_of(path: str) -> str | None:
    """The quantization named in a file name or its folder, e.g. "Q4_K_M"; None if there is none."""
    name = posixpath.basename(path)
    split = _SPLIT.match(name)
    stem = split.group("stem") if split else name[: -len(".gguf")] if is_gguf(name) else name
    for candidate in (stem, posixpath.dirname(path)):
        matches = _LABEL_IN_NAME.findall(candidate)
        if matches:
            return matches[-1].upper()
    return None


def group_files(paths: Iterable[str]) -> list[Group]:
    """Group model files into single files and complete-or-not split sets, sorted by path."""
    singles: list[Group] = []
    splits: dict[tuple[str, str], dict[int, str]] = {}
    for path in sorted(p for p in paths if is_model_file(p)):
        match = _SPLIT.match(posixpath.basename(path))
        if match is None:
            singles.append(Group(label_of(path), (path,)))
            continue
        key = (posixpath.join(posixpath.dirname(path), match.group("stem")), match.group("count"))
        splits.setdefault(key, {})[int(match.group("index"))] = path
    for (_stem, count), shards in splits.items():
        files = tuple(shards[i] for i in sorted(shards))
        singles.append(Group(label_of(files[0]), files, int(count)))
    return sorted(singles, key=lambda g: g.first)


def preference_rank(label: str | None) -> int:
    if label in PREFERENCE:
        return PREFERENCE.index(label)
    return len(PREFERENCE)


def choose(groups: list[Group], *, repo: str, quant: str | None = None, filename: str | None = None) -> Group:
    """The group a reference names: by file, by quantization, or the default by `PREFERENCE`."""
    usable = [g for g in groups if g.complete]
    if not groups:
        raise ModelNotFoundError(
            f"{repo} has no GGUF model files",
            hint="llmcli runs GGUF models; look for a '-GGUF' repository of this model",
        )
    if filename:
        return _by_file(groups, repo, filename)
    if quant:
        matches = [g for g in usable if g.label == quant.upper()]
        if not matches:
            broken = [g for g in groups if g.label == quant.upper()]
            if broken:
                g = broken[0]
                raise ModelNotFoundError(
                    f"{repo}'s {quant.upper()} is a split model with {len(g.files)} of its "
                    f"{g.expected_shards} files in the repository",
                    hint="the upload is incomplete; choose another quantization, or try again later",
                )
            labels = available_labels(groups)
            raise ModelNotFoundError(
                f"{repo} has no {quant.upper()} quantization",
                hint=f"it has: {', '.join(labels)}" if labels else "it has only incomplete split models",
            )
        return matches[0]
    if not usable:
        raise ModelNotFoundError(
            f"{repo} has only incomplete split models", hint="name a file with org/repo/FILE"
        )
    return min(usable, key=lambda g: (preference_rank(g.label), g.first.count("/"), g.first))


def available_labels(groups: list[Group]) -> list[str]:
    labels = {g.display_label for g in groups if g.complete}
    return sorted(labels, key=lambda label: (preference_rank(label), label))


def _by_file(groups: list[Group], repo: str, filename: str) -> Group:
    for group in groups:
        if filename in group.files:
            return group
    for group in groups:  # tolerate a different case, as file systems and URLs sometimes do
        if filename.lower() in (f.lower() for f in group.files):
            return group
    names = ", ".join(g.first for g in groups[:8]) + (" ..." if len(groups) > 8 else "")
    raise ModelNotFoundError(f"{repo} has no model file {filename}", hint=f"it has: {names}")


def is_projector(path: str) -> bool:
    """An image projector, by llama.cpp's naming (`mmproj*.gguf`)."""
    return is_gguf(path) and posixpath.basename(path).lower().startswith("mmproj")


def choose_projector(paths: Iterable[str], group: Group) -> str | None:
    """The projector to fetch with `group`: an `mmproj*.gguf` in the same folder (where llama.cpp
    and llmcli look for it), of the model's own quantization, else F16, else the one whose bits
    per weight are nearest the model's (the larger on a tie). None where the folder has none."""
    folder = posixpath.dirname(group.first)
    found = sorted(p for p in paths if is_projector(p) and posixpath.dirname(p) == folder)
    if not found:
        return None
    labels = {p: label_of(p) for p in found}
    for wanted in (group.label, "F16"):
        for p in found:
            if wanted is not None and labels[p] == wanted:
                return p
    bits = BITS_PER_WEIGHT.get((group.label or "").removeprefix("UD-"), 16.0)
    return min(found, key=lambda p: (abs(BITS_PER_WEIGHT.get(labels[p] or "F16", 16.0) - bits),
                                     -BITS_PER_WEIGHT.get(labels[p] or "F16", 16.0), p))  # fmt: skip


def estimated_params(size_bytes: int, label: str | None) -> float:
    """Parameters implied by a file size at the label's bits per weight (5 when unknown)."""
    bpw = BITS_PER_WEIGHT.get((label or "").removeprefix("UD-"), 5.0)
    return size_bytes * 8 / bpw
