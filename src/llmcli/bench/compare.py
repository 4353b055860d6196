"""`llmcli bench compare OLD NEW`: per test, the speed ratio and whether it exceeds the noise.

Reads `llmcli bench -o json` documents, `-o jsonl` files, and llama-bench's own `-o json` / `-o jsonl`
output. Tests are matched on their name (pp512, tg128 @ d4096, chat turn 2 (reuse),
spec lookup k=8 tg128) and settings
(threads, batch sizes, GPU layers, flash attention, KV cache types) and, when either file holds
more than one model, the model file name; when either holds runs with and without weight
repacking (`--repack 0,1`), that too (a file that does not record it matches either). The verdict
comes from Welch's t-test on the per-repetition tokens-per-second samples: a difference is reported
as real when p < alpha (default 0.05).
Speculative cases (`--scenario spec`) also show each side's acceptance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmcli.bench import stats
from llmcli.errors import UsageError

KEY_FIELDS = ("test", "n_threads", "n_batch", "n_ubatch", "n_gpu_layers", "flash_attn", "type_k", "type_v")
# told apart only where a file holds more than one value of them
EXTRA_FIELDS = ("model_filename", "repack")
_LABELS = {"n_threads": "t", "n_batch": "b", "n_ubatch": "ub", "n_gpu_layers": "ngl", "flash_attn": "fa",
           "model_filename": "model"}  # fmt: skip


@dataclass
class Side:
    path: Path
    rows: dict[tuple, dict[str, Any]]  # key (KEY_FIELDS + EXTRA_FIELDS) -> record
    complete: bool = True

    def values(self, field: str) -> set[Any]:
        return {r[field] for r in self.rows.values()}


@dataclass
class Pair:
    key: tuple
    label: str
    old: list[float]
    new: list[float]
    welch: stats.Welch | None
    # --scenario spec: the share of drafted tokens accepted in each run (None: not drafted / not spec)
    acceptance: tuple[float | None, float | None] | None = None

    @property
    def ratio(self) -> float:
        old = stats.mean(self.old)
        return stats.mean(self.new) / old if old else float("nan")

    def verdict(self, alpha: float) -> str:
        if self.welch is None:
            return "n/a (fewer than 2 samples)"
        if not self.welch.significant(alpha):
            return "within noise"
        return "faster" if self.ratio > 1 else "slower"

    def record(self, alpha: float) -> dict[str, Any]:
        return {
            "test": self.label,
            "old_avg_ts": round(stats.mean(self.old), 6),
            "old_stddev_ts": round(stats.stdev(self.old), 6),
            "new_avg_ts": round(stats.mean(self.new), 6),
            "new_stddev_ts": round(stats.stdev(self.new), 6),
            "ratio": round(self.ratio, 6),
            "t": None if self.welch is None else _finite(self.welch.t),
            "df": None if self.welch is None else _finite(self.welch.df),
            "p_value": None if self.welch is None else round(self.welch.p_value, 6),
            "verdict": self.verdict(alpha),
            **({"old_acceptance": self.acceptance[0], "new_acceptance": self.acceptance[1]}
               if self.acceptance is not None else {}),
        }  # fmt: skip


@dataclass
class Comparison:
    old: Side
    new: Side
    pairs: list[Pair]
    only_old: list[str]
    only_new: list[str]
    alpha: float

    def document(self) -> dict[str, Any]:
        return {
            "old": str(self.old.path),
            "new": str(self.new.path),
            "alpha": self.alpha,
            "method": "Welch's t-test on per-repetition tokens/s, two-sided",
            "comparisons": [p.record(self.alpha) for p in self.pairs],
            "only_in_old": self.only_old,
            "only_in_new": self.only_new,
        }


def compare(old_path: Path, new_path: Path, alpha: float = 0.05) -> Comparison:
    if not 0 < alpha < 1:
        raise UsageError(f"--alpha must be between 0 and 1, got {alpha}")
    old, new = load(old_path), load(new_path)
    extras = [f for f in EXTRA_FIELDS if len(old.values(f)) > 1 or len(new.values(f)) > 1]
    old_rows, new_rows = _rekey(old, extras), _rekey(new, extras)
    common = [k for k in old_rows if k in new_rows]
    if not common:
        raise UsageError(
            f"{old_path} and {new_path} have no test in common "
            f"(old: {_names(old_rows)}; new: {_names(new_rows)})",
            hint="compare runs of the same tests with the same settings",
        )
    fields = KEY_FIELDS + tuple(extras)
    varying = [fields[i] for i in range(1, len(fields)) if len({k[i] for k in common}) > 1]
    pairs = [_pair(k, old_rows[k], new_rows[k], fields, varying) for k in common]
    only_old = [_label(k, fields, varying) for k in old_rows if k not in new_rows]
    only_new = [_label(k, fields, varying) for k in new_rows if k not in old_rows]
    return Comparison(old, new, pairs, only_old, only_new, alpha)


def _pair(key: tuple, old: dict, new: dict, fields: tuple[str, ...], varying: list[str]) -> Pair:
    a, b = samples_ts(old), samples_ts(new)
    both = "acceptance" in old and "acceptance" in new
    acceptance = (old.get("acceptance"), new.get("acceptance")) if both else None
    return Pair(key, _label(key, fields, varying), a, b, stats.welch(a, b), acceptance)


def _rekey(side: Side, extras: list[str]) -> dict[tuple, dict]:
    """The records keyed on the settings and the extra fields that tell them apart."""
    return {tuple(r[f] for f in KEY_FIELDS) + tuple(r[f] for f in extras): r for r in side.rows.values()}


def _names(rows: dict[tuple, dict]) -> str:
    names = list(dict.fromkeys(r["test"] for r in rows.values()))
    return ", ".join(names[:6]) + (", ..." if len(names) > 6 else "") if names else "nothing"


def _label(key: tuple, fields: tuple[str, ...], varying: list[str]) -> str:
    extra = [f"{_LABELS.get(f, f)}={_shown(key[fields.index(f)])}" for f in varying]
    return key[0] + (f" [{', '.join(extra)}]" if extra else "")


def _shown(value: Any) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


# -- reading ---------------------------------------------------------------------------------


def load(path: Path) -> Side:
    """Records from a result file, keyed; one clear UsageError for anything unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a benchmark result: not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    records, complete = _records(path, text)
    rows: dict[tuple, dict[str, Any]] = {}
    for i, record in enumerate(records):
        normal = normalize(record, path, i)
        rows[tuple(normal[f] for f in KEY_FIELDS + EXTRA_FIELDS)] = normal
    if not rows:
        raise UsageError(f"{path} holds no results")
    return Side(Path(path), rows, complete)


