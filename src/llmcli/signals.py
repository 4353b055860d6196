"""Ctrl-C and SIGTERM while a model computes: above the engine, the same for every engine.

Python runs a signal handler only when the main thread is back in the interpreter, which can be
seconds away while it is inside one `llama_decode` of a long prompt batch. CPython's C-level
handler, though, writes the signal's number at once to the wakeup fd. `interrupt_on_sigint` points
that fd at a pipe, and a helper thread that sleeps on the pipe (using no CPU) calls the engine's
`interrupt()`, which raises the abort flag that llama.cpp polls between graph nodes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_held: list[int] | None = None  # Ctrl-C presses while `sigint_held` is in effect, not yet taken


@contextmanager
def sigint_held() -> Iterator[None]:
    """Ctrl-C does not break into what runs in here (a chat turn's bookkeeping: fitting the history,
    reading a saved state, the summary, the save), so nothing is cut in half. A press is kept for
    a reply that starts in here (`interrupt_on_sigint`), which then stops at once; one that no reply
    takes is dropped at the end. Main thread only."""
    import signal

    global _held
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outer, _held = _held, []
    previous = signal.signal(
        signal.SIGINT, lambda signum, frame: _held.append(signum) if _held is not None else None
    )
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _held = outer


@contextmanager
def sigint_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in here, as Python's default handler does, even inside
    `sigint_held` (a chat turn): for what can only be stopped by breaking the wait for it (a tool
    call). Main thread only; elsewhere this does nothing."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def interrupt_on_sigint(interrupt: Callable[[], None]) -> Iterator[bool]:
    """While streaming: the first Ctrl-C calls `interrupt` (generation stops soon and what was
    produced is kept), a second one raises KeyboardInterrupt at once. SIGTERM calls `interrupt`
    too, the moment it arrives (its own handler then ends the process). Yields whether a Ctrl-C
    was held (`sigint_held`) before the request began: the caller then calls `interrupt` once the
    request is under way (an engine clears its flag as a request starts), and that press counts
    as the first. Main thread only; elsewhere this does nothing."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    hits: list[int] = []
    if _held:
        hits.append(_held[0])
        _held.clear()

    def handler(signum, frame):
        hits.append(signum)
        interrupt()
        if len(hits) > 1:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with SignalWatcher(interrupt):
            yield bool(hits)
    finally:
        signal.signal(signal.SIGINT, previous)


class SignalWatcher:
    """Calls `on_signal` the moment SIGINT or SIGTERM arrives, from a helper thread that reads the
    wakeup-fd pipe, then passes the bytes on to any wakeup fd that was set before (an event
    loop's). Main thread only."""

    def __init__(self, on_signal) -> None:
        self.on_signal = on_signal

    def __enter__(self) -> SignalWatcher:
        """Without a pipe or a thread to spare (out of file descriptors), Ctrl-C is still seen, but
        only between two `llama_decode` calls."""
        import signal

        self.thread = None
        try:
            self.read_fd, self.write_fd = os.pipe()
        except OSError:
            return self
        try:
            os.set_blocking(self.write_fd, False)
            self.previous = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        except (OSError, ValueError):
            os.close(self.read_fd)
            os.close(self.write_fd)
            return self
        self.thread = threading.Thread(target=self._watch, name="llmcli-signals", daemon=True)
        try:
            self.thread.start()
        except RuntimeError:  # no thread can be started
            self.thread = None
            self.__close()
        return self

    def _watch(self) -> None:
        import signal

        wanted = {int(signal.SIGINT), int(signal.SIGTERM)}
        while data := os.read(self.read_fd, 64):  # b"" once __exit__ closes the write end
            if wanted.intersection(data):
                self.on_signal()
            if self.previous >= 0:
                try:
                    os.write(self.previous, data)
                except OSError:
                    pass

    def __exit__(self, *exc) -> None:
        if self.thread is not None:
            self.__close()

    def __close(self) -> None:
        import signal

        signal.set_wakeup_fd(self.previous)
        os.close(self.write_fd)  # the helper reads b"" and ends
        if self.thread is not None:
            self.thread.join()
        os.close(self.read_fd)
