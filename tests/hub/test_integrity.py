"""Integrity: real cuts and resumes, hash checks, full disks, read-only caches, concurrent pulls."""

from __future__ import annotations

import ctypes
import os
import pty
import re
import resource
import select
import subprocess
import time
from pathlib import Path

import pytest
from hubtools import blobs, cli_subprocess, hub_cache, one_line_error, run

pytestmark = pytest.mark.hub

BIG = "big-Q8_0.gguf"
BIG_REF = f"test/lfs-GGUF/{BIG}"


def big_sha(hub) -> str:
    return hub.repos.sha256(f"test/lfs-GGUF/{BIG}")


def big_bytes(hub) -> bytes:
    return hub.repos.content(f"test/lfs-GGUF/{BIG}")


def partial(sha: str) -> Path:
    return hub_cache() / "models--test--lfs-GGUF" / "blobs" / f"{sha}.incomplete"


def snapshot_entries(repo_id: str) -> list[Path]:
    folder = hub_cache() / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    return [p for p in folder.rglob("*") if p.is_file()]


def test_interrupted_download_resumes_on_the_next_pull(proxy):
    sha = big_sha(proxy.hub)
    proxy.state.cuts[BIG] = [3_000_000, 0, 0]  # every try of this pull is cut
    line = one_line_error(run("pull", BIG_REF), 6, f"download of {BIG}", "interrupted at 3.0 MB of 8.4 MB")
    assert "run the same `llmcli pull` again to resume" in line
    assert partial(sha).stat().st_size == 3_000_000
    assert [p.name for p in blobs("test/lfs-GGUF")] == [f"{sha}.incomplete"]  # nothing looks complete
    assert snapshot_entries("test/lfs-GGUF") == []

    proxy.state.log.clear()
    result = run("pull", BIG_REF)
    assert result.exit_code == 0, result.stderr
    assert "resuming at 3.0 MB" in result.stderr
    [get] = proxy.state.gets(BIG)
    assert (get.range, get.status) == ("bytes=3000000-", 206)
    [entry] = snapshot_entries("test/lfs-GGUF")
    assert entry.read_bytes() == big_bytes(proxy.hub)
    assert [p.name for p in blobs("test/lfs-GGUF")] == [sha]


def test_a_cut_transfer_is_resumed_within_the_same_pull(proxy):
    proxy.state.cuts[BIG] = [2_000_000]
    result = run("pull", BIG_REF)
    assert result.exit_code == 0, result.stderr
    assert f"{BIG}: transfer interrupted at 2.0 MB of 8.4 MB" in result.stderr
    assert [(g.range, g.status) for g in proxy.state.gets(BIG)] == [(None, 200), ("bytes=2000000-", 206)]
    [entry] = snapshot_entries("test/lfs-GGUF")
    assert entry.read_bytes() == big_bytes(proxy.hub)


def test_a_server_that_ignores_range_restarts_from_zero(hub):
    """olah answers a Range request with 200 and the whole file: the partial file is replaced."""
    sha = big_sha(hub)
    partial(sha).parent.mkdir(parents=True)
    partial(sha).write_bytes(big_bytes(hub)[:1_000_000])
    result = run("pull", BIG_REF)
    assert result.exit_code == 0, result.stderr
    assert "resuming at 1.0 MB" in result.stderr
    assert "the server does not resume downloads; starting again from zero" in result.stderr
    [entry] = snapshot_entries("test/lfs-GGUF")
    assert entry.read_bytes() == big_bytes(hub)


def test_a_partial_file_with_wrong_bytes_never_passes(proxy):
    sha = big_sha(proxy.hub)
    partial(sha).parent.mkdir(parents=True)
    partial(sha).write_bytes(b"\xff" * 1_000_000)  # not a prefix of the real file
    one_line_error(run("pull", BIG_REF), 5, "does not match the hub's hash (sha256", "discarded")
    assert blobs("test/lfs-GGUF") == [] and snapshot_entries("test/lfs-GGUF") == []
    assert run("pull", BIG_REF).exit_code == 0  # and the next pull starts clean


@pytest.mark.parametrize(
    ("ref", "name", "algo"),
    [
        ("test/tiny-GGUF:Q8_0", "tiny-Q8_0.gguf", "git-sha1"),
        ("test/lfs-GGUF:Q4_K_M", "lfs-Q4_K_M.gguf", "sha256"),
    ],
)
def test_content_that_does_not_match_the_hubs_hash_is_refused(proxy, ref, name, algo):
    proxy.state.corrupt.add(name)
    line = one_line_error(run("pull", ref), 5, f"downloaded {name} does not match the hub's hash ({algo} ")
    assert "pull` again" in line
    repo_id = ref.split(":")[0]
    assert blobs(repo_id) == [] and snapshot_entries(repo_id) == []
    proxy.state.corrupt.clear()
    assert run("pull", ref).exit_code == 0


