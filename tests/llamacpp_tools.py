"""llama.cpp's own tools (llama-server, llama-lookup, llama-speculative-simple, llama-bench,
llama-completion), built from the vendored tree of the installed llama-cpp-python release.

The build lives outside the checkout, keyed by the version, so later runs reuse it:
`$LLMCLI_TOOLS_CACHE` (default `~/.cache/llmcli-tools`)/VERSION/build/bin/NAME. A build is
serialised with a file lock, so parallel test processes and benchmarks never build twice.

Used by the served-model tests (a real llama-server) and by the benchmarks in `benchmarks/`;
`python tests/llamacpp_tools.py [NAME...]` builds ahead of time and prints the paths."""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

TOOLS = ("llama-server", "llama-lookup", "llama-speculative-simple", "llama-bench", "llama-completion",
         "llama-batched-bench")


class ToolsUnavailable(RuntimeError):
    """The tools could not be built here (no compiler, no cmake, no sdist)."""


def version() -> str:
    return importlib.metadata.version("llama-cpp-python")


def root() -> Path:
    default = os.path.join(os.path.expanduser("~"), ".cache", "llmcli-tools")
    base = os.environ.get("LLMCLI_TOOLS_CACHE") or default
    return Path(base) / version()


def path(name: str) -> Path:
    return root() / "build" / "bin" / name


def weights_args(name: str) -> list[str]:
    """The flags that make a tool load the weights as llmcli does by default, for side-by-side
    runs: llama.cpp's `--no-repack` where llmcli keeps them out of the AMX buffer, whose matmul
    crashes on many AMX hosts (`llmcli.engine.backend.weight_repack`); nothing elsewhere."""
    from llmcli.engine.backend import weight_repack

    if weight_repack():
        return []
    return ["--repack", "0"] if name == "llama-bench" else ["--no-repack"]


def _run(cmd: list[str], log: Path) -> None:
    with log.open("ab") as out:
        result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise ToolsUnavailable(f"{' '.join(cmd[:3])} ... failed; see {log}")


def _source(base: Path, log: Path) -> Path:
    src = base / "src"
    found = sorted(src.glob("llama_cpp_python-*/vendor/llama.cpp/CMakeLists.txt"))
    if found:
        return found[0].parent
    src.mkdir(parents=True, exist_ok=True)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(src),
            f"llama-cpp-python=={version()}",
        ],
        log,
    )
    archives = sorted(src.glob("llama_cpp_python-*.tar.gz"))
    if not archives:
        raise ToolsUnavailable(f"no llama-cpp-python sdist in {src}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(src, filter="data")
    found = sorted(src.glob("llama_cpp_python-*/vendor/llama.cpp/CMakeLists.txt"))
    if not found:
        raise ToolsUnavailable(f"the sdist in {src} has no vendor/llama.cpp")
    return found[0].parent


def ensure(*names: str) -> dict[str, Path]:
    """Paths of the named tools, building whatever is missing (minutes on two cores)."""
    names = names or TOOLS
    wanted = {name: path(name) for name in names}
    if all(p.exists() for p in wanted.values()):
        return wanted
    if shutil.which("cmake") is None:
        raise ToolsUnavailable("cmake is not installed (pip install cmake)")
    base = root()
    base.mkdir(parents=True, exist_ok=True)
    log = base / "build.log"
    with (base / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = [name for name, p in wanted.items() if not p.exists()]
        if missing:
            source = _source(base, log)
            build = base / "build"
            if not (build / "CMakeCache.txt").exists():
                _run(
                    [
                        "cmake",
                        "-S",
                        str(source),
                        "-B",
                        str(build),
                        "-DCMAKE_BUILD_TYPE=Release",
                        "-DLLAMA_CURL=OFF",
                        "-DLLAMA_BUILD_TESTS=OFF",
                        "-DBUILD_SHARED_LIBS=OFF",
                    ],
                    log,
                )
            jobs = str(os.cpu_count() or 2)
            _run(["cmake", "--build", str(build), "-j", jobs, "--target", *missing], log)
    absent = [name for name, p in wanted.items() if not p.exists()]
    if absent:
        raise ToolsUnavailable(f"built, yet {', '.join(absent)} is missing; see {log}")
    return wanted


if __name__ == "__main__":
    for name, p in ensure(*sys.argv[1:]).items():
        print(f"{name}\t{p}")
