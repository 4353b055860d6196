"""Adaptive threads on the real engine (Gemma): what is reported, and that -t turns it off. Speed is
not asserted here (benchmarks/busy_threads.py measures it)."""

from __future__ import annotations

import os

import pytest
from realmodel import generate_json, llmcli

from llmcli.engine.llama import physical_cores

pytestmark = pytest.mark.model
needs_two_cores = pytest.mark.skipif(physical_cores() < 2, reason="one core: nothing to adapt")


@needs_two_cores
def test_without_t_the_counts_adapt_and_are_reported():
    doc = generate_json("Once upon a time", "--raw", "--temperature", "0", "-n", "40")
    threads = doc["threads"]
    assert threads["adaptive"] is True
    assert set(threads["decode"]["used"]) >= {1, 2}  # the probe measured both counts
    assert threads["decode"]["threads"] in threads["decode"]["used"]


@needs_two_cores
def test_debug_logs_each_decision():
    result = llmcli("--debug", "generate", "Once upon a time", "--raw", "--temperature", "0", "-n", "40")
    assert result.returncode == 0
    assert any(line.startswith("llmcli: debug: threads: decode now") for line in result.stderr.splitlines())


@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_explicit_count_is_obeyed_exactly(how, monkeypatch):
    args = ["-t", "1"] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("LLMCLI_THREADS", "1")
    doc = generate_json("Once upon a time", "--raw", "--temperature", "0", "-n", "40", *args)
    assert doc["threads"] == {"adaptive": False, "decode": {"threads": 1}, "prefill": {"threads": 1}}
    assert os.environ.get("LLMCLI_THREADS") == ("1" if how == "env" else None)
