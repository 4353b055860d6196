"""`runner.drive`, bench's one loop, on a scripted `Measurer`: consecutive cases with the same key
share one `open` (released by `close`, even on Ctrl-C), each part of a case is kept the moment it is
yielded, Ctrl-C keeps what finished and marks the run interrupted, a case that says `last` ends the
run, and every case's progress ends with a "done" event."""

from __future__ import annotations

import threading

import pytest

from llmcli.bench.results import BenchRun
from llmcli.bench.runner import Finished, Interrupted, Measurer, drive


class _Result:
    def __init__(self, name: str) -> None:
        self.name = name

    def record(self, gbps=None) -> dict:
        return {"test": self.name}


class Script(Measurer):
    """Cases are (group, name); `fail_at` raises that exception while measuring that case."""

    reps = 2

    def __init__(self, fail_at: str | None = None, error: BaseException | None = None,
                 last_at: str | None = None) -> None:  # fmt: skip
        self.fail_at, self.error, self.last_at = fail_at, error, last_at
        self.log: list[str] = []

    def key(self, case):
        return case[0]

    def open(self, cases):
        self.log.append(f"open {cases[0][0]} ({len(cases)})")
        return cases[0][0]

    def close(self, held):
        self.log.append(f"close {held}")

    def end(self):
        self.log.append("end")

    def measure(self, case, held, step):
        step(case[1], "rep", 1, 2)
        yield Finished(f"{case[1]} a", [_Result(f"{case[1]} a")])
        if case[1] == self.fail_at:
            raise self.error
        yield Finished(f"{case[1]} b", [_Result(f"{case[1]} b")], last=case[1] == self.last_at)


CASES = [("m1", "x"), ("m1", "y"), ("m2", "z")]


def _run(measurer: Measurer, stop: threading.Event | None = None) -> tuple[BenchRun, list]:
    events: list = []
    run = drive(CASES, BenchRun({}, {}, 3, "now"), measurer, events.append, stop)
    return run, events


def test_groups_share_one_open_and_every_part_is_kept():
    script = Script()
    run, events = _run(script)
    assert script.log == ["open m1 (2)", "close m1", "open m2 (1)", "close m2", "end"]
    assert [r.name for r in run.results] == ["x a", "x b", "y a", "y b", "z a", "z b"]
    assert run.complete and not run.interrupted and run.finished_at
    done = [(e.index, e.name) for e in events if e.phase == "done"]
    assert done == [(0, "x a"), (0, "x b"), (1, "y a"), (1, "y b"), (2, "z a"), (2, "z b")]
    assert all(e.total == 3 for e in events)


@pytest.mark.parametrize("error", [KeyboardInterrupt(), Interrupted()])
def test_ctrl_c_keeps_what_finished_and_releases_the_group(error):
    script = Script(fail_at="y", error=error)
    run, _ = _run(script)
    assert [r.name for r in run.results] == ["x a", "x b", "y a"]  # y's first part was kept at once
    assert run.interrupted and not run.complete
    assert script.log == ["open m1 (2)", "close m1", "end"]


def test_a_stop_set_before_a_case_stops_there():
    stop = threading.Event()
    stop.set()
    run, events = _run(Script(), stop)
    assert run.results == [] and run.interrupted and events == []


def test_a_case_that_says_last_ends_the_run():
    script = Script(last_at="y")
    run, _ = _run(script)
    assert [r.name for r in run.results] == ["x a", "x b", "y a", "y b"]
    assert run.complete and not run.interrupted and script.log[-2:] == ["close m1", "end"]


def test_another_error_propagates_after_the_group_is_released():
    script = Script(fail_at="x", error=ValueError("boom"))
    with pytest.raises(ValueError):
        _run(script)
    assert script.log == ["open m1 (2)", "close m1", "end"]
