"""Faults in a real `llmcli pull` process: SIGKILL, SIGINT and SIGTERM mid-transfer, then resume;
and a cache whose hash record is garbage.

The transfer goes through the range-capable proxy, slowed down so that the signal lands while
bytes are arriving; a partial download keeps its `.incomplete` name and is resumed with a Range
request by the next pull, which ends with a verified hash.
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from helpers import use_engine
from hubtools import blobs, cli_subprocess, hub_cache, run

pytestmark = pytest.mark.hub

BIG = "big-Q8_0.gguf"
BIG_REF = f"test/lfs-GGUF/{BIG}"
TIMEOUT = 120


def default_sigint() -> None:
    """A child started from a background job may inherit SIGINT ignored; Python then never raises."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def partial(proxy):
    sha = proxy.hub.repos.sha256(f"test/lfs-GGUF/{BIG}")
    return hub_cache() / "models--test--lfs-GGUF" / "blobs" / f"{sha}.incomplete"


def snapshot_entries() -> list:
    folder = hub_cache() / "models--test--lfs-GGUF" / "snapshots"
    return [p for p in folder.rglob("*") if p.is_file() or p.is_symlink()]


def pull_until(proxy, at_least: int, **kwargs) -> subprocess.Popen:
    """A `pull` in its own process, once it has written `at_least` bytes of the file."""
    proxy.state.rate = 1_000_000  # about 8 s for the 8.4 MB file
    proc = cli_subprocess("pull", BIG_REF, preexec_fn=default_sigint, **kwargs)
    deadline = time.monotonic() + TIMEOUT
    while not (partial(proxy).exists() and partial(proxy).stat().st_size >= at_least):
        assert proc.poll() is None, f"pull exited {proc.returncode} before the transfer was cut"
        assert time.monotonic() < deadline, "the transfer never got going"
        time.sleep(0.05)
    return proc


def assert_nothing_looks_complete(proxy) -> int:
    """Only the .incomplete file is there: no blob under its final name, no snapshot entry."""
    kept = partial(proxy).stat().st_size
    assert 0 < kept < len(proxy.hub.repos.content(f"test/lfs-GGUF/{BIG}"))
    assert [p.name for p in blobs("test/lfs-GGUF")] == [partial(proxy).name]
    assert snapshot_entries() == []
    return kept


def test_sigkill_mid_download_then_pull_resumes_and_verifies(proxy):
    from llmcli.hub import records

    proc = pull_until(proxy, 1_000_000, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(TIMEOUT) == -signal.SIGKILL
    kept = assert_nothing_looks_complete(proxy)

    proxy.state.rate = None
    proxy.state.log.clear()
    result = run("pull", BIG_REF)
    assert result.exit_code == 0, result.stderr
    assert "resuming at" in result.stderr
    [get] = proxy.state.gets(BIG)
    assert (get.range, get.status) == (f"bytes={kept}-", 206)  # only the rest went over the wire
    sha = proxy.hub.repos.sha256(f"test/lfs-GGUF/{BIG}")
    [blob] = blobs("test/lfs-GGUF")
    assert blob.name == sha and records.load(blob)["sha256"] == sha
    [entry] = snapshot_entries()
    assert entry.read_bytes() == proxy.hub.repos.content(f"test/lfs-GGUF/{BIG}")
    assert run("models", "verify", BIG_REF).exit_code == 0


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [
        (signal.SIGINT, 130, "llmcli: interrupted"),
        (signal.SIGTERM, 143, "llmcli: terminated: received SIGTERM"),
    ],
    ids=["SIGINT", "SIGTERM"],
)
def test_sigint_and_sigterm_mid_download_keep_the_partial_file(proxy, sig, code, line):
    proc = pull_until(proxy, 500_000, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=TIMEOUT)
    err = err.decode()
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1] == line, err
    assert "kept; run the same pull again to resume" in err
    assert "Traceback" not in err
    assert_nothing_looks_complete(proxy)


def test_garbage_hash_record_is_ignored_and_the_file_hashed_again(hub, monkeypatch):
    from llmcli.engine.fake import FakeEngine
    from llmcli.hub import records

    assert run("pull", "test/tiny-GGUF:Q8_0").exit_code == 0
    [blob] = blobs("test/tiny-GGUF")
    sha = records.load(blob)["sha256"]
    records._record_path(blob).write_text("[]")
    shown = run("models", "show", "test/tiny-GGUF:Q8_0")
    assert shown.exit_code == 0 and "sha256         not recorded" in shown.stdout
    use_engine(FakeEngine.factory())
    result = run("generate", "hi", "-m", "test/tiny-GGUF:Q8_0")
    assert result.exit_code == 0, result.stderr
    assert records.load(blob)["sha256"] == sha  # checked again and recorded again
