#!/usr/bin/env python3
"""Mutation fuzzer for llmcli.gguf_file.read_header.

Builds a handful of small valid GGUF seed files, then runs many cases (default 100,000), each one
a seed with 1-6 random mutations (bit flips, byte sets, interesting 32/64-bit integers written at
length/count-looking positions, cuts, deletions, insertions, duplicated or spliced chunks). Every
case must either parse (then all convenience properties are evaluated too) or raise
InvalidModelError with a one-line message. Anything else is a crash; a case that runs past the
per-case time limit is a hang. Workers run under a 2 GiB address-space limit, so a runaway
allocation shows up as a MemoryError crash.

Usage: python fuzz/fuzz_gguf.py [--cases N] [--seed S] [--workers W] [--timeout SECONDS]
Prints one summary line; exits 1 if anything crashed or hung (failing inputs go to --crash-dir).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import resource
import signal
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from ggufgen import ARRAY, STRING, Tensor, build_gguf, write_gguf  # noqa: E402

from llmcli.errors import InvalidModelError  # noqa: E402
from llmcli.gguf_file import read_header  # noqa: E402

INTERESTING = [
    0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 24, 31, 32, 33, 63, 64, 65, 255, 256, 4096, 65535,
    2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1,
]  # fmt: skip
MEMORY_LIMIT = 2 << 30


class Hang(BaseException):
    """Raised by the alarm handler when a case runs past its time limit."""


@dataclass
class Tally:
    accepted: int = 0
    rejected: int = 0
    crashed: int = 0
    hung: int = 0
    slowest: float = 0.0
    failures: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.accepted += other.accepted
        self.rejected += other.rejected
        self.crashed += other.crashed
        self.hung += other.hung
        self.slowest = max(self.slowest, other.slowest)
        self.failures += other.failures


def make_seeds(folder: Path) -> list[bytes]:
    """Small valid files covering every part of the format the reader handles."""
    files = [
        write_gguf(folder / "a.gguf"),
        write_gguf(folder / "b.gguf", n_vocab=90, chat_template="{% for m in messages %}{{ m }}{% endfor %}"),
        write_gguf(folder / "c.gguf", alignment=64, file_type=7, tensors=[Tensor("w", (32, 2, 2), "Q8_0")]),
        write_gguf(folder / "d.gguf", file_type=None, tensors=[], extra_kv={"split.count": 2}),
    ]
    seeds = [path.read_bytes() for path in files]
    nested = (ARRAY, [(4, [1, 2, 3]), (STRING, ["x", "y"])])
    kvs = [
        ("general.architecture", STRING, "gemma3"),
        ("gemma3.block_count", 4, 2),
        ("gemma3.attention.head_count_kv", ARRAY, (5, [1, 2])),
        ("n", ARRAY, nested),
        ("long", ARRAY, (ARRAY, [(2, list(range(3)))] * 70)),
        ("f", 12, 1.5),
        ("general.alignment", 4, 16),
    ]
    tensors = [("t0", [256], 12, 0), ("t1", [16, 2], 0, 144), ("t2", [4], 30, 272)]
    seeds.append(build_gguf(kvs, tensors, version=2, alignment=16, data=288))
    return seeds


def field_offsets(seed: bytes) -> list[int]:
    """Offsets holding small u64/u32 values: likely lengths, counts, type ids, dims or offsets."""
    found = []
    for i in range(len(seed) - 8):
        (value,) = struct.unpack_from("<Q", seed, i)
        if 0 < value < 1 << 20 or 0 < value & 0xFFFFFFFF < 64:
            found.append(i)
    return found or [0]


def write_int(rng: random.Random, data: bytearray, pos: int, width: int) -> None:
    """Overwrite `width` bytes at `pos` with an interesting little-endian integer."""
    extra = [len(data), len(data) - rng.randrange(1, 64), rng.getrandbits(32)]
    value = rng.choice(INTERESTING + extra) % (1 << (8 * width))
    data[pos : pos + width] = value.to_bytes(width, "little")


def mutate(rng: random.Random, seeds: list[bytes], fields: list[list[int]], index: int) -> bytes:
    data = bytearray(seeds[index])
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(9)
        pos = rng.randrange(len(data)) if data else 0
        if op == 0 and data:
            data[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and data:
            data[pos] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op in (2, 3):
            if rng.random() < 0.7:
                pos = rng.choice(fields[index])
            write_int(rng, data, pos, 4 if op == 2 else 8)
        elif op == 4:
            del data[rng.randrange(len(data) + 1) :]
        elif op == 5:
            del data[pos : pos + rng.randint(1, 64)]
        elif op == 6:
            data[pos:pos] = rng.randbytes(rng.randint(1, 32))
        elif op == 7 and data:
            start = rng.randrange(len(data))
            data[pos:pos] = data[start : start + rng.randint(1, 128)]
        else:
            other = rng.choice(seeds)
            start = rng.randrange(len(other))
            data[pos : pos + rng.randint(0, 64)] = other[start : start + rng.randint(1, 256)]
    return bytes(data)


def exercise(header) -> None:
    """Accepted files must also survive every convenience accessor."""
    for name in (
        "architecture", "name", "size_label", "license", "n_layers", "n_ctx_train", "n_embd", "n_head",
        "n_head_kv", "head_dim", "sliding_window", "n_vocab", "chat_template", "file_type", "quantization",
        "n_params", "tensor_bytes", "split_count",
    ):  # fmt: skip
        getattr(header, name)
    header.kv_cache_bytes(4096)
    header.kv_cache_bytes(1, type_bytes=0.5)


def run_case(path: Path, data: bytes, timeout: float) -> tuple[str, float, str]:
    """Classify one case as accepted / rejected / crashed / hung."""
    path.write_bytes(data)
    started = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        exercise(read_header(path))
        outcome, detail = "accepted", ""
    except InvalidModelError as exc:
        bad = not exc.message or "\n" in exc.message
        outcome, detail = ("crashed", f"multi-line message {exc.message!r}") if bad else ("rejected", "")
    except Hang:
        outcome, detail = "hung", f"over {timeout}s"
    except Exception:
        outcome, detail = "crashed", traceback.format_exc(limit=4)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    elapsed = time.perf_counter() - started
    if outcome != "hung" and elapsed > timeout:
        outcome, detail = "hung", f"took {elapsed:.2f}s"
    return outcome, elapsed, detail


def _on_alarm(_signum: int, _frame: object) -> None:
    raise Hang


def worker(args: tuple[int, int, int, float, str, str]) -> Tally:
    worker_id, cases, seed, timeout, scratch, crash_dir = args
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGALRM, _on_alarm)
    rng = random.Random(f"{seed}-{worker_id}")
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        seeds = make_seeds(Path(tmp))
        fields = [field_offsets(s) for s in seeds]
        path = Path(tmp) / "case.gguf"
        tally = Tally()
        for case in range(cases):
            data = mutate(rng, seeds, fields, rng.randrange(len(seeds)))
            try:
                outcome, elapsed, detail = run_case(path, data, timeout)
            except Hang:  # the alarm fired just as the case finished
                signal.setitimer(signal.ITIMER_REAL, 0)
                outcome, elapsed, detail = "hung", timeout, "alarm at the end of the case"
            setattr(tally, outcome, getattr(tally, outcome) + 1)
            tally.slowest = max(tally.slowest, elapsed)
            if outcome in ("crashed", "hung"):
                saved = Path(crash_dir) / f"{outcome}-{worker_id}-{case}.gguf"
                saved.parent.mkdir(parents=True, exist_ok=True)
                saved.write_bytes(data)
                tally.failures.append(f"{saved}: {detail.strip().splitlines()[-1] if detail else outcome}")
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=2.0, help="per-case time limit in seconds")
    parser.add_argument("--crash-dir", default=os.path.join(tempfile.gettempdir(), "fuzz_gguf_failures"))
    args = parser.parse_args(argv)
    scratch = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    shares = [args.cases // args.workers + (i < args.cases % args.workers) for i in range(args.workers)]
    jobs = [(i, n, args.seed, args.timeout, scratch, args.crash_dir) for i, n in enumerate(shares)]
    started = time.perf_counter()
    total = Tally()
    with mp.get_context("fork").Pool(args.workers) as pool:
        for tally in pool.imap_unordered(worker, jobs):
            total.add(tally)
    elapsed = time.perf_counter() - started
    for failure in total.failures[:20]:
        print(failure, file=sys.stderr)
    print(
        f"fuzz_gguf: {args.cases} cases in {elapsed:.1f}s: {total.accepted} accepted, "
        f"{total.rejected} rejected cleanly, {total.crashed} crashed, {total.hung} hung "
        f"(slowest case {total.slowest * 1000:.1f} ms, limit {args.timeout:g}s/case, "
        f"seed {args.seed}, {args.workers} workers)"
    )
    return 1 if total.crashed or total.hung else 0


if __name__ == "__main__":
    sys.exit(main())
