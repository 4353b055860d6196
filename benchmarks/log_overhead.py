"""What the conversation log costs a request: the one hook after it (generation.log_request: the
record and the row, then one SQLite transaction in WAL mode, or one line appended to the pending
file), timed on its own, apart from any model.

    python benchmarks/log_overhead.py [--requests 500] [--answer-tokens 500]

Figures, each the median, mean, 95th percentile and largest over the requests:
  oneshot  a `generate`: the record, and its row appended to logs.db-pending (log.writer.defer);
           a process that finds more than log.writer.PENDING_DRAIN_BYTES waiting moves them into the
           database itself, and pays for that (the p95 and max show it)
  warm     a chat turn: the connection is open (what every turn after the first pays)
  cold     a chat's first turn: open the log (connect, WAL, schema check), write, and close, as
           a process does at exit
  drain    moving one waiting row into the database, per row (what `llmcli logs` or the drain
           after PENDING_DRAIN_BYTES pays, once per row)
  build    the record and row alone, without SQLite (to see where the time goes)
The cold figure includes closing the connection. Connections do not
checkpoint when they close (log.native.keep_wal), so no fsync is paid per process: the WAL is carried
over to the next one and folded into the database by the write that finds it past
log.store.WAL_FOLD_BYTES (that write pays the syncs: the p95 and max show it).
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
        from llmcli import record
        from llmcli.contract import Request, SamplingParams
        from llmcli.engine.fake import FakeEngine
        from llmcli.log import queries, rows, writer
        from llmcli.request.drive import drive
        from llmcli.request.log import log_request

        engine = FakeEngine(n_ctx=1 << 16, replies=["word " * (args.answer_tokens // 5)] * 2)
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Explain the log. " * 20}]  # fmt: skip
        request = Request(SamplingParams(seed=1, max_tokens=0), messages=messages)
        done, prepared = drive(engine, request)

        def once() -> float:
            log = rows.Logged("bench-model", "chat", cid="bench")
            started = time.perf_counter()
            log_request(engine, request, log, done, prepared)
            return (time.perf_counter() - started) * 1e6

        def once_and_close() -> float:
            """A process's whole cost: open, write and close (the close is where a WAL checkpoint
            would sync the database)."""
            log = rows.Logged("bench-model", "chat", cid="bench")
            started = time.perf_counter()
            log_request(engine, request, log, done, prepared)
            writer.close_all()
            return (time.perf_counter() - started) * 1e6

        def oneshot() -> float:
            log = rows.Logged("bench-model", "generate", cid="bench", deferred=True)
            started = time.perf_counter()
            log_request(engine, request, log, done, prepared)
            return (time.perf_counter() - started) * 1e6

        once()  # the file and its schema exist from here on, as after a first request
        writer.close_all()
        warm = [once() for _ in range(args.requests)]
        cold = []
        for _ in range(max(100, args.requests // 2)):
            cold.append(once_and_close())
        writer.close_all()
        shots = []
        for _ in range(args.requests):
            shots.append(oneshot())
            writer.close_all()  # each is a new process
        drained = []
        for _ in range(5):
            for _ in range(40):
                writer.defer(rows.row_values(
                    record.build(ref="bench-model", info=engine.info, params=request.params, done=done,
                                 prompt_format=prepared.prompt_format),
                    cid="bench", command="generate", messages=messages, tokens=done.tokens))  # fmt: skip
            writer.close_all()
            started = time.perf_counter()
            queries.reader().close()
            drained.append((time.perf_counter() - started) * 1e6 / 40)
        writer.close_all()

        build = []
        for _ in range(args.requests):
            started = time.perf_counter()
            rec = record.build(ref="bench-model", info=engine.info, params=request.params, done=done,
                               prompt_format=prepared.prompt_format)  # fmt: skip
            rows.row_values(rec, cid="bench", command="chat", messages=messages, tokens=done.tokens)
            build.append((time.perf_counter() - started) * 1e6)
        writer.close_all()
        size = (Path(tmp) / "logs.db").stat().st_size

    def line(name: str, values: list[float]) -> str:
        values = sorted(values)
        p95 = values[int(0.95 * (len(values) - 1))]
        mid, mean = statistics.median(values), statistics.fmean(values)
        return (f"{name:7} median {mid:7.0f} us   mean {mean:7.0f} us"
                f"   p95 {p95:7.0f} us   max {values[-1]:7.0f} us   (n={len(values)})")  # fmt: skip

    print(f"log_request per request, answer of {len(done.tokens)} tokens ({len(done.text)} chars):")
    print(line("oneshot", shots))
    print(line("warm", warm))
    print(line("cold", cold))
    print(line("drain", drained))
    print(line("build", build))
    print(f"database after {len(warm) + len(cold) + len(shots) + 201} rows: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
