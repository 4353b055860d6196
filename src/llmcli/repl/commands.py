"""Slash commands, declared once: this registry drives dispatch, `/help` and tab completion.

Each handler receives the REPL (for output and the session) and the argument text, and
returns False to end the REPL. Handlers print through `repl.info` (stderr) so stdout keeps
carrying model text only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from llmcli import reasoning
from llmcli.contract import SamplingParams
from llmcli.errors import LlmcliError, TerminatedError, UsageError
from llmcli.sampling import settings_text, value_text

if TYPE_CHECKING:
    from llmcli.repl.chat_session import ChatSession


class Repl(Protocol):
    """What a command may use of the REPL that runs it (`repl.loop.Repl`, which dispatches here:
    the commands sit below the loop, not beside it)."""

    session: ChatSession

    def info(self, text: str) -> None: ...

    def error(self, text: str) -> None: ...

    def run_turn(self, text: str | None) -> None: ...

    def show_reasoning(self, text: str) -> None: ...

    def save(self, name: str) -> Path: ...

    def load(self, name: str) -> None: ...


@dataclass(frozen=True)
class SlashCommand:
    name: str
    usage: str
    help: str
    handler: Callable[[Repl, str], bool | None]


REGISTRY: dict[str, SlashCommand] = {}
_SAMPLING = frozenset(SamplingParams.__dataclass_fields__)
# other REPLs' words for the same commands (Ollama's /bye and /?), accepted but not listed
ALIASES = {"/bye": "/exit", "/quit": "/exit", "/?": "/help"}


def command(name: str, usage: str, help: str):
    def register(fn: Callable[[Repl, str], bool | None]):
        REGISTRY[name] = SlashCommand(name, usage, help, fn)
        return fn

    return register


def dispatch(repl: Repl, line: str) -> bool:
    """Run a slash command line; returns False when the REPL should exit."""
    name, _, arg = line.strip().partition(" ")
    cmd = REGISTRY.get(ALIASES.get(name, name))
    if cmd is None:
        close = [c for c in REGISTRY if c.startswith(name)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        repl.error(f"unknown command {name}{hint}; /help lists them")
        return True
    try:
        return cmd.handler(repl, arg.strip()) is not False
    except TerminatedError:
        raise  # SIGTERM ends the chat, even in the middle of a command
    except LlmcliError as exc:
        line = exc.one_line().removeprefix("llmcli: ")
        # "error: usage error: ..." says it twice; other labels (model not found...) tell more
        repl.error(line.removeprefix(f"{UsageError.label}: ") if isinstance(exc, UsageError) else line)
        return True


@command("/help", "/help", "List the commands.")
def _help(repl: Repl, arg: str) -> None:
    width = max(len(c.usage) for c in REGISTRY.values())
    for c in REGISTRY.values():
        repl.info(f"  {c.usage:<{width}}  {c.help}")
    repl.info('  Multiline: start and end with """ on a line of its own, or press Esc-Enter / Alt-Enter.')


@command("/exit", "/exit", "Leave the chat (also /bye, /quit or Ctrl-D).")
def _exit(repl: Repl, arg: str) -> bool:
    return False


@command("/clear", "/clear", "Start a new conversation and reset the KV cache.")
def _clear(repl: Repl, arg: str) -> None:
    repl.session.clear()
    repl.info("conversation cleared")


@command("/system", "/system TEXT", "Set the system prompt (empty to remove it).")
def _system(repl: Repl, arg: str) -> None:
    repl.session.conversation.system = arg
    repl.info("system prompt set" if arg else "system prompt removed")


