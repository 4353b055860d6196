"""What the conversation log costs a request: the one hook after it (generation.log_request: the
record, the row, one SQLite transaction in WAL mode), timed on its own, apart from any model.

    python benchmarks/log_overhead.py [--requests 500] [--answer-tokens 500]

Three figures, each the median and 95th percentile over the requests:
  warm   a chat turn: the connection is open (what every turn after the first pays)
  cold   a `generate`: a new process opens the log (connect, WAL, schema check), then writes
  build  the record and row alone, without SQLite (to see where the time goes)
The cold figure is mostly one fsync: the first commit in a process writes a fresh WAL header and
syncs it (synchronous = NORMAL: the log survives a power cut); it comes after the answer is out.
Nothing is logged per token: the hook runs once, after `Done`; the answer's length only changes the
size of the row (its text and token ids), which `--answer-tokens` lets you vary.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--answer-tokens", type=int, default=500)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LLMCLI_DATA_DIR"] = tmp
        os.environ["LLMCLI_CONFIG"] = str(Path(tmp) / "config.toml")
        from llmcli import logdb
        from llmcli.contract import Request, SamplingParams
        from llmcli.engine.fake import FakeEngine
        from llmcli.generation import drive, log_request

        engine = FakeEngine(n_ctx=1 << 16, replies=["word " * (args.answer_tokens // 5)] * 2)
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Explain the log. " * 20}]  # fmt: skip
        request = Request(SamplingParams(seed=1, max_tokens=0), messages=messages)
        done, prepared = drive(engine, request)

        def once() -> float:
            log = logdb.Logged("bench-model", "chat", cid="bench")
            started = time.perf_counter()
            log_request(engine, request, log, done, prepared)
            return (time.perf_counter() - started) * 1e6

        once()  # the file and its schema exist from here on, as after a first request
        warm = [once() for _ in range(args.requests)]
        cold = []
        for _ in range(max(20, args.requests // 10)):
            logdb.close_all()  # a new process: nothing open
            cold.append(once())
        from llmcli import record

        build = []
        for _ in range(args.requests):
            started = time.perf_counter()
            rec = record.build(ref="bench-model", info=engine.info, params=request.params, done=done,
                               prompt_format=prepared.prompt_format)  # fmt: skip
            logdb.row_values(rec, cid="bench", command="chat", messages=messages, tokens=done.tokens)
            build.append((time.perf_counter() - started) * 1e6)
        logdb.close_all()
        size = (Path(tmp) / "logs.db").stat().st_size

    def line(name: str, values: list[float]) -> str:
        values = sorted(values)
        p95 = values[int(0.95 * (len(values) - 1))]
        return f"{name:6} median {statistics.median(values):7.0f} us   p95 {p95:7.0f} us   (n={len(values)})"

    print(f"log_request per request, answer of {len(done.tokens)} tokens ({len(done.text)} chars):")
    print(line("warm", warm))
    print(line("cold", cold))
    print(line("build", build))
    print(f"database after {len(warm) + len(cold) + 1} rows: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