def _records(path: Path, text: str) -> tuple[list[Any], bool]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        records = _json_lines(path, text)
        return records, _finished(records)
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        return doc["results"], bool(doc.get("complete", True))
    if isinstance(doc, list):
        return doc, True
    if isinstance(doc, dict) and ("samples_ts" in doc or "samples_ns" in doc):
        return [doc], _finished([doc])
    raise UsageError(f"{path} is not a benchmark result", hint=_EXPECTED)


def _finished(records: list[Any]) -> bool:
    """Whether the run behind flat records finished: none says otherwise (`run_complete`, CSV's
    and older files'), and the last is its run's last planned result (`-o jsonl` writes each record
    as it finishes, so a run cut short leaves fewer lines than `results_planned`)."""
    if any(isinstance(r, dict) and r.get("run_complete") is False for r in records):
        return False
    last = records[-1] if records else None
    if isinstance(last, dict):
        index, planned = last.get("result_index"), last.get("results_planned")
        if isinstance(index, int) and isinstance(planned, int) and index < planned:
            return False
    return True


_EXPECTED = "expected the output of llmcli bench -o json or -o jsonl, or llama-bench -o json or -o jsonl"


def _json_lines(path: Path, text: str) -> list[Any]:
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{path} is not a benchmark result: line {number}: {exc.msg}", hint=_EXPECTED
            ) from None
    return records


def normalize(record: Any, path: Path, index: int) -> dict[str, Any]:
    """One record, ours or llama-bench's, with the key fields and tokens/s samples filled in."""
    if not isinstance(record, dict):
        raise UsageError(
            f"{path} is not a benchmark result: entry {index + 1} is not an object", hint=_EXPECTED
        )
    r = dict(record)
    if "test" not in r:
        r["test"] = _llama_bench_name(r, path, index)
    r["model_filename"] = Path(str(r.get("model_filename") or "?")).name
    r["flash_attn"] = _flag(r.get("flash_attn"))
    r["repack"] = _flag(r.get("repack"))
    r["n_gpu_layers"] = _gpu_layers(r.get("n_gpu_layers"), r.get("model_n_layers"))
    for f in KEY_FIELDS:
        r.setdefault(f, None)
    r["samples_ts"] = samples_ts(r)
    if not r["samples_ts"]:
        raise UsageError(
            f"{path}: {r['test']} has no samples (samples_ts, samples_ns or avg_ts)", hint=_EXPECTED
        )
    return r


def _llama_bench_name(r: dict, path: Path, index: int) -> str:
    try:
        p, n, d = int(r.get("n_prompt", 0)), int(r.get("n_gen", 0)), int(r.get("n_depth", 0) or 0)
    except (TypeError, ValueError):
        p = n = d = 0
    if p <= 0 and n <= 0:
        raise UsageError(f"{path}: entry {index + 1} names no test (test, n_prompt or n_gen)", hint=_EXPECTED)
    name = f"pp{p}+tg{n}" if p and n else (f"pp{p}" if p else f"tg{n}")
    return f"{name} @ d{d}" if d else name


def samples_ts(r: dict) -> list[float]:
    values = r.get("samples_ts")
    if isinstance(values, list) and values and all(_number(v) for v in values):
        return [float(v) for v in values]
    ns = r.get("samples_ns")
    tokens = (r.get("n_prompt") or 0) + (r.get("n_gen") or 0)
    if isinstance(ns, list) and ns and all(_number(v) and v > 0 for v in ns) and tokens:
        return [tokens * 1e9 / v for v in ns]
    avg = r.get("avg_ts")
    return [float(avg)] if isinstance(avg, int | float) and _number(avg) else []


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _gpu_layers(value: Any, n_layers: Any) -> Any:
    """The value "all" for every way of asking for all layers: llama.cpp's -1 (llama-bench's default since
    it took llama.cpp's), and any count above the model's layers (the older default 99; without
    the model's layer count, as in llama-bench's records, from 99 on)."""
    if not _number(value):
        return value
    known = n_layers if _number(n_layers) and n_layers > 0 else 98
    return "all" if value < 0 or value > known else value


def _flag(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if value in (0, 1):
        return bool(value)
    return value


def _finite(value: float) -> float | None:
    return round(value, 6) if value == value and abs(value) != float("inf") else None
