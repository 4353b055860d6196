"""How busy the rest of the machine was while a test ran (Linux), so noisy numbers can be flagged.

Other processes competing for the cores, and a hypervisor stealing time from a virtual machine,
are the main cause of run-to-run variation. From /proc/stat (all CPUs' busy and total time,
counting steal as busy) and `os.times()` (this process's own CPU time, all threads), the share of
the machine's CPU capacity used by anything else during an interval is

    other = (busy_delta - own_delta) / total_delta

None where /proc/stat cannot be read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

NOISY = 0.10  # above this share the numbers are flagged as measured on a busy machine


@dataclass(frozen=True)
class Snapshot:
    busy: int  # jiffies, all CPUs
    total: int
    own: float  # seconds of CPU used by this process


def snapshot() -> Snapshot | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 4:
        return None
    user, nice, system, idle = fields[:4]
    iowait, irq, softirq, steal = (fields[4:8] + [0, 0, 0, 0])[:4]
    busy = user + nice + system + irq + softirq + steal  # guest time is already inside user
    times = os.times()
    return Snapshot(busy, busy + idle + iowait, times.user + times.system)


def other_share(before: Snapshot | None, after: Snapshot | None) -> float | None:
    """Fraction (0..1) of all CPUs' time used by other processes (and steal) between two snapshots."""
    if before is None or after is None or after.total <= before.total:
        return None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    own = (after.own - before.own) * ticks
    other = (after.busy - before.busy) - own
    return min(1.0, max(0.0, other / (after.total - before.total)))


BUSY_PROGRAM = "while True: pass"  # one process keeps one core busy, as a build or a second model would


@contextmanager
def background(n: int) -> Iterator[list[subprocess.Popen]]:
    """Start `n` busy processes for the duration, and always stop them (Ctrl-C and errors too)."""
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", BUSY_PROGRAM], stdin=subprocess.DEVNULL))
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
