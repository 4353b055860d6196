"""One chat session: the loaded model, the conversation, the settings, and how a turn runs.

This is the part of chat that knows nothing about terminals: it builds the prompt from the
whole history (so the engine can reuse the KV cache for everything but the new message), runs
the stream through a `sink` (the live readout, or plain output when piped), and records the
answer. The REPL loop and the tests drive it the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from llmcli import prompting, templates
from llmcli.contract import Done, Event, Fit, Request, SamplingParams, Stats
from llmcli.conversation import Conversation
from llmcli.errors import StreamBrokenError
from llmcli.loader import Loaded
from llmcli.log.rows import Logged
from llmcli.media.image import Image
from llmcli.repl.chat_settings import SessionSettings, think_word
from llmcli.request.tool_loop import ToolLoop, ToolTurn


class Sink(Protocol):
    def __call__(self, event: Event) -> None: ...


@dataclass
class Totals:
    """The session's turns and their figures summed, as a `Stats` so its rates are computed the
    same way as one turn's."""

    turns: int = 0
    stats: Stats = field(default_factory=Stats)
    passes: int = 0  # target passes of every turn: a plain turn makes one per decoded token
    speculated: bool = False  # whether any turn speculated (only then is there a tok/pass to show)

    _SUMMED = ("prompt_tokens", "cached_tokens", "prefill_tokens", "prefill_ms", "completion_tokens",
               "decode_tokens", "decode_ms", "drafted_tokens", "accepted_tokens", "image_tokens",
               "image_ms")  # fmt: skip

    def add(self, s: Stats) -> None:
        self.turns += 1
        for name in self._SUMMED:
            setattr(self.stats, name, getattr(self.stats, name) + getattr(s, name))
        self.passes += s.passes
        self.speculated = self.speculated or bool(s.speculative or s.target_passes)
        self.stats.target_passes = self.passes if self.speculated else 0
        for name, source in s.sources.items():  # a served model's unknown or estimated counts stay so
            if source in ("unknown", "chunks") or name not in self.stats.sources:
                self.stats.sources[name] = source


@dataclass
class TurnResult:
    done: Done
    dropped_messages: int = 0
    dropped_tokens: int = 0
    recorded: bool = True  # False: interrupted before the first token, so the history is as it was
    stopped_in_call: bool = False  # Ctrl-C during a tool call (or at its approval): the answer ends there
    answer: str = ""  # the final answer (after tool calls, the last round's text)
    calls: int = 0  # tool calls in the answer


