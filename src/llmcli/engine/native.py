"""The llama.cpp glue every part of the llama.cpp engine shares (and bench's measuring surface,
`engine/measure.py`): its log kept quiet, the abort flag it polls, Ctrl-C and SIGTERM held while
it loads or frees, the attention and KV cache types of a context, and what a failed
`llama_decode` status means.
"""

from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager

from llmcli.contract import EngineOptions
from llmcli.errors import ContextOverflowError, LlmcliError, UsageError
from llmcli.gguf_file import KV_TYPES

_log_callback = None  # keeps the ctypes callback alive for the life of the process


def silence_logs(llama_cpp) -> None:
    """Hide llama.cpp's log output (it is shown with --debug).

    The sink is libc's `abs`, a C function that touches no memory and ignores the extra arguments,
    not a Python callback: Python code running inside llama.cpp's logging is where a signal handler
    would run, and an exception it raised there (Ctrl-C, SIGTERM) would be swallowed by ctypes.
    """
    global _log_callback
    if _log_callback is None:
        try:
            address = ctypes.cast(ctypes.CDLL(None).abs, ctypes.c_void_p).value
            _log_callback = llama_cpp.llama_log_callback(address)
        except (OSError, AttributeError, TypeError):
            _log_callback = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


@contextmanager
def deferred_signals():
    """Hold Ctrl-C and SIGTERM while llama.cpp loads (an exception raised inside a ctypes callback
    would be swallowed); the caller checks the list and calls `raise_for` once it is safe."""
    import signal

    hits: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield hits
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: hits.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        yield hits
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def raise_for(hits: list[int]) -> None:
    """What a signal held during the load turns into: Ctrl-C (exit 130) or SIGTERM (exit 143)."""
    import signal

    from llmcli.errors import TerminatedError

    if signal.SIGINT in hits:
        raise KeyboardInterrupt
    raise TerminatedError("received SIGTERM")


class AbortFlag:
    """A one-byte flag that llama.cpp polls between graph nodes without touching Python.

    The abort callback has the shape `bool f(void *data)`. libc's `strlen` on a two-byte buffer
    fits it exactly: it returns 0 while the buffer is empty and 1 once the first byte is set,
    so the compute threads poll the flag at C speed, with no GIL and no per-node Python call.
    A Python callback is used only where libc cannot be found.
    """

    def __init__(self, llama_cpp) -> None:
        self._buf = ctypes.create_string_buffer(2)
        self._py_callback = None
        try:
            libc = ctypes.CDLL(None)
            address = ctypes.cast(libc.strlen, ctypes.c_void_p).value
            self.callback = llama_cpp.ggml_abort_callback(address)
        except (OSError, AttributeError, TypeError):
            self.callback = llama_cpp.ggml_abort_callback(lambda _data: self.is_set())
        self.data = ctypes.cast(self._buf, ctypes.c_void_p)

    def set(self) -> None:
        self._buf[0] = b"\x01"

    def clear(self) -> None:
        self._buf[0] = b"\x00"

    def is_set(self) -> bool:
        return self._buf[0] != b"\x00"


def set_attention(L, params, opts: EngineOptions) -> None:
    """Flash attention and the KV cache types of `opts` into llama.cpp's context parameters."""
    params.flash_attn_type = {
        None: L.LLAMA_FLASH_ATTN_TYPE_AUTO,
        True: L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        False: L.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    }[opts.flash_attn]
    for field, name in (("type_k", opts.type_k), ("type_v", opts.type_v)):
        if name:
            setattr(params, field, ggml_type(L, name))


# ggml's type numbers for the KV cache types (gguf_file's one table of them), for those the binding
# does not export: llama-cpp-python 0.3.36 has no GGML_TYPE_BF16
GGML_KV_TYPES = {name: number for name, (number, _) in KV_TYPES.items()}


def ggml_type(L, name: str) -> int:
    value = getattr(L, f"GGML_TYPE_{name.upper()}", None)
    if value is None:
        value = GGML_KV_TYPES.get(name.lower())
    if value is None:
        raise UsageError(f"unknown KV cache type {name!r} (one of {', '.join(GGML_KV_TYPES)})")
    return value


def check_decode(rc: int, used: int, n_ctx: int) -> None:
    """Raise for a `llama_decode` status other than 0 (done) and 2 (aborted, handled by the caller)."""
    if rc == 1:
        raise ContextOverflowError(f"no room left in the KV cache ({used} of {n_ctx} tokens used)")
    if rc != 0:
        raise LlmcliError(
            f"llama_decode failed with status {rc}", hint="run with --debug for llama.cpp's log"
        )