@command(
    "/set",
    "/set [NAME [VALUE]]",
    "Change a sampling, speculative, KV cache or think (on, off, auto) setting; show one, or all.",
)
def _set(repl: Repl, arg: str) -> None:
    from llmcli.repl.chat_settings import KV_SETTINGS, SPEC_SETTINGS

    if not arg:
        for key, value in repl.session.params.as_dict().items():
            if key not in ("grammar", "json_schema"):  # the command line's constraint, not /set's
                repl.info(f"  {key} = {value_text(key, value)}")
        for key in SPEC_SETTINGS if repl.session.engine.can.speculation else ():  # a server drafts on its own
            repl.info(f"  {key} = {_setting(repl, key)}")
        for key in KV_SETTINGS:
            if (kv_type := repl.session.cache_type(key)) is not None:
                repl.info(f"  {key} = {kv_type}")
        repl.info(f"  think = {repl.session.setting('think')}")
        return
    name, _, value = arg.partition(" ")
    dashed = name.replace("_", "-")
    if not value.strip():  # `/set NAME`: its value
        repl.info(f"{name} = {_setting(repl, name)}")
        return
    carried = repl.session.set_param(name, value.strip())
    if name == "think":
        note = repl.session.think_note()
        repl.info(f"think = {repl.session.setting('think')}" + (f" ({note})" if note else ""))
        return
    if dashed in SPEC_SETTINGS or dashed in KV_SETTINGS:
        repl.info(f"{name} = {_setting(repl, name)} ({_reloaded(carried)})")
        return
    repl.info(f"{name} = {_setting(repl, name)}")


def _setting(repl: Repl, name: str) -> str:
    """A setting's value as `/set` takes it (`seed = random`, `stop = END|STOP`), not Python's repr."""
    key, value = name.replace("-", "_"), repl.session.setting(name)
    return value if isinstance(value, str) and key not in _SAMPLING else value_text(key, value)


def _reloaded(carried: int | None) -> str:
    if carried:
        return f"model reloaded; its KV cache of {carried} tokens kept"
    return "model reloaded"


@command("/show", "/show", "Show the model, parameters and prompt template.")
def _show(repl: Repl, arg: str) -> None:
    from llmcli.units import human_size

    s = repl.session
    info = s.engine.info
    about = [x for x in (info.architecture, info.quantization) if x]
    if info.size_bytes:
        about.append(human_size(info.size_bytes))
    repl.info(f"model      {s.loaded.name}" + (f" ({', '.join(about)})" if about else ""))
    for label, text in s.engine.describe():  # its file or endpoint, context, cache or template
        repl.info(f"{label:<10} {text}")
    options = s.engine.options
    if s.engine.can.speculation and options.speculative.enabled:
        sp = options.speculative
        line = f"speculative {sp.kind}, k up to {sp.draft_max}{', exact' if sp.exact else ''}"
        if sp.kind == "draft":
            k, v = options.draft_cache_types()
            line += f"; draft {sp.model_draft_ref or sp.model_draft}, kv cache K {k}, V {v}"
        repl.info(line)
    if s.engine.can.template:
        repl.info(f"template   {s.prompt_format.source}")
        repl.info(f"reasoning  {reasoning.describe(info.reasoning)}")
    repl.info(f"overflow   {s.on_overflow}")
    repl.info("params     " + settings_text(s.params.as_dict()))
    if s.conversation.system:
        repl.info(f"system     {s.conversation.system}")


