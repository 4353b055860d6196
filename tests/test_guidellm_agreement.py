"""benchmarks/guidellm_agreement.py end to end, tiny: llmcli's serving benchmark and GuideLLM's
(its own cached venv, tests/guidellm_tools.py) on the tests' vLLM server, one round of a few short
requests. What it checks is that the comparison compares the same work: GuideLLM accepts the
scenario the script writes, both clients complete every request with exactly the asked tokens, and
GuideLLM's reported throughput is its output tokens over its measured window (the script refuses
otherwise). No timing is asserted; the ratio only has to be a number.

Cost: on a fresh machine the first run installs GuideLLM with a CPU torch (about 2 minutes on two
cores, 1.5 GB); then about 15 seconds, most of it GuideLLM's start. Skipped where GuideLLM or vLLM
cannot be installed."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.served, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def guidellm():
    import guidellm_tools

    try:
        return guidellm_tools.command()
    except guidellm_tools.GuidellmUnavailable as exc:
        pytest.skip(f"GuideLLM cannot be installed here: {exc}")


def test_llmcli_and_guidellm_measure_the_same_requests(vllm_server, guidellm, tmp_path):
    numbers = tmp_path / "numbers.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "guidellm_agreement.py"), "--url", vllm_server.url,
           "--model", vllm_server.model, "-p", "16", "-n", "6", "-c", "2", "--requests", "6",
           "--rounds", "1", "--json", str(numbers)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"llmcli/guidellm output tok/s at c=2: (\d+\.\d+)", last)
    assert match, done.stdout
    assert math.isfinite(float(match.group(1))) and float(match.group(1)) > 0
    runs = json.loads(numbers.read_text())["runs"]
    (ours,), (theirs,) = runs["llmcli"], runs["guidellm"]
    assert ours["completed"] == theirs["completed"] == 6
    assert theirs["output_tokens"] == 6 * 6  # ignore_eos: every answer is exactly -n tokens
    assert theirs["tokens_over_window"] == pytest.approx(theirs["output_throughput"], rel=0.01)
    assert "what llmcli and vLLM call TPOT" in done.stdout


def test_guidellm_tools_reports_a_failed_install(tmp_path, monkeypatch):
    """A venv that cannot be built is GuidellmUnavailable (the test above then skips), with the log named."""
    import guidellm_tools

    monkeypatch.setenv("LLMCLI_TOOLS_CACHE", str(tmp_path))
    monkeypatch.setattr(guidellm_tools, "VERSION", "0.0.0-no-such-release")
    monkeypatch.setattr(sys, "executable", shutil.which("false"))  # `venv` fails at once
    with pytest.raises(guidellm_tools.GuidellmUnavailable, match="install.log"):
        guidellm_tools.command()
    assert not (guidellm_tools.root() / "venv" / guidellm_tools.MARKER).exists()