@dataclass
class ChatSession(SessionSettings):
    loaded: Loaded
    params: SamplingParams
    conversation: Conversation = field(default_factory=Conversation)
    on_overflow: str = "drop-oldest"
    session_name: str | None = None
    last: Stats | None = None
    totals: Totals = field(default_factory=Totals)
    # (ref, speculative options, speculation_optional=, type_k=, type_v=): the loader's, with the chat's flags
    load_model: Callable[..., Loaded] | None = None
    allow_base: bool = False  # --fallback-template: chat with a base model in its fallback format
    constraint: str | None = None  # "grammar" or "json_schema": every reply is constrained
    recommended: dict[str, Any] = field(default_factory=dict)  # the model's sampling, applied
    kv_restore: Path | None = None  # a saved KV state to try before the next turn (kvstore)
    kv_cap_mb: int | None = None  # --kv-cache-max-mb (None: the setting)
    think: bool | None = (
        None  # --think/--no-think, `/set think`, config `think` (None: the template's default)
    )
    # the latest turn's reasoning when the turn was not recorded (stopped before its answer began),
    # for `/think show`; a recorded answer keeps its own in the history
    last_reasoning: str = ""
    think_given: bool = (
        False  # the command line (flag, LLMCLI_THINK, config) set `think`: a session's does not
    )
    log: Logged | None = None  # how each turn is logged (llmcli.log); None: --no-log
    # the tools the model may call, and how each call is approved and shown (None: no tools)
    tool_loop: ToolLoop | None = None
    # images and texts (media.fragment.TextFile) attached for the next message (`/attach`, `chat
    # -a`): they join it when it is sent
    pending: list[Any] = field(default_factory=list)
    text_tokens: dict[str, int | None] = field(default_factory=dict)  # sha256 -> a text's tokens
    image_tokens: dict[str, int] = field(default_factory=dict)  # sha256 -> positions, as the turns found

    def apply_recommended(self) -> dict[str, Any]:
        """Use the loaded model's recommended sampling where the user set nothing (again after a
        switch: the previous model's recommendation is undone first)."""
        from llmcli.sampling import apply_recommended

        pristine = SamplingParams()
        for name in self.recommended:
            if name in self.params.defaulted:
                setattr(self.params, name, getattr(pristine, name))
        self.recommended = apply_recommended(self.params, self.engine.info, self.loaded.ref)
        return self.recommended

    # what a saved session's "params" give back on --resume and /load (the constraint is the
    # command line's)
    RESTORED = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed",
                "max_tokens", "stop")  # fmt: skip

    def restore_params(self, saved: object) -> list[str]:
        """A saved session's sampling settings, where the command line (flags, environment,
        config) set nothing; a value of the wrong type or out of range is skipped. Returns the
        names restored."""
        from llmcli.errors import UsageError

        restored: list[str] = []
        if not isinstance(saved, dict):
            return restored
        for name in self.RESTORED:
            value, old = saved.get(name), getattr(self.params, name)
            if value is None or not self._unset(name) or not _param_value(name, value):
                continue
            setattr(self.params, name, list(value) if name == "stop" else value)
            try:
                self.params.validate()
            except UsageError:
                setattr(self.params, name, old)
                continue
            restored.append(name)
        self.params.defaulted = self.params.defaulted - set(restored)
        return restored

    def restore_think(self, saved: object) -> bool:
        """A saved session's think switch (what `/set think` left), where the command line set none,
        so that a resumed chat goes on as it was. Returns whether it was restored."""
        if self.think_given or saved not in ("on", "off"):
            return False
        self.think = saved == "on"
        return True

    def _unset(self, name: str) -> bool:
        """Whether the command line left `name` as it comes (no flag, variable or config key)."""
        if name == "seed":
            return self.params.seed is None
        if name == "stop":
            return not self.params.stop
        return name in self.params.defaulted

    def check_model(self, loaded: Loaded) -> None:
        """A base model is refused unless `allow_base`: it would answer in babble."""
        from llmcli.errors import UsageError

        if prompting.is_base(loaded.engine) and not self.allow_base:
            raise UsageError(prompting.chat_refusal(loaded.engine, loaded.ref))

    @property
    def engine(self):
        return self.loaded.engine

    @property
    def prompt_format(self) -> templates.PromptFormat:
        return prompting.prompt_format(self.engine)

    def render_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt's tokens for `messages`, as a turn builds them (a local model)."""
        return self.engine.tokenize(self.render_text(messages), special=True, add_bos=False)

    def render_text(self, messages: list[dict[str, str]]) -> str:
        """The prompt's text for `messages`, as a turn renders it (engine/local.py): an answer's
        reasoning in the field the template reads, or dropped; the think switch as set; the tools
        block where tools are offered."""
        from llmcli.engine import local

        fmt = self.prompt_format
        think = local.thinking(self.engine, Request(self.params, messages=messages, think=self.think)).think
        variables = local.switch_variables(self.engine, think)
        if self.tool_loop is not None:
            variables = {**(variables or {}), "tools": self.tool_loop.toolset.specs()}
        return templates.render(
            fmt, local.template_messages(messages, fmt.template), bos_token=self.engine.bos_text(),
            eos_token=self.engine.eos_text(), variables=variables,
        )  # fmt: skip

    def reasoning_in(self, prompt: str) -> tuple[int, int, int]:
        """Of the history's answers with reasoning: how many had it left out of `prompt` (the
        template drops earlier turns' reasoning, or reads none), its tokens, and the tokens of the
        reasoning `prompt` keeps."""
        answers = dropped = kept = 0
        for m in self.conversation.messages:
            if m.role != "assistant" or not m.reasoning:
                continue
            n = self.engine.count(m.reasoning)
            if m.reasoning.strip() in prompt:
                kept += n
            else:
                answers, dropped = answers + 1, dropped + n
        return answers, dropped, kept

    def answer_reserve(self) -> int:
        """Room kept for the answer when fitting the history: max_tokens, at most a quarter window."""
        wanted = self.params.max_tokens or 512
        return max(16, min(wanted, self.engine.n_ctx // 4))

    def send(self, text: str, sink: Sink) -> TurnResult:
        """Add a user message and produce the answer; the answer is recorded even if interrupted,
        unless before its first token: then neither is (the turn did not happen)."""
        attached, self.pending = list(self.pending), []
        texts = tuple(a for a in attached if not isinstance(a, Image))
        try:
            text = self._with_texts(texts, text)  # too long for the context: refused, still attached
        except BaseException:
            self.pending = attached
            raise
        self.conversation.add_user(text, tuple(a for a in attached if isinstance(a, Image)), texts)
        try:
            result = self._answer(sink)
            if not result.recorded:  # Ctrl-C before the first token: the turn did not happen
                self.conversation.undo()
                self.pending = attached  # nor did the attachments go: still attached for the next
            return result
        except StreamBrokenError:
            raise  # a served model broke off: its partial answer is in the history (see _answer)
        except BaseException:
            self.conversation.undo()
            self.pending = attached
            raise

    def _with_texts(self, texts: tuple, text: str) -> str:
        """The message with its text attachments before it, refused in one line where they do not
        fit what the context leaves beside the system prompt, the text and the answer's room (the
        overflow policy may drop older turns, never these)."""
        from llmcli.request.fragments import attach_texts

        if not texts:
            return text
        rest = "\n".join([self.conversation.system or "", text])
        composed, placed = attach_texts(self.engine, texts, text, rest=rest, message=-1,
                                        max_tokens=self.params.max_tokens)  # fmt: skip
        self.text_tokens.update({p.file.sha256: p.tokens for p in placed})
        return composed

    def fragments(self) -> tuple:
        """The conversation's text attachments where its request holds them (media.fragment.Placed)."""
        from llmcli.media.fragment import Placed

        placed = self.conversation.texts_by_index().items()
        tokens = self.text_tokens
        return tuple(Placed(t, index, tokens.get(t.sha256)) for index, texts in placed for t in texts)

    def retry(self, sink: Sink) -> TurnResult | None:
        """Regenerate the last answer, its tool calls and results included (the previous one is
        discarded, unless the new one is interrupted before its first token)."""
        previous = self.conversation.pop_last_answer()
        if not previous and not (
            self.conversation.messages and self.conversation.messages[-1].role == "user"
        ):
            return None
        result = self._answer(sink)
        if not result.recorded and previous:  # stopped before a new one began: keep the old
            self.conversation.messages += previous
        return result

    def _answer(self, sink: Sink) -> TurnResult:
        """One turn: the whole history as one request (a local engine fits it to the context by the
        overflow policy and reuses its cached prefix; a server does its own)."""
        from llmcli.conversation import Message
        from llmcli.request.tool_loop import drive_tools

        messages = self.conversation.template_messages()
        placed = self.conversation.images_by_index()  # the last user message's go as `images`
        last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        request = Request(
            self.params, messages=messages,
            fit=Fit(self.answer_reserve(), self.on_overflow), before_prefill=self._restore_kv,
            think=self.think, images=placed.pop(last, ()), history_images=placed, fragments=self.fragments(),
        )  # fmt: skip
        if self.tool_loop is not None:
            request.tools = self.tool_loop.toolset.specs()
        if self.log is not None:
            self.log.ref = self.loaded.ref  # after /model, the model now answering
        try:
            done, prepared, turn = drive_tools(self.engine, request, sink, self.tool_loop, log=self.log)
        except StreamBrokenError as exc:  # a served model broke off: its partial answer is kept
            self.conversation.add_assistant(exc.text, interrupted=True)
            raise
        del self.conversation.messages[: prepared.dropped_messages]  # what the overflow policy dropped
        # the calls and their results, in order, then the final answer: the next turn's prompt
        # holds them as the model saw them
        self.conversation.messages += [Message.from_template(m) for m in turn.messages]
        recorded = self._record(done, prepared.prompt_format, turn)
        self.last_reasoning = "" if recorded else done.reasoning.strip() and done.reasoning
        self.last = done.stats
        self.totals.add(done.stats)
        self.image_tokens.update({a["sha256"]: a["tokens"] for a in done.stats.images if a.get("tokens")})
        return TurnResult(done, prepared.dropped_messages, prepared.dropped_tokens, recorded=recorded,
                          stopped_in_call=turn.interrupted, answer=turn.last_text,
                          calls=len(turn.calls))  # fmt: skip

    def _record(self, done: Done, prompt_format: str, turn: ToolTurn) -> bool:
        """Add the answer to the history, marked if interrupted; one stopped before its first token
        is not an answer: returns False and adds nothing. After tool calls, the final answer is the
        last round's text (the earlier rounds' are in the messages with their calls); an answer
        stopped during a call ends with the calls' results, marked interrupted."""
        interrupted = done.finish_reason == "interrupted"
        stats = stats_record(self.loaded, self.params, done, prompt_format, turn.calls or None)
        if turn.messages and (turn.interrupted or (interrupted and not turn.last_text)):
            last = next(m for m in reversed(self.conversation.messages) if m.role == "assistant")
            last.interrupted, last.stats = True, stats
            return True
        if interrupted and not done.text:
            return False
        self.conversation.add_assistant(
            turn.last_text,
            interrupted=interrupted,
            stats=stats,
            # apart from the answer (the template decides what of it to see); an empty block is none
            reasoning=done.reasoning if done.reasoning.strip() else None,
        )
        return True

    def _restore_kv(self, prompt: list[int]) -> float:
        """Load the session's saved KV state (once, before the first turn); returns the ms spent."""
        if self.kv_restore is None:
            return 0.0
        import time

        from llmcli import kvstore

        path, self.kv_restore = self.kv_restore, None
        started = time.perf_counter()
        kvstore.restore(self.engine, path, prompt, what=f"session {self.session_name!r}")
        return (time.perf_counter() - started) * 1000

    def save_kv(self, name: str):
        """Save the KV cache beside the session `name` (see kvstore); never raises."""
        from llmcli import kvstore

        if not self.engine.can.kv_state:
            return kvstore.SaveResult(skipped="a served model's cache lives on its server")
        path = kvstore.session_state_path(name)
        # reload: the chat goes on from exactly what a resuming process will load (engine/state.py)
        return kvstore.save(self.engine, path, cap=kvstore.cap_bytes(self.kv_cap_mb), reload=True)

    def clear(self) -> None:
        self.last_reasoning = ""
        if self.log is not None:  # a new conversation in the log too
            from llmcli.log.rows import new_cid

            self.log.cid = new_cid()
        self.conversation.clear()
        self.engine.reset()

    def switch_model(self, ref: str, speculative=None, **kv: str | None) -> int:
        """Load `ref` in place of the current model. The speculative settings and KV cache types in
        effect (the command line's, or what `/set` changed since) go with it, except to a served
        model, which drafts and keeps its cache on its server. `kv`: type_k/type_v to change.
        Returns the cached tokens the new engine took over (`carry_kv`; 0: the next turn prefills
        the conversation again)."""
        assert self.load_model is not None
        optional = speculative is None  # the session's settings, where the new model can take them
        if speculative is None:
            speculative = self.spec
        if self.engine.can.load_options:  # its KV cache types, to a model that takes them
            options = self.engine.options
            kv = {"type_k": options.type_k, "type_v": options.type_v, **kv}
        new = self.load_model(ref, speculative, speculation_optional=optional, **kv)
        old = self.loaded
        try:
            self.check_model(new)
            carried = carry_kv(old.engine, new.engine)
        except BaseException:  # Ctrl-C while the cache is copied too: the old model stays
            new.engine.close()
            raise
        self.loaded = new
        old.engine.close()
        self.apply_recommended()
        return carried

    def image_tokens_known(self) -> int:
        """The conversation's image positions, as far as a turn has counted them (`/context`)."""
        return sum(self.image_tokens.get(i.sha256, 0) for m in self.conversation.messages for i in m.images)

    def images(self) -> list[Image]:
        """The conversation's images, each once (a saved session keeps their bytes apart)."""
        seen = {image.sha256: image for m in self.conversation.messages for image in m.images}
        return list(seen.values())

    def to_record(self) -> dict[str, Any]:
        params = self.params.as_dict()
        params.pop("grammar", None)
        return {
            "model": self.loaded.ref,
            "params": params,
            "on_overflow": self.on_overflow,
            "think": think_word(self.think),  # a reasoning model's switch: on, off or auto
            # the KV cache types in effect (`/set cache-type-k` included); None: a served model's
            "cache_type_k": self.cache_type("cache-type-k"),
            "cache_type_v": self.cache_type("cache-type-v"),
            # a base model chatted with through --fallback-template: resuming it needs no flag again
            **({"fallback_template": True} if self.allow_base else {}),
            **self.conversation.to_dict(),
        }


def carry_kv(old, new) -> int:
    """Hand `old`'s KV cache to `new` where it would hold the same keys and values: the same model
    file, llama.cpp build and cache-shaping settings, what a saved state must match
    (`Engine.state_identity`), as after `/set spec-type lookup` or `/set spec-draft-n-max 4`, which
    load the model again only for the verification batch's size. The next turn then reuses the
    cache instead of prefilling the whole conversation again. Returns the tokens carried (0: none,
    and `new`'s cache is empty: slower, never wrong)."""
    from llmcli.engine.state import mismatch
    from llmcli.errors import LlmcliError

    try:
        if mismatch(old.state_identity(), new.state_identity()) is not None:
            return 0
        tokens, payload = old.state_payload()
    except LlmcliError:  # a served model's cache is its server's
        return 0
    if not tokens:
        return 0
    return len(tokens) if new.load_state_payload(tokens, payload) else 0  # no copy of the KV bytes


def stats_record(loaded: Loaded, params: SamplingParams, done: Done, prompt_format: str,
                 tool_calls: list[dict] | None = None) -> dict[str, Any]:  # fmt: skip
    """What the saved session keeps of a turn: the turn's record (llmcli.record), in brief."""
    from llmcli import record

    full = record.build(ref=loaded.ref, info=loaded.engine.info, params=params, done=done,
                        prompt_format=prompt_format, tool_calls=tool_calls)  # fmt: skip
    return record.turn(full)


def _param_value(name: str, value: object) -> bool:
    """Whether a saved session's `value` has the type of the sampling setting `name`."""
    if name == "stop":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or name not in ("seed", "top_k", "repeat_last_n", "max_tokens")
