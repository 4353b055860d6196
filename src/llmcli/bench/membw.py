"""Measure this machine's memory bandwidth, the physical limit of decoding on a CPU.

Method (documented in docs/BENCH.md): two 256 MiB numpy buffers, far larger than any CPU cache, are
split into one slice per thread and scanned by `threads` Python threads at once (the kernels run in C
with the GIL released):
- read: libc `memcmp` of two identical buffers reads every byte of both (2 x 256 MiB per pass), with
  the C library's vectorized code; numpy's float32 sum is the fallback where libc cannot be loaded;
- copy: libc `memcpy` (numpy `copyto` as fallback), counted as bytes read plus bytes written, as the
  STREAM benchmark counts them.
Each kernel runs `reps` times and the best pass counts (as STREAM reports), since interference only
ever slows a pass down. The read figure is the reference for decoding, which is read-dominated.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

BUFFER_BYTES = 256 << 20
REPS = 5


@dataclass
class Bandwidth:
    read_gbps: float
    copy_gbps: float
    threads: int
    buffer_bytes: int
    reps: int
    method: str

    def as_dict(self) -> dict:
        d = asdict(self)
        d["read_gbps"] = round(self.read_gbps, 3)
        d["copy_gbps"] = round(self.copy_gbps, 3)
        return d


def measure(threads: int = 1, buffer_bytes: int = BUFFER_BYTES, reps: int = REPS) -> Bandwidth:
    """Best-of-`reps` read and copy bandwidth in GB/s (10^9 bytes per second) with `threads` threads."""
    import numpy as np

    threads = max(1, threads)
    n = buffer_bytes - buffer_bytes % (64 * threads)
    a = np.ones(n, dtype=np.uint8)
    b = np.ones(n, dtype=np.uint8)
    read, copy, method = _kernels(a, b)
    step = n // threads
    read_ns = _best(lambda: _parallel(read, threads, step), reps)
    copy_ns = _best(lambda: _parallel(copy, threads, step), reps)
    return Bandwidth(2 * n / read_ns, 2 * n / copy_ns, threads, n, reps, method)


def _kernels(a, b) -> tuple[Callable[[int, int], object], Callable[[int, int], object], str]:
    """(read, copy) functions over byte ranges of the two buffers."""
    import numpy as np

    try:
        libc = ctypes.CDLL(None)
        memcmp, memcpy = libc.memcmp, libc.memcpy
    except (OSError, AttributeError):
        fa, fb = a.view(np.float32), b.view(np.float32)
        return (
            lambda off, size: (
                np.add.reduce(fa[off // 4 : (off + size) // 4]),
                np.add.reduce(fb[off // 4 : (off + size) // 4]),
            ),
            lambda off, size: np.copyto(b[off : off + size], a[off : off + size]),
            "numpy float32 sum (read), numpy copyto (copy)",
        )
    memcmp.argtypes = memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    memcmp.restype, memcpy.restype = ctypes.c_int, ctypes.c_void_p
    pa, pb = a.ctypes.data, b.ctypes.data
    return (
        lambda off, size: memcmp(pa + off, pb + off, size),
        lambda off, size: memcpy(pb + off, pa + off, size),
        "libc memcmp of identical buffers (read), libc memcpy (copy)",
    )


def _parallel(kernel: Callable[[int, int], object], threads: int, step: int) -> None:
    if threads == 1:
        kernel(0, step)
        return
    workers = [threading.Thread(target=kernel, args=(i * step, step)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _best(run: Callable[[], None], reps: int) -> int:
    run()  # touch every page first: the first pass pays for page faults
    best = None
    for _ in range(reps):
        start = time.perf_counter_ns()
        run()
        elapsed = max(1, time.perf_counter_ns() - start)
        best = elapsed if best is None else min(best, elapsed)
    return best or 1
