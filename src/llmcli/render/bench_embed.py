"""`llmcli bench --scenario embed` as a Markdown table: per model, thread count and batch size,
texts/s and tokens/s (mean ± sd over the repetitions) and the load time."""

from __future__ import annotations

from typing import Any

from llmcli.engine.cpu_load import NOISY
from llmcli.render import tables


def markdown(doc: dict[str, Any]) -> str:
    head = ["model", "pooling", "threads", "batch", "texts", "tokens", "texts/s", "tokens/s", "load ms"]
    body = []
    for r in doc["results"]:
        body.append([
            r["model_filename"], r["pooling"], str(r["n_threads"]),
            str(r["batch_tokens"]) if r["batch_tokens"] else "ctx", str(r["n_texts"]), str(r["n_tokens"]),
            f"{r['avg_texts_s']:.1f} ± {r['stddev_texts_s']:.1f}",
            f"{r['avg_ts']:.1f} ± {r['stddev_ts']:.1f}", f"{r['load_ms']:.0f}",
        ])  # fmt: skip
    right = [h not in ("model", "pooling") for h in head]
    table = tables.markdown(head, body, right) if body else "No test finished.\n"
    s = doc["settings"]
    env = doc["environment"]
    texts = "generated sentences" if s["texts"] == "generated" else s["texts"]
    warmup = "" if s["warmup"] else ", no warm-up"
    busiest = max(((r["other_load"], r["model_filename"], r["n_threads"]) for r in doc["results"]
                   if r.get("other_load") is not None), default=None)  # fmt: skip
    busy = ""
    if busiest is not None and busiest[0] > NOISY:
        busy = (f"busy machine: other processes used {busiest[0]:.0%} of the CPU during {busiest[1]} at "
                f"{busiest[2]} threads; numbers measured under load are noisy\n")  # fmt: skip
    return (f"{table}\nllmcli {env.get('llmcli_version')}, {s['n_texts']} texts ({texts}), "
            f"{s['repetitions']} repetitions{warmup}; mean ± sd\n{busy}")  # fmt: skip