@command("/context", "/context", "Tokens used of the context window, per message.")
def _context(repl: Repl, arg: str) -> None:
    s = repl.session
    # as the template renders the conversation (a served model's server renders its own)
    total, prompt, images = 0, "", 0
    if not s.engine.can.template:  # the server applies its own: its count of the last turn is the one known
        # the last answer's count, if this server gave it (not a local model's before /model, nor
        # a conversation /clear emptied since)
        if s.last is None or not s.last.sources or not s.conversation.messages:
            repl.info("context: no turns yet (a served model's server counts its context)")
        else:
            used, window = s.last.context_used, s.engine.n_ctx
            share = f" of {window} tokens ({100 * used / window:.0f}%)" if window else " tokens"
            repl.info(f"context: {used}{share}, the server's count at the last answer")
    else:
        prompt = s.render_text(s.conversation.template_messages())
        images = s.image_tokens_known()  # the images' positions, apart from the text's tokens
        total = len(s.engine.tokenize(prompt, special=True, add_bos=False)) + images
        apart = f"; {images} of them image tokens" if images else ""
        repl.info(f"context: {total} of {s.engine.n_ctx} tokens ({100 * total / s.engine.n_ctx:.0f}%{apart})")
    counted = images

    def count(text: str) -> str:
        nonlocal counted
        try:
            n = s.engine.count(text)
        except UsageError:  # a server that does not tokenize for clients
            return f"{len(text):>6} chr"
        counted += n
        return f"{n:>6} tok"

    if s.conversation.system:
        repl.info(f"  {'':>3} {'system':<9} {count(s.conversation.system)}")
    for i, m in enumerate(s.conversation.messages, 1):
        own = m.content
        if m.texts:  # the attached texts' blocks come first: the preview is what was typed
            from llmcli.media.fragment import compose

            own = own[len(compose(m.texts, "")) :].lstrip("\n")
        preview = own.replace("\n", " ")[:50]
        if m.tool_calls:  # an answer that called tools: which (their JSON is in the template row)
            names = ", ".join(str((c.get("function") or {}).get("name") or "?") for c in m.tool_calls)
            preview = f"{preview} [calls {names}]".strip()
        mark = " [interrupted]" if m.interrupted else ""
        repl.info(f"  {i:>3} {m.role:<9} {count(m.content)}  {preview}{mark}")
        for text in m.texts:  # in the message's count above: its share of it
            n = s.text_tokens.get(text.sha256)
            repl.info(f"  {'':>3} {'  text':<9} {'?' if n is None else n:>6} tok  {text.name} (of the above)")
        for image in m.images:  # counted apart: the positions the projector gives it
            n = s.image_tokens.get(image.sha256)
            repl.info(f"  {'':>3} {'image':<9} {'?' if n is None else n:>6} tok  {image.name}"
                      + (" (counted at the next turn)" if n is None else ""))  # fmt: skip
    answers = dropped = kept = 0
    if s.engine.can.template and any(m.reasoning for m in s.conversation.messages):
        answers, dropped, kept = s.reasoning_in(prompt)  # the rows count answers alone
    if kept:
        repl.info(
            f"  {'':>3} {'reasoning':<9} {kept:>6} tok  "
            "answers' reasoning the template keeps (after the last question)"
        )
    if total > counted + kept:  # what the rows do not show, so that they add up to the total
        extra = total - counted - kept
        what = "turn markers and the template's own text" + (
            ", the tools block and the calls" if s.tool_loop is not None else ""
        )
        repl.info(f"  {'':>3} {'template':<9} {extra:>6} tok  {what}")
    if answers:
        repl.info(
            f"reasoning: {dropped} tokens of {answers} earlier answer(s) dropped from the context "
            "(the template leaves them out; /think show shows the last)"
        )
    elif not s.engine.can.template and (n := sum(1 for m in s.conversation.messages if m.reasoning)):
        repl.info(f"reasoning: that of {n} earlier answer(s) is not sent back to the server")


@command(
    "/think", "/think [show|on|off|auto]", "Show the last answer's reasoning; or set thinking as /set think."
)
def _think(repl: Repl, arg: str) -> None:
    s = repl.session
    word = arg.strip().lower()
    if word in ("on", "off", "auto"):
        _set(repl, f"think {word}")
        return
    if word not in ("", "show"):
        raise UsageError(f"usage: /think [show|on|off|auto], got {arg!r}")
    if not word:  # where the switch stands, and what the model makes of it
        here = s.engine.can.template  # the think switch goes to the template here (else to the server)
        about = f"reasoning {reasoning.describe(s.engine.info.reasoning)}" if here else "the server's model"
        repl.info(f"think = {s.setting('think')} ({about}); /think show shows the last answer's reasoning")
        return
    text = s.last_reasoning or _last_reasoning(s)
    if not text.strip():
        repl.info("the last answer has no reasoning")
        return
    repl.show_reasoning(text)


