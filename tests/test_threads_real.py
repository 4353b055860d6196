"""Adaptive threads on the real engine (Gemma): what is reported, and that -t turns it off. Speed is
not asserted here (benchmarks/busy_threads.py measures it)."""

from __future__ import annotations

import json
import os

import pytest
from realmodel import generate_json, llmcli

from llmcli.engine.llama import physical_cores

pytestmark = pytest.mark.model
needs_two_cores = pytest.mark.skipif(physical_cores() < 2, reason="one core: nothing to adapt")


@needs_two_cores
def test_without_t_the_counts_adapt_and_are_reported():
    """Which counts the policy measures depends on the machine's load (the run queue rules out a
    count that would wait for a busy core), so the record is checked for consistency, not for a
    particular choice."""
    doc = generate_json("Once upon a time", "--raw", "--temperature", "0", "-n", "40")
    threads = doc["threads"]
    assert threads["adaptive"] is True
    for phase in ("decode", "prefill"):
        report = threads[phase]
        assert report["used"] and set(report["used"]) <= set(range(1, physical_cores() + 1))
        assert report["threads"] in report["used"]
        assert all(change["threads"] in report["used"] for change in report["changes"])
        if report["changes"]:
            assert report["changes"][-1]["threads"] == report["threads"]


@needs_two_cores
def test_debug_logs_each_decision():
    """Each change of a count is one debug line, and the --json record lists the same changes."""
    result = llmcli(
        "--debug", "generate", "Once upon a time", "--raw", "--temperature", "0", "-n", "40", "--json"
    )
    assert result.returncode == 0
    threads = json.loads(result.stdout)["threads"]
    logged = [
        line for line in result.stderr.splitlines() if line.startswith("llmcli: debug: threads: decode now")
    ]
    assert len(logged) >= len(threads["decode"]["changes"])
    for change in threads["decode"]["changes"]:
        assert any(
            line.startswith(f"llmcli: debug: threads: decode now {change['threads']} ") for line in logged
        )
    assert all(int(line.split()[5]) in threads["decode"]["used"] for line in logged)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_explicit_count_is_obeyed_exactly(how, monkeypatch):
    args = ["-t", "1"] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("LLMCLI_THREADS", "1")
    doc = generate_json("Once upon a time", "--raw", "--temperature", "0", "-n", "40", *args)
    assert doc["threads"] == {"adaptive": False, "decode": {"threads": 1}, "prefill": {"threads": 1}}
    assert os.environ.get("LLMCLI_THREADS") == ("1" if how == "env" else None)
