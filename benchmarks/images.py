"""An image question, llmcli side by side with llama.cpp's `llama-mtmd-cli` (built from the same
vendored source, tests/llamacpp_tools.py): the same model (the bundled SmolLM2-135M), the same
projector (the tiny test projector of tests/projector.py), the same images and flags, greedy.

For each image size it reports llmcli's own figures from `--json` (image tokens, encode ms,
prefill ms) and the wall clock of the whole process (load, encode, prefill, 16 tokens) for both
tools, run alternately `--runs` times; the ratio is of the medians.

    python benchmarks/images.py [--runs 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

QUESTION = "Describe the image in one word."
SIZES = [(64, 64), (1024, 768)]


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=env, stdin=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import llamacpp_tools
    import projector
    from test_images import png

    from llmcli.hub.default_model import model_path

    model, mmproj = model_path("smollm2-135m"), projector.path()
    tool = llamacpp_tools.ensure("llama-mtmd-cli")["llama-mtmd-cli"]
    common = ["--temp", "0", "-n", "16", "-t", str(args.threads), "-c", "8192"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    print(f"model {Path(model).name}, projector {Path(mmproj).name}, {args.runs} runs, -t {args.threads}")
    print("| image | tokens | encode ms | prefill ms | llmcli wall s | llama-mtmd-cli wall s | ratio |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for width, height in SIZES:
            image = Path(tmp) / f"noise-{width}x{height}.png"
            image.write_bytes(png(width, height, noise=1))
            ours_cmd = [sys.executable, "-m", "llmcli", "generate", "-m", str(model), "--mmproj", str(mmproj),
                        "-a", str(image), QUESTION, "-nfa", "--json", *common]  # fmt: skip
            theirs_cmd = [str(tool), "-m", str(model), "--mmproj", str(mmproj), "--image", str(image),
                          "-p", QUESTION, "--jinja", "-fa", "off", *common,
                          *llamacpp_tools.weights_args("llama-mtmd-cli")]  # fmt: skip
            ours, theirs, encode, prefill, tokens = [], [], [], [], 0
            for _ in range(args.runs):
                wall, out = timed(ours_cmd, env)
                doc = json.loads(out)
                ours.append(wall)
                encode.append(doc["timings"]["image_ms"])
                prefill.append(doc["timings"]["prefill_ms"])
                tokens = doc["usage"]["image_tokens"]
                theirs.append(timed(theirs_cmd)[0])
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"| {width}x{height} PNG | {tokens} | {statistics.median(encode):.2f} | "
                  f"{statistics.median(prefill):.0f} | {a:.3f} | {b:.3f} | {a / b:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
