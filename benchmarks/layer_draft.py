"""A smaller draft model with the target's own vocabulary: the target with some layers left out.

No smaller model sharing a vocabulary with the bundled Gemma 3 270M or SmolLM2-135M-Instruct is
installable here, so this writes one: a copy of the target GGUF keeping only the chosen
transformer blocks (renumbered), with the embedding, final norm, output head and tokenizer
unchanged (`gguf` package, tensors copied byte for byte, no re-quantization). It is what
self-speculative "layer skipping" drafts are, without the training that makes them good.

    python benchmarks/layer_draft.py smollm2-135m --keep 0-9,26-29 --out /tmp/smol-14.gguf
    python benchmarks/layer_draft.py smollm2-135m --keep 0-9,26-29 --measure

`--measure` then runs the target with that draft (`--spec-type draft`, adaptive and fixed k) next
to plain decoding on the copy-heavy and nothing-to-copy prompts of benchmarks/speculative.py, and
prints effective decode speed, acceptance and the draft's cost per token. Run it under the
exclusive CPU lock on a quiet machine.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def parse_keep(spec: str, n_layers: int) -> list[int]:
    """ "0-9,26-29" or "every:2" (blocks 0, 2, 4, ... and always the last) -> sorted block indices."""
    if spec.startswith("every:"):
        step = int(spec.split(":", 1)[1])
        keep = set(range(0, n_layers, step)) | {n_layers - 1}
    else:
        keep = set()
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            keep.update(range(int(lo), int(hi or lo) + 1))
    bad = [i for i in keep if not 0 <= i < n_layers]
    if bad or not keep:
        raise SystemExit(f"--keep {spec!r}: blocks must be within 0-{n_layers - 1}")
    return sorted(keep)


def write_draft(source: Path, keep_spec: str, out: Path) -> tuple[int, int]:
    import gguf

    reader = gguf.GGUFReader(str(source))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    count_key = f"{arch}.block_count"
    n_layers = int(reader.fields[count_key].contents())
    keep = parse_keep(keep_spec, n_layers)
    renumber = {old: new for new, old in enumerate(keep)}
    writer = gguf.GGUFWriter(str(out), arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = len(keep) if field.name == count_key else field.contents()
        writer.add_key_value(field.name, value, vtype, sub_type=sub)
    tensors = []
    for tensor in reader.tensors:
        m = re.match(r"blk\.(\d+)\.(.*)", tensor.name)
        if m is None:
            tensors.append((tensor.name, tensor))
        elif int(m.group(1)) in renumber:
            tensors.append((f"blk.{renumber[int(m.group(1))]}.{m.group(2)}", tensor))
    for name, tensor in tensors:
        data = tensor.data
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, tensor in tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    return len(keep), n_layers


def measure(target: Path, draft: Path, rounds: int, tokens: int, threads: int) -> None:
    import speculative

    from llmcli.contract import EngineOptions, SpecOptions
    from llmcli.engine.llama import LlamaEngine

    def engine(spec: SpecOptions | None = None) -> LlamaEngine:
        return LlamaEngine(str(target), EngineOptions(ctx_size=4096, threads=threads,
                                                      speculative=spec or SpecOptions()))  # fmt: skip

    runners = {
        "plain": engine(),
        "draft adaptive": engine(SpecOptions(kind="draft", draft_max=8, model_draft=str(draft), exact=False)),
        "draft k=4": engine(
            SpecOptions(kind="draft", draft_max=4, model_draft=str(draft), exact=False, adaptive=False)
        ),
    }
    prompts = {"copy": speculative.copy_prompt(), "nothing-to-copy": speculative.NOTHING_TO_COPY}
    for label, prompt in prompts.items():
        rows: dict[str, list[dict]] = {key: [] for key in runners}
        for r in runners.values():
            speculative.llmcli_run(r, prompt, tokens)  # warm-up
        order = list(runners)
        for i in range(rounds):
            for key in order[i % len(order) :] + order[: i % len(order)]:
                rows[key].append(speculative.llmcli_run(runners[key], prompt, tokens))
        plain = statistics.median(x["tps"] for x in rows["plain"])
        print(f"\n{target.name} with {draft.name} · {label} prompt · median of {rounds} runs")
        for key, xs in rows.items():
            tps = statistics.median(x["tps"] for x in xs)
            d = sum(x["drafted"] for x in xs)
            a = sum(x["accepted"] for x in xs)
            share = f"{a}/{d} ({100 * a / d:.0f}%)" if d else "-"
            print(f"  {key:<16} {tps:8.1f} tok/s {tps / plain:6.2f}x plain  accepted {share}")
    for r in runners.values():
        r.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a bundled model name (gemma3-270m, smollm2-135m) or a GGUF path")
    ap.add_argument("--keep", default="every:2", help='blocks to keep: "0-9,26-29" or "every:2"')
    ap.add_argument("--out", type=Path, help="where to write the draft (default: a temporary file)")
    ap.add_argument("--measure", action="store_true", help="measure the target with this draft")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=192)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    path = Path(args.model)
    if not path.is_file():
        from llmcli.hub import default_model

        path = Path(default_model.model_path(args.model))
    out = args.out or Path(tempfile.mkdtemp(prefix="llmcli-draft-")) / f"{path.stem}-draft.gguf"
    kept, total = write_draft(path, args.keep, out)
    size = out.stat().st_size / 1e6
    print(f"wrote {out}: {kept} of {total} blocks, {size:.0f} MB (target {path.stat().st_size / 1e6:.0f} MB)")
    if args.measure:
        measure(path, out, args.rounds, args.tokens, args.threads)


if __name__ == "__main__":
    main()
