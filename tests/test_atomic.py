"""Files llmcli writes survive SIGKILL at any moment: old version or new, never torn."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from llmcli.atomic import write_atomic, write_json

WRITER = r"""
import hashlib, json, sys
from pathlib import Path
from llmcli.atomic import write_json
path = Path(sys.argv[1])
n = 0
while True:
    n += 1
    body = ("message %d " % n) * (2000 + n % 500)
    write_json(path, {"n": n, "body": body, "sha": hashlib.sha256(body.encode()).hexdigest()})
    print(n, flush=True)
"""


def check(path) -> int:
    doc = json.loads(path.read_text())
    assert hashlib.sha256(doc["body"].encode()).hexdigest() == doc["sha"]
    return doc["n"]


def test_sigkill_at_random_moments_never_tears_the_file(tmp_path):
    path = tmp_path / "session.json"
    write_json(path, {"n": 0, "body": "", "sha": hashlib.sha256(b"").hexdigest()})
    rng = random.Random(7)
    seen = set()
    for _ in range(25):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()  # it is writing
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        seen.add(check(path))
        leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        for p in leftovers:  # a killed writer may leave its temporary file; it is never the target
            p.unlink()
    assert len(seen) > 1


def test_failed_write_leaves_old_version(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    write_atomic(path, "old = 1\n")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        write_atomic(path, "new = 2\n")
    assert path.read_text() == "old = 1\n"
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_mode_is_kept(tmp_path):
    path = tmp_path / "aliases.json"
    write_atomic(path, "{}")
    os.chmod(path, 0o600)
    write_atomic(path, "{ }")
    assert path.stat().st_mode & 0o777 == 0o600
