"""A short answer's whole-process time: `llmcli generate` side by side with llama.cpp's
`llama-completion` (built from the same vendored source, tests/llamacpp_tools.py), and optionally
with another llmcli tree (`--other /path/to/checkout`, run from its `src`), alternating, medians.

Both tools load the bundled SmolLM2-135M, prefill the same prompt and decode 16 tokens greedy; each
runs as its user would start it (llmcli through its console script, with its bytecode written, as
an install has it). Then one cProfile-free breakdown of llmcli's own start: the import time of
each top module (`python -X importtime`).

    python benchmarks/startup.py [--runs 9] [--other ../base] [--image]

`--image` also times an image question (the tiny test projector) against `llama-mtmd-cli`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

PROMPT = "Say hi"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, capture_output=True, env=env, stdin=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def imports(cmd: list[str], env: dict[str, str]) -> list[tuple[int, str]]:
    """(cumulative us, module) of the modules imported at the top level of the process."""
    argv = [sys.executable, "-X", "importtime", "-m", "llmcli", *cmd[1:]]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, check=True)
    found = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)  # no indent: top level
        if match:
            found.append((int(match.group(1)), match.group(2)))
    return sorted(found, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--other", type=Path, help="another llmcli checkout to time beside this one")
    parser.add_argument("--image", action="store_true")
    args = parser.parse_args()
    import llamacpp_tools

    from llmcli.hub.default_model import model_path

    model = model_path("smollm2-135m")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    llmcli = shutil.which("llmcli") or sys.exit("llmcli is not on PATH (install it as the README says)")
    ours = [llmcli, "generate", "-m", str(model), "-n", "16", "--temperature", "0", PROMPT]
    tool = llamacpp_tools.ensure("llama-completion")["llama-completion"]
    theirs = [str(tool), "-m", str(model), "-p", PROMPT, "-n", "16", "--temp", "0", "-no-cnv",
              *llamacpp_tools.weights_args("llama-completion")]  # fmt: skip
    rows: dict[str, tuple[list[str], dict[str, str]]] = {"llmcli": (ours, env)}
    rows["llama-completion"] = (theirs, env)
    if args.other:
        other_env = {**env, "PYTHONPATH": str(args.other.resolve() / "src")}
        rows[f"llmcli ({args.other.name})"] = ([sys.executable, "-m", "llmcli", *ours[1:]], other_env)
    if args.image:
        import projector
        from test_images import png

        image = Path(tempfile.mkdtemp()) / "noise-64x64.png"
        image.write_bytes(png(64, 64, noise=1))
        mmproj = projector.path()
        question = "Describe the image in one word."
        same = ["-n", "16", "-c", "8192"]
        ours_image = [llmcli, "generate", "-m", str(model), "--mmproj", str(mmproj), "-a", str(image),
                      "--temperature", "0", "-nfa", *same, question]  # fmt: skip
        mtmd = llamacpp_tools.ensure("llama-mtmd-cli")["llama-mtmd-cli"]
        theirs_image = [str(mtmd), "-m", str(model), "--mmproj", str(mmproj), "--image", str(image),
                        "-p", question, "--jinja", "-fa", "off", "--temp", "0", *same,
                        *llamacpp_tools.weights_args("llama-mtmd-cli")]  # fmt: skip
        rows["llmcli image"] = (ours_image, env)
        rows["llama-mtmd-cli image"] = (theirs_image, env)
    for cmd, cmd_env in rows.values():  # warm the page cache and write the bytecode
        timed(cmd, cmd_env)
    walls: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.runs):
        for name, (cmd, cmd_env) in rows.items():
            walls[name].append(timed(cmd, cmd_env))
    load = os.getloadavg()[0]
    print(f"model {Path(model).name}, 16 tokens greedy, {args.runs} alternating runs, load {load:.2f}")
    print("| command | median s | min s | max s | vs llama-completion |")
    print("|---|---:|---:|---:|---:|")
    base = statistics.median(walls["llama-completion"])
    for name, values in walls.items():
        median = statistics.median(values)
        versus = base
        if name.endswith("image"):
            versus = statistics.median(walls["llama-mtmd-cli image"])
        print(f"| {name} | {median:.3f} | {min(values):.3f} | {max(values):.3f} | {median / versus:.2f}x |")
    print("\nllmcli's top-level imports (python -X importtime, cumulative ms):")
    for micros, module in imports(ours, env)[:12]:
        print(f"  {micros / 1000:7.1f}  {module}")


if __name__ == "__main__":
    main()
