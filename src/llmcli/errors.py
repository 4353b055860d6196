"""One exception family for llmcli, with the exit codes each maps to.

Errors are raised deep down as `LlmcliError` subclasses and turned into one line on stderr
plus an exit code at the CLI boundary (`llmcli.cli.app.main`). Nothing else decides exit codes.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit statuses, documented in the README and the man page."""

    OK = 0
    ERROR = 1  # anything not listed below
    USAGE = 2  # bad flags or arguments (Typer uses 2 as well)
    MODEL_NOT_FOUND = 3  # no such file, alias, repository, quantization or default model
    CONTEXT_OVERFLOW = 4  # the prompt does not fit the context window
    INVALID_MODEL = 5  # the file is not a usable GGUF (corrupt, truncated, hostile, hash mismatch)
    NETWORK = 6  # the hub, a mirror or a served model's server: unreachable, refused access, broke off
    INCOMPLETE = 7  # output cut short: a grammar not satisfied, or no answer yet (in reasoning, a call)
    NO_ANSWER = 8  # the model stopped without an answer (nothing after its reasoning or tool calls)
    INTERRUPTED = 130  # SIGINT (Ctrl-C)
    BROKEN_PIPE = 141  # the reader of stdout went away (`| head`); nothing is printed
    TERMINATED = 143  # SIGTERM


class LlmcliError(Exception):
    """Base of every error llmcli reports as one line; `hint` is an optional second sentence."""

    exit_code: ExitCode = ExitCode.ERROR
    label = "error"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def about(self, what: str) -> LlmcliError:
        """The same error, saying what it is about ("draft model /path: ...")."""
        return type(self)(f"{what}: {self.message}", hint=self.hint)

    def one_line(self) -> str:
        text = f"llmcli: {self.label}: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return text


class UsageError(LlmcliError):
    exit_code = ExitCode.USAGE
    label = "usage error"


class ModelNotFoundError(LlmcliError):
    exit_code = ExitCode.MODEL_NOT_FOUND
    label = "model not found"


class ContextOverflowError(LlmcliError):
    exit_code = ExitCode.CONTEXT_OVERFLOW
    label = "prompt too long"


class InvalidModelError(LlmcliError):
    exit_code = ExitCode.INVALID_MODEL
    label = "invalid model"


class NetworkError(LlmcliError):
    exit_code = ExitCode.NETWORK
    label = "network error"


class NoAnswerError(LlmcliError):
    """Raised after the output ended: the model stopped by itself without writing an answer."""

    exit_code = ExitCode.NO_ANSWER
    label = "no answer"


class IncompleteOutputError(LlmcliError):
    """Raised after the text was printed: the grammar or schema did not accept it."""

    exit_code = ExitCode.INCOMPLETE
    label = "incomplete output"


class ResourceError(LlmcliError):
    label = "not enough memory"


class ConfigError(LlmcliError):
    exit_code = ExitCode.USAGE
    label = "configuration error"


class InterruptedError_(LlmcliError):
    """Raised when the user interrupts an operation that has nothing partial to show."""

    exit_code = ExitCode.INTERRUPTED
    label = "interrupted"


class TerminatedError(LlmcliError):
    """Raised in the main thread by the SIGTERM handler, so cleanup runs before exiting 143."""

    exit_code = ExitCode.TERMINATED
    label = "terminated"


class RequestRefusedError(LlmcliError):
    """A served model's server refused the request itself (HTTP 400 or 422): its message says why."""

    label = "request refused"


class StreamBrokenError(NetworkError):
    """A served model's stream ended in the middle of an answer; `text` is what arrived before."""

    def __init__(self, message: str, hint: str | None = None, *, text: str = "") -> None:
        super().__init__(message, hint)
        self.text = text
