"""What it would take for `--spec-exact` to verify in batches at long contexts on the CPU.

On the CPU, a verification batch stops matching one-token steps once the cache view reaches 512
cells: flash attention then computes a single query by splitting the keys across threads and
merging the partial sums, and several queries without splitting, so the two round apart.
ggml's CPU backend has a switch that makes both take the unsplit path
(`ggml_backend_cpu_set_use_ref`: no split-KV, no tiling, no op fusion), but llama.cpp's API does not
hand out the CPU backend a context made, so the product cannot set it.

This script finds that backend anyway, for measuring only: the context keeps it next to the abort
callback's data pointer, which the engine sets to a buffer of its own, so that pointer marks the
place. The backend found is checked with `ggml_backend_is_cpu` and against the context's list of
backends before anything is called on it; where the check fails the script stops.

Then, per model and thread count, it reports
- the largest batch whose logits are bit-identical to one-token steps after 8, 296, 700 and 1500
  cached tokens (the exactness probe `--spec-exact` runs), with the switch off and on;
- plain decoding's speed (one-token steps) at those depths with the switch off and on, measured
  alternately on one context (the ratio is what plain decoding would pay for the switch, since
  the text is the plain text only when plain decoding computes the same way as the batches).

Run: python benchmarks/exact_attention.py [--models smollm2-135m,gemma3-270m] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

DEPTHS = (8, 296, 700, 1500)
TOP = 9  # batch sizes probed: 2 to 9, as --spec-draft-n-max 8 would verify


class CpuBackend:
    """The CPU backend of an engine's llama.cpp context, found by the abort callback's data."""

    def __init__(self, engine) -> None:
        import llama_cpp

        lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so"))
        lib.ggml_backend_is_cpu.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_is_cpu.restype = ctypes.c_bool
        lib.ggml_backend_cpu_set_use_ref.argtypes = [ctypes.c_void_p, ctypes.c_bool]
        self._lib = lib
        self.handle = self._find(engine)

    def _find(self, engine) -> int:
        ctx = ctypes.cast(engine._ctx, ctypes.c_void_p).value
        data = engine._abort.data.value
        callback = ctypes.cast(engine._abort.callback, ctypes.c_void_p).value
        with open("/proc/self/mem", "rb", buffering=0) as mem:  # reads fail cleanly, never fault
            raw = os.pread(mem.fileno(), 8192, ctx)
        words = struct.unpack(f"<{len(raw) // 8}Q", raw)
        marks = [i for i in range(9, len(words)) if words[i] == data and words[i - 1] == callback]
        if len(marks) != 1:
            sys.exit(f"exact_attention: the context's layout is not the expected one ({len(marks)} marks)")
        # backend_cpu, then backends (begin, end, capacity), opt_ctx, threadpool, threadpool_batch,
        # abort_callback, abort_callback_data
        i = marks[0]
        backend, begin, end = words[i - 8], words[i - 7], words[i - 6]
        count = (end - begin) // 8
        with open("/proc/self/mem", "rb", buffering=0) as mem:
            listed = (
                struct.unpack(f"<{count}Q", os.pread(mem.fileno(), 8 * count, begin))
                if 0 < count < 16
                else ()
            )
        if backend not in listed or not self._lib.ggml_backend_is_cpu(backend):
            sys.exit("exact_attention: the backend found is not the context's CPU backend")
        return backend

    def use_ref(self, on: bool) -> None:
        self._lib.ggml_backend_cpu_set_use_ref(self.handle, on)


def decode_speed(engine, depth: int, tokens: list[int], steps: int) -> float:
    """One-token steps per second after `depth` cached tokens."""
    import llama_cpp

    engine.trim(depth)
    started = time.perf_counter()
    for t in tokens[:steps]:
        if engine.decode([t]) != 0:
            raise RuntimeError("llama_decode failed")
    llama_cpp.llama_synchronize(engine._ctx)
    return steps / (time.perf_counter() - started)


def measure(name: str, threads: int, rounds: int, steps: int) -> dict:
    from llmcli.contract import EngineOptions, SpecOptions
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub import default_model

    spec = SpecOptions(
        kind="lookup", draft_max=TOP - 1, exact=False, adaptive=False
    )  # for the probe's batches
    engine = LlamaEngine(
        default_model.model_path(name), EngineOptions(ctx_size=2048, threads=threads, speculative=spec)
    )
    backend = CpuBackend(engine)
    row: dict = {"model": name, "threads": threads, "exact_positions": {}, "decode_tps": {}}
    for on in (False, True):
        backend.use_ref(on)
        row["exact_positions"]["ref" if on else "default"] = {d: engine._probe_exact(d, TOP) for d in DEPTHS}
    text = "The quick brown fox jumps over the lazy dog; def f(x): return x * 42. "
    tokens = engine.tokenize(text * 300, add_bos=False)
    for depth in DEPTHS[1:]:
        engine.reset()
        backend.use_ref(False)  # the prompt as prefill evaluates it
        for i in range(0, depth, engine.n_batch):
            engine.decode(tokens[i : min(depth, i + engine.n_batch)])
        speeds: dict[bool, list[float]] = {False: [], True: []}
        for r in range(rounds):
            for on in (False, True) if r % 2 else (True, False):
                backend.use_ref(on)
                speeds[on].append(decode_speed(engine, depth, tokens[depth:], steps))
        ratios = [b / a for a, b in zip(speeds[False], speeds[True], strict=True)]
        row["decode_tps"][depth] = {
            "default": round(statistics.median(speeds[False]), 2),
            "ref": round(statistics.median(speeds[True]), 2),
            "ratio": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
    backend.use_ref(False)
    engine.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON document")
    args = parser.parse_args()
    os.environ["LLMCLI_CACHE_DIR"] = tempfile.mkdtemp(prefix="llmcli-exact-")  # nothing stored is read
    rows = [
        measure(m, int(t), args.rounds, args.steps)
        for m in args.models.split(",")
        for t in args.threads.split(",")
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print(f"{row['model']}, {row['threads']} thread(s)")
        for mode, limits in row["exact_positions"].items():
            cells = ", ".join(f"{d}: {n}" for d, n in limits.items())
            print(f"  exact batch limit, {mode:7s} kernels: {cells}")
        for depth, s in row["decode_tps"].items():
            lo, hi = s["ratio_range"]
            print(f"  plain decode at {depth:4d} cells: {s['default']:6.1f} tok/s, with the switch "
                  f"{s['ref']:6.1f} ({s['ratio']:.3f}x, {lo:.3f}-{hi:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
