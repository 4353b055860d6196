"""The chat loop: read a message (prompt-toolkit on a terminal, lines from a pipe), run a turn.

On a terminal: persistent history, history search (Ctrl-R), auto-suggestion, slash-command
completion, multiline input with a `\"\"\"` block or Esc-Enter / Alt-Enter, and bracketed paste.
Ctrl-C at the prompt clears the line; Ctrl-C during a reply stops it and keeps the partial
answer (marked interrupted); Ctrl-D exits.

Piped (stdin not a terminal): one message per line, replies on stdout, the readout on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from llmcli import paths
from llmcli.errors import LlmcliError, TerminatedError
from llmcli.render.stats import stats_line
from llmcli.render.stream import PlainSink
from llmcli.render.wrap import for_stream
from llmcli.repl import (
    attach_commands,  # noqa: F401  (registers /attach and /detach)
    commands,
    from_command,  # noqa: F401  (registers /from)
)
from llmcli.repl import session_files as sessions
from llmcli.repl.chat_session import ChatSession
from llmcli.repl.readout import LiveReadout

MULTILINE_FENCE = '"""'


@dataclass
class Repl:
    session: ChatSession
    interactive: bool
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    autosave: bool = False
    quiet: bool = False
    # a reasoning model's reasoning streamed as it comes (--hide-thinking: on a terminal only its
    # folded line, piped nothing; `/think show` shows it either way)
    show_thinking: bool = True
    # the engine the exactness notice was last said for (weakly: a reload frees the old one)
    _exact_noticed: Any = field(default=None, init=False, repr=False)
    # tool calls: run without asking (--approve-tools), the tools answered "always" this session,
    # and how a question is answered (None: prompt-toolkit on a terminal, the next line when piped;
    # returns None at the end of the input, raises KeyboardInterrupt for Ctrl-C)
    approve_all: bool = False
    approved: set[str] = field(default_factory=set)
    ask: Callable[[str], str | None] | None = None
    _sink: Any = field(default=None, init=False, repr=False)  # the turn's, while it runs
    _stdin: TextIO | None = field(default=None, init=False, repr=False)

    # -- output ------------------------------------------------------------------------------

    def info(self, text: str) -> None:
        if not self.quiet:
            self._line(text)

    def warn(self, text: str) -> None:
        """Shown even with --quiet."""
        self._line(f"warning: {text}")

    def error(self, text: str) -> None:
        self._line(f"error: {text}")

    def _line(self, text: str) -> None:
        """A message on stderr, broken to the terminal's width between words or stats parts."""
        self.err.write(for_stream(text, self.err) + "\n")
        self.err.flush()

    # -- turns -------------------------------------------------------------------------------

    def run_turn(self, text: str | None) -> None:
        """Send `text` (or regenerate the last answer when None) and show the reply. While it
        streams, Ctrl-C stops the reply (request.drive). A Ctrl-C before that (the history is
        fitted, a saved state read) breaks into nothing but stops the reply as it begins; one after
        it (the summary line, the autosave) is ignored: the turn and its save are never cut in half."""
        from llmcli.signals import sigint_held

        with sigint_held():
            self._run_turn(text)

    def _run_turn(self, text: str | None) -> None:
        sink: LiveReadout | PlainSink
        if self.interactive:
            sink = LiveReadout(self.out, show_thinking=self.show_thinking)
        else:  # piped: the reasoning on stderr, as generate puts it (nowhere with --hide-thinking, --quiet)
            from llmcli import render

            thoughts = self.err if self.show_thinking and not self.quiet else None
            sink = PlainSink(self.out, thoughts, dim=render.color_enabled(self.err))
        sink.start()
        self._sink = sink
        try:
            if text is None:
                result = self.session.retry(sink)
            else:
                result = self.session.send(text, sink)
        finally:
            self._sink = None
            sink.stop()
        if result is None:
            return
        if result.dropped_messages:
            self.info(
                f"note: the history overflowed the context; dropped the {result.dropped_messages} oldest "
                f"message(s), {result.dropped_tokens} tokens"
            )
        if not result.recorded:
            self.info("[interrupted before the first token: the history is as it was]")
        elif result.stopped_in_call:
            self.info("[interrupted: the tool calls so far and their results are kept in the history]")
        elif result.done.finish_reason == "interrupted":
            self.info("[interrupted: the partial answer is kept in the history]")
        if missing := self._unanswered(result):
            self.warn(missing)
        elif self.session.constraint and result.done.constraint_complete is False:
            from llmcli.errors import IncompleteOutputError
            from llmcli.request.endings import incomplete_message

            error = IncompleteOutputError(
                *incomplete_message(result.done, self.session.params, self.session.constraint)
            )
            self.warn(error.one_line().removeprefix("llmcli: "))
        self.info(stats_line(result.done.stats, context=self.session.engine.n_ctx))
        self._exact_notice(result.done.stats)
        if self.autosave and self.session.session_name:
            self.save(self.session.session_name)

    def _unanswered(self, result) -> str | None:
        """A reply with no answer (the model stopped inside or after its reasoning, or after its tool
        calls, or --max-tokens cut it first): one notice line, with what to change in chat's words."""
        from llmcli.request.endings import missing_answer

        error = missing_answer(result.done, result.answer, result.calls, self.session.params)
        if error is None:
            return None
        hint = {
            "raise -n/--max-tokens": "/set max_tokens N gives it room",
            "raise -c/--ctx-size": "a larger -c gives it room",
        }.get(error.hint or "", "")
        if result.done.reasoning or result.done.reasoning_open:
            hint = (hint + ", " if hint else "") + "/set reasoning_budget N bounds the thinking"
        if result.calls and not hint:
            hint = "the calls and their results are in the history"
        message = error.message if error.message.startswith("no answer") else f"no answer: {error.message}"
        return f"{message}; {hint}" if hint else message

    def _exact_notice(self, stats) -> None:
        """Once per loaded model: --spec-exact let this answer verify nothing (a long context on
        the CPU's f16 cache), said as generate says it, in /set's words."""
        import weakref

        from llmcli.request.spec_notices import exact_limit_notice

        engine = self.session.engine
        if self._exact_noticed is not None and self._exact_noticed() is engine:
            return
        if notice := exact_limit_notice(stats, engine.info, chat=True):
            self._exact_noticed = weakref.ref(engine)
            self.info("note: " + notice)

    def handle(self, line: str) -> bool:
        """One input: a slash command or a message. Returns False to exit."""
        if line.startswith("/") and not line.startswith("//"):
            return commands.dispatch(self, line)
        if line.startswith("//"):
            line = line[1:]  # "//" sends a message that starts with a slash
        if not line.strip():
            return True
        try:
            self.run_turn(line)
        except TerminatedError:
            raise  # SIGTERM ends the chat (exit 143); what was saved stays saved
        except LlmcliError as exc:
            self.error(exc.one_line().removeprefix("llmcli: "))
            if self.session.pending:  # the turn did not happen: its attachments wait for the next
                from llmcli.repl.attach_commands import counted

                self.info(f"{counted(self.session.pending)} still attached to the next message "
                          "(/detach takes them back)")  # fmt: skip
        return True

    def show_reasoning(self, text: str) -> None:
        """A turn's reasoning (`/think show`) on stderr, as it came (dimmed on a colour terminal):
        model text, never wrapped or marked up."""
        from llmcli import render

        text = text.strip("\n")
        dim = render.color_enabled(self.err)
        self.err.write((f"\x1b[2m{text}\x1b[22m" if dim else text) + "\n")
        self.err.flush()

    # -- tool calls --------------------------------------------------------------------------

    def tool_loop(self, toolset, *, approve_all: bool, rounds: int, timeout: float):
        """The chat's tool loop: each call shown and approved here (y / n / always for this tool),
        unless `approve_all`; each result shown as one line."""
        from llmcli.request.tool_loop import ToolLoop

        self.approve_all = approve_all
        return ToolLoop(toolset, self.approve, rounds, timeout, on_call=self._tool_started,
                        on_result=self._tool_done)  # fmt: skip

    def approve(self, call) -> str:
        """Whether `call` may run: "yes", "no", or "stop" (Ctrl-C at the question: the answer
        stops there)."""
        from llmcli.request.tool_loop import describe_call

        if self.approve_all or call.name in self.approved:
            return "yes"
        question = f"run tool {describe_call(call)}? [y]es, [n]o, [a]lways for {call.name}: "
        if isinstance(self._sink, LiveReadout):
            self._sink.pause()
        try:
            while True:
                try:
                    answer = self._ask(question)
                except KeyboardInterrupt:
                    return "stop"
                if answer is None:
                    self.warn(f"no answer to the call of {call.name} (end of input): not run")
                    return "no"
                word = answer.strip().lower()
                if word in ("y", "yes"):
                    return "yes"
                if word in ("n", "no"):
                    return "no"
                if word in ("a", "always"):
                    self.approved.add(call.name)
                    return "yes"
                self.info("answer y (run it), n (do not) or a (run this tool without asking from now on)")
        finally:
            if isinstance(self._sink, LiveReadout):
                self._sink.resume()

    def _ask(self, question: str) -> str | None:
        if self.ask is not None:
            return self.ask(question)
        if self.interactive:
            import signal

            from prompt_toolkit import prompt

            # the prompt's event loop leaves SIGINT at Python's default handler when it ends: the
            # turn's own (`sigint_held`) is put back, so a later Ctrl-C cuts nothing in half
            handler = signal.getsignal(signal.SIGINT)
            try:
                return prompt(question)
            except EOFError:
                return None
            finally:
                signal.signal(signal.SIGINT, handler)
        self.err.write(question + "\n")  # piped: the next input line answers
        self.err.flush()
        stdin = self._stdin if self._stdin is not None else sys.stdin
        line = stdin.readline()
        return line.rstrip("\n") if line else None

    def _tool_started(self, call) -> None:
        if isinstance(self._sink, LiveReadout):
            self._sink.tool_started(call.name)

    def _tool_done(self, record: dict) -> None:
        from llmcli.request.tool_loop import call_line

        sink = self._sink
        if isinstance(sink, LiveReadout):
            sink.tool_finished(record["duration_ms"])
        if self.quiet:
            return
        line = for_stream(call_line(record), self.err)
        if isinstance(sink, LiveReadout):
            sink.note(line, self.err)
        else:
            self._line(call_line(record))

    # -- sessions ----------------------------------------------------------------------------

    def save(self, name: str):
        sessions.keep_images(self.session.images())  # before the session that refers to them
        path = sessions.save(name, self.session.to_record())
        self.session.save_kv(name)  # after the session file: a state is only ever an optimisation
        return path

    def load(self, name: str) -> None:
        from llmcli.conversation import Conversation

        doc = sessions.load(name)
        try:
            conversation = Conversation.from_dict(doc, images=sessions.read_image)
        except ValueError as exc:
            raise sessions.SessionError(
                f"{sessions.session_path(name)} has a malformed conversation ({exc})",
                hint="the file was left untouched",
            ) from None
        from llmcli import kvstore

        self.session.conversation = conversation
        self.session.restore_params(doc.get("params"))
        self.session.restore_think(doc.get("think"))
        self.session.session_name = name
        self.session.kv_restore = kvstore.session_state_path(name)
        self.info(f"loaded session {name!r}: {len(conversation.messages)} messages")

    # -- loops -------------------------------------------------------------------------------

    def run_piped(self, stdin: TextIO) -> None:
        self._stdin = stdin  # a tool call's approval reads the next line too
        while raw := stdin.readline():
            if not self.handle(raw.rstrip("\n")):
                break

    def run_interactive(self, prompt=None) -> None:
        prompt = prompt or build_prompt_session()
        with sigterm_ends_prompt(prompt) as check_sigterm:
            while True:
                try:
                    line = prompt.prompt("> ")
                except KeyboardInterrupt:
                    continue  # Ctrl-C at the prompt clears the line
                except EOFError:
                    break
                if line.strip() == MULTILINE_FENCE:
                    line = read_block(prompt)
                check_sigterm()  # one that came with the keys that ended the prompt
                if line is not None and not self.handle(line):
                    break


