"""The signal watcher that raises the abort flag while the main thread is inside llama.cpp.

Python-level handlers are replaced by ones that do nothing here, so only the watcher can have
noticed the signal. Waits are generous and nothing is timed.
"""

from __future__ import annotations

import os
import select
import signal
import threading

import pytest

from llmcli.signals import SignalWatcher as _SignalWatcher

WAIT = 60


@pytest.fixture
def quiet_handlers():
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in signals}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_raise_the_flag_from_the_helper_thread(quiet_handlers, sig):
    seen = threading.Event()
    callers = []

    def on_signal():
        callers.append(threading.current_thread().name)
        seen.set()

    with _SignalWatcher(on_signal):
        os.kill(os.getpid(), sig)
        assert seen.wait(WAIT)
    assert callers == ["llmcli-signals"]


def test_other_signals_do_not_stop_and_reach_the_previous_wakeup_fd(quiet_handlers):
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    before = signal.set_wakeup_fd(write_fd)
    seen = threading.Event()
    try:
        with _SignalWatcher(seen.set):
            os.kill(os.getpid(), signal.SIGUSR1)
            assert select.select([read_fd], [], [], WAIT)[0]  # the watcher passed the byte on
            forwarded = os.read(read_fd, 64)
        assert forwarded == bytes([signal.SIGUSR1])
        assert not seen.is_set()
        assert signal.set_wakeup_fd(write_fd) == write_fd  # the previous fd is back in place
    finally:
        signal.set_wakeup_fd(before)
        os.close(read_fd)
        os.close(write_fd)


def test_the_watcher_leaves_no_thread_and_no_fd_behind():
    fds = set(os.listdir("/proc/self/fd"))
    with _SignalWatcher(lambda: None) as watcher:
        assert watcher.thread.is_alive()
    assert not watcher.thread.is_alive()
    assert set(os.listdir("/proc/self/fd")) == fds
    assert signal.set_wakeup_fd(-1) == -1


def test_without_file_descriptors_to_spare_the_watcher_steps_aside(monkeypatch):
    def no_pipe():
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "pipe", no_pipe)
    with _SignalWatcher(lambda: None) as watcher:
        assert watcher.thread is None
    assert signal.set_wakeup_fd(-1) == -1  # nothing was left pointing at a closed pipe