def _last_reasoning(s: ChatSession) -> str:
    """The reasoning of the history's last answer (a session loaded from a file)."""
    for m in reversed(s.conversation.messages):
        if m.role == "assistant":
            return m.reasoning or ""
    return ""


@command("/undo", "/undo", "Drop the last exchange.")
def _undo(repl: Repl, arg: str) -> None:
    removed = repl.session.conversation.undo()
    repl.session.last_reasoning = ""
    repl.info(f"removed {removed} message(s)" if removed else "nothing to undo")


@command("/retry", "/retry", "Regenerate the last answer.")
def _retry(repl: Repl, arg: str) -> None:
    if not repl.session.conversation.messages:
        repl.info("nothing to retry")
        return
    repl.run_turn(None)


@command("/save", "/save [NAME] [--force]", "Save the conversation (default: the current session name).")
def _save(repl: Repl, arg: str) -> None:
    from llmcli.repl import session_files as sessions

    words = arg.split()
    force = any(w in ("--force", "-f") for w in words)
    words = [w for w in words if w not in ("--force", "-f")]
    if len(words) > 1:
        raise UsageError("usage: /save [NAME] [--force]")
    name = words[0] if words else repl.session.session_name
    if not name:
        raise UsageError("usage: /save NAME")
    if name != repl.session.session_name and not force and sessions.session_path(name).exists():
        raise UsageError(
            f"a saved session named {name!r} holds another conversation; "
            f"`/save {name} --force` replaces it, or choose another name"
        )
    path = repl.save(name)
    repl.session.session_name = name
    repl.info(f"saved to {path}")


@command("/load", "/load NAME", "Load a saved conversation.")
def _load(repl: Repl, arg: str) -> None:
    if not arg:
        from llmcli.repl import session_files as sessions

        names = sessions.list_names()
        repl.info("sessions: " + (", ".join(names) if names else "none"))
        return
    repl.load(arg)


@command("/stats", "/stats", "Figures for the last turn and the whole session.")
def _stats(repl: Repl, arg: str) -> None:
    from llmcli.render.stats import stats_line

    s = repl.session
    if s.last is None:
        repl.info("no turns yet")
        return
    repl.info("last turn: " + stats_line(s.last, context=s.engine.n_ctx))
    turns = f"{s.totals.turns} turn{'' if s.totals.turns == 1 else 's'}"
    repl.info(f"session: {turns} · " + stats_line(s.totals.stats, ttft=False))
    if s.last.threads:
        repl.info("threads: " + threads_line(s.last.threads))
    if s.last.speculative:
        sp = s.last.speculative
        how = f"{sp.get('type')}, k up to {sp.get('draft_max')}"
        how += ", adaptive" if sp.get("adaptive") else ""
        t = s.totals.stats
        repl.info(
            f"speculative: {how} · session: {t.accepted_tokens}/{t.drafted_tokens} accepted over "
            f"{t.target_passes} target passes"
        )


def threads_line(report: dict) -> str:
    """`decode 1 (adaptive: 2 -> 1 at token 517) · prefill 2 (adaptive)`, or the fixed counts."""
    parts = []
    for phase, unit in (("decode", "token"), ("prefill", "batch")):
        r = report.get(phase, {})
        if not report.get("adaptive"):
            parts.append(f"{phase} {r.get('threads', '?')} (fixed)")
            continue
        changes = ", ".join(f"-> {c['threads']} at {unit} {c['step']}" for c in r.get("changes", []))
        parts.append(f"{phase} {r.get('threads', '?')} (adaptive{': ' + changes if changes else ''})")
    return " · ".join(parts)


@command("/model", "/model REF", "Switch to another model, keeping the conversation.")
def _model(repl: Repl, arg: str) -> None:
    if not arg:
        repl.info(f"model: {repl.session.loaded.ref}")
        return
    carried = repl.session.switch_model(arg)
    kept = f"; its KV cache of {carried} tokens kept" if carried else ""
    s = repl.session
    template = f"{s.prompt_format.source} template" if s.engine.can.template else "the server's template"
    repl.info(f"now using {s.loaded.display} ({template}{kept})")