def test_a_cached_file_that_no_longer_matches_is_refused_then_repaired(hub, engine):
    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    [blob] = blobs("test/tiny-GGUF")
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))  # same size, new mtime: the record no longer vouches for it

    line = one_line_error(run("generate", "hi", "-m", "test/tiny-GGUF:Q8_0"), 5, "does not match its hash")
    assert "llmcli pull --force test/tiny-GGUF:Q8_0" in line
    assert engine == []
    result = run("models", "verify", "test/tiny-GGUF:Q8_0")
    assert result.exit_code == 5 and result.stdout.rstrip().endswith("tiny-Q8_0.gguf  FAILED")

    result = run("pull", "test/tiny-GGUF:Q8_0")
    assert result.exit_code == 0 and "does not match its hash; downloading it again" in result.stderr
    assert run("models", "verify", "test/tiny-GGUF:Q8_0").exit_code == 0
    assert run("generate", "hi", "-m", "test/tiny-GGUF:Q8_0").exit_code == 0


def _limit_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_disk_filling_up_mid_download_leaves_nothing_half_written(hub):
    """A real write failure from the kernel (RLIMIT_FSIZE: EFBIG), in its own process."""
    proc = cli_subprocess("pull", BIG_REF, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          preexec_fn=_limit_file_size(2_000_000))  # fmt: skip
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err.decode()
    assert (
        err.decode()
        .splitlines()[-1]
        .startswith(f"llmcli: no space left: the disk filled up while writing {BIG}")
    ), err.decode()
    assert blobs("test/lfs-GGUF") == [] and snapshot_entries("test/lfs-GGUF") == []


def _without_root_override():
    """Make root obey file permissions in the child (drop CAP_DAC_OVERRIDE/READ_SEARCH)."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def drop():
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP: gone from the exec'd program

    return drop


def test_read_only_cache(hub):
    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    cache = hub_cache()
    modes = {p: p.stat().st_mode for p in [cache, *cache.rglob("*")] if p.is_dir()}
    for path in modes:
        path.chmod(0o555)
    try:
        ok = cli_subprocess("pull", "test/tiny-GGUF:Q8_0", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_without_root_override())  # fmt: skip
        _, err = ok.communicate(timeout=60)
        assert ok.returncode == 0 and b"is up to date" in err, err  # what is there stays usable
        bad = cli_subprocess("pull", "test/tiny-GGUF:Q2_K", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=_without_root_override())  # fmt: skip
        _, err = bad.communicate(timeout=60)
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    lines = err.decode().splitlines()
    assert bad.returncode == 1, err
    assert lines[-1].startswith(f"llmcli: error: cannot write to the Hugging Face cache {cache}: ")
    assert "HF_HUB_CACHE" in lines[-1]


def test_two_pulls_of_the_same_file_at_once(proxy):
    proxy.state.rate = 3_000_000  # about 3 s for the file, so the two overlap
    procs = [
        cli_subprocess("pull", BIG_REF, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)
    ]
    errs = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert sum("waiting for another download of" in e for e in errs) == 1, errs
    assert len(proxy.state.gets(BIG)) == 1  # one transfer; the other process waited and reused it
    [entry] = snapshot_entries("test/lfs-GGUF")
    assert entry.read_bytes() == big_bytes(proxy.hub)
    assert [p.name for p in blobs("test/lfs-GGUF")] == [big_sha(proxy.hub)]


def test_progress_on_a_terminal_shows_size_speed_and_time_left(proxy):
    proxy.state.rate = 8_000_000
    master, slave = pty.openpty()
    proc = cli_subprocess("pull", BIG_REF, env={"TERM": "xterm", "COLUMNS": "120"}, stdout=subprocess.DEVNULL,
                          stderr=slave)  # fmt: skip
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(10) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode(errors="replace"))
    assert f"downloading {BIG}" in text
    assert re.search(r"\d+(\.\d+)?/8\.4 MB", text), text  # done of total
    assert re.search(r"\d+(\.\d+)? [kM]B/s", text), text  # speed
    assert re.search(r"\d:\d\d:\d\d", text), text  # time left


def test_loads_trust_the_record_instead_of_rehashing(hub, monkeypatch):
    from huggingface_hub import hf_hub_download

    from llmcli.hub import hashing
    from llmcli.hub.resolve import resolve_model

    assert run("pull", "test/lfs-GGUF:Q4_K_M").exit_code == 0
    hf_hub_download("test/lfs-GGUF", "lfs-Q5_K_M.gguf", cache_dir=hub_cache(), endpoint=hub.url)
    hashed: list[Path] = []
    real = hashing.hash_file
    monkeypatch.setattr(
        hashing, "hash_file", lambda path, *a, **k: hashed.append(path) or real(path, *a, **k)
    )
    for _ in range(3):
        resolve_model("test/lfs-GGUF:Q4_K_M", offline=True)  # pulled by llmcli: checked at download
        resolve_model("test/lfs-GGUF:Q5_K_M", offline=True)  # fetched by another tool: checked once
    assert [p.name for p in hashed] == [hub.repos.sha256("test/lfs-GGUF/lfs-Q5_K_M.gguf")]


def test_a_complete_partial_file_is_checked_and_installed_without_downloading(proxy):
    sha = big_sha(proxy.hub)
    partial(sha).parent.mkdir(parents=True)
    partial(sha).write_bytes(big_bytes(proxy.hub))  # e.g. killed between the last byte and the rename
    result = run("pull", BIG_REF)
    assert result.exit_code == 0, result.stderr
    assert proxy.state.gets(BIG) == []
    assert [p.name for p in blobs("test/lfs-GGUF")] == [sha]
