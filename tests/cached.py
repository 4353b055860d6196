"""A file the tests build once and keep (a model joined from wheels, a converted GGUF): made under a
lock beside it, in a scratch folder beside it, and renamed into place whole, so parallel test
processes build it once and never see half a file."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def built_once(target: Path, build: Callable[[Path], Path]) -> Path:
    """`target`; the first time, `build(work)` writes the finished file somewhere in the scratch
    folder `work` and returns its path, which then becomes `target`."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            os.replace(build(Path(tmp)), target)
    return target
