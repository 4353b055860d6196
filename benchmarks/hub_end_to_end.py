"""End to end as a user would run it: the real Gemma model served by an olah hub mirror on loopback.

Builds a mirror repository `demo/gemma-3-270m-GGUF` holding the bundled Gemma 3 270M file as a Git
LFS object, starts `olah-cli` in offline mirror mode, then, with `HF_ENDPOINT` pointing at it and a
fresh `HF_HOME`, runs the installed `llmcli`:
  pull --list, pull, models list, generate -m demo/gemma-3-270m-GGUF (online, then --offline with
  the mirror stopped), models verify, models rm --yes.
Prints each command's exit code, wall time and the interesting lines.

Usage: python benchmarks/hub_end_to_end.py
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = "demo/gemma-3-270m-GGUF"
FILE = "gemma-3-270m-Q4_K_M.gguf"


def git(repo: Path, *args: str) -> None:
    cmd = ["git", "-c", "user.name=d", "-c", "user.email=d@d", *args]
    subprocess.run(cmd, cwd=repo, check=True, capture_output=True)


def build_mirror(root: Path, model: Path) -> None:
    repo = root / "mirrors" / "models" / REPO
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    data = model.read_bytes()
    oid = hashlib.sha256(data).hexdigest()
    obj = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    obj.parent.mkdir(parents=True)
    shutil.copyfile(model, obj)
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n"
    (repo / FILE).write_text(pointer)
    (repo / ".gitattributes").write_text("*.gguf filter=lfs diff=lfs merge=lfs -text\n")
    (repo / "README.md").write_text("Gemma 3 270M for the llmcli end-to-end check.\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "model")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("olah did not start")


def run(env: dict, *args: str) -> None:
    t = time.perf_counter()
    r = subprocess.run(["llmcli", *args], env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t
    print(f"$ llmcli {' '.join(args)}   -> exit {r.returncode} in {dt:.1f} s")
    for line in (r.stdout.strip().splitlines() + r.stderr.strip().splitlines())[:14]:
        print(f"    {line}")


def main() -> None:
    from llmcli.hub import default_model

    model = default_model.model_path("gemma3-270m")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_mirror(root, model)
        port = free_port()
        (root / "olah.toml").write_text(
            f'[basic]\nhost = "127.0.0.1"\nport = {port}\nrepos-path = "{root}/repos"\n'
            f'mirrors-path = ["{root}/mirrors"]\n[accessibility]\noffline = true\n'
        )
        olah = subprocess.Popen(["olah-cli", "-c", str(root / "olah.toml")], cwd=root,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_port(port)
            env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(root / "hf"),
                       LLMCLI_DATA_DIR=str(root / "data"))  # fmt: skip
            run(env, "pull", REPO, "--list")
            run(env, "pull", REPO)
            run(env, "models", "list")
            prompt = ["Name three colours.", "-n", "16", "--temperature", "0"]
            run(env, "generate", "-m", REPO, *prompt, "--stats")
        finally:
            olah.terminate()
            olah.wait()
        run(env, "generate", "-m", REPO, "--offline", *prompt)
        run(env, "models", "verify", REPO)
        run(env, "models", "rm", REPO, "--yes")
    sys.exit(0)


if __name__ == "__main__":
    main()