@contextmanager
def sigterm_ends_prompt(prompt):
    """SIGTERM raises TerminatedError where the main thread is; inside one of prompt-toolkit's
    event-loop callbacks asyncio would catch it, log it and let the prompt go on. While a prompt
    runs, SIGTERM asks it to exit with the error instead (and `check()` raises it if the prompt
    ended with a line first); between prompts it raises as usual."""
    import signal
    import threading

    hits: list[int] = []

    def check() -> None:
        if hits:
            raise TerminatedError("received SIGTERM")

    if threading.current_thread() is not threading.main_thread():
        yield check
        return

    def stop(app) -> None:
        if app.is_running and not app.is_done:
            app.exit(exception=TerminatedError("received SIGTERM"))

    def handler(signum, frame):
        hits.append(signum)
        app = prompt.app
        if app.is_running and app.loop is not None:
            app.loop.call_soon_threadsafe(stop, app)
        else:
            raise TerminatedError("received SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield check
    finally:
        signal.signal(signal.SIGTERM, previous)


def read_block(prompt) -> str | None:
    """Lines up to a closing \"\"\" (Ctrl-C abandons the block). The history keeps the block as
    one entry, which Up brings back whole (Enter sends it), not its lines and fences one by one."""
    history: Any = getattr(prompt, "history", None)
    holding = hasattr(history, "holding")
    lines: list[str] = []
    if holding:
        history.holding = True
    try:
        while True:
            try:
                line = prompt.prompt(". ")
            except KeyboardInterrupt:
                return None
            except EOFError:
                break
            if line.strip() == MULTILINE_FENCE:
                break
            lines.append(line)
    finally:
        if holding:
            history.holding = False
    text = "\n".join(lines)
    if holding and text.strip():
        history.append_string(text)
    return text


def _block_history(base):
    """`base` (a prompt-toolkit History class) that stores no lone \"\"\" fence, and nothing while
    `holding` (the lines of a multiline block, which `read_block` stores as one entry)."""

    class BlockHistory(base):
        holding = False

        def append_string(self, string: str) -> None:
            if self.holding or string.strip() == MULTILINE_FENCE:
                return
            super().append_string(string)

    return BlockHistory


def build_key_bindings():
    from prompt_toolkit.key_binding import KeyBindings

    kb = KeyBindings()

    @kb.add("escape", "enter")
    def _newline(event) -> None:
        """Esc-Enter / Alt-Enter inserts a newline instead of sending."""
        event.current_buffer.insert_text("\n")

    return kb


class SlashCompleter:
    """Completes slash command names from the registry, and `/attach`'s path (prompt-toolkit
    Completer protocol)."""

    def __new__(cls):
        from prompt_toolkit.completion import Completer, Completion, PathCompleter
        from prompt_toolkit.document import Document

        files = PathCompleter(expanduser=True)

        class _Completer(Completer):
            def get_completions(self, document, complete_event):
                text = document.text_before_cursor
                if text.startswith("/attach "):  # a path: completed as a shell completes one
                    yield from files.get_completions(Document(text[len("/attach ") :]), complete_event)
                    return
                if not text.startswith("/") or " " in text:
                    return
                for name, cmd in commands.REGISTRY.items():
                    if name.startswith(text):
                        yield Completion(name, start_position=-len(text), display_meta=cmd.help)

        return _Completer()


def _atomic_history(path):
    """prompt-toolkit's FileHistory format, but every entry is stored by an atomic rewrite.

    A history file that cannot be read or written (a directory, no permission) costs the history,
    with one warning, never the chat."""
    import datetime

    from prompt_toolkit.history import FileHistory

    from llmcli import render
    from llmcli.atomic import locked, write_atomic

    class AtomicFileHistory(FileHistory):
        warned = False

        def load_history_strings(self):
            try:
                return list(super().load_history_strings())
            except OSError as exc:
                self._warn(exc)
                return []

        def store_string(self, string: str) -> None:
            entry = f"\n# {datetime.datetime.now()}\n" + "".join(f"+{line}\n" for line in string.split("\n"))
            try:
                with locked(path):  # two chats at once: each keeps the other's entries
                    try:
                        old = path.read_bytes()  # bytes: whatever is there (even invalid UTF-8) is kept
                    except FileNotFoundError:
                        old = b""
                    write_atomic(path, old + entry.encode("utf-8"), lock=False)
            except OSError as exc:
                self._warn(exc)

        def _warn(self, exc: OSError) -> None:
            if not self.warned:
                self.warned = True
                render.warn(
                    f"the chat history {path} cannot be used ({exc.strerror or exc}); it is not saved"
                )

    return _block_history(AtomicFileHistory)(str(path))


def build_prompt_session(input=None, output=None):
    from prompt_toolkit import PromptSession
    from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
    from prompt_toolkit.history import InMemoryHistory

    history_file = paths.data_dir() / "chat_history"
    try:
        history_file.parent.mkdir(parents=True, exist_ok=True)
        history = _atomic_history(history_file)
    except OSError:
        history = _block_history(InMemoryHistory)()
    return PromptSession(
        history=history,
        auto_suggest=AutoSuggestFromHistory(),
        enable_history_search=False,  # up-arrow prefix search would disable completion; Ctrl-R searches
        completer=SlashCompleter(),
        complete_while_typing=True,
        key_bindings=build_key_bindings(),
        reserve_space_for_menu=4,
        input=input,
        output=output,
    )
