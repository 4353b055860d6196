"""How the llama.cpp engine picks a token: the request's sampler chain (grammar, penalties, the
truncations, temperature), the pick that reads it (an in-place argmax where the chain is greedy
alone), and the grammar probe that tells whether a constrained answer is complete."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from llmcli.contract import SamplingParams
from llmcli.engine.vocab import Tokenizer
from llmcli.errors import UsageError


def build_chain(L, tokenizer: Tokenizer, n_vocab: int, params: SamplingParams, seed: int, *, debug: bool):
    """The request's sampler chain (the caller frees it); a grammar llama.cpp refuses: UsageError."""
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    add = lambda s: L.llama_sampler_chain_add(chain, s)  # noqa: E731
    if params.grammar:
        printed: list[str] = []
        with _stderr_kept(printed, keep=not debug):
            grammar = L.llama_sampler_init_grammar(tokenizer.handle, params.grammar.encode(), b"root")
        if not grammar:
            L.llama_sampler_free(chain)
            raise UsageError(grammar_error(params.grammar, "".join(printed)))
        add(grammar)
    if penalised(params):
        add(penalty_sampler(L, n_vocab, params.repeat_last_n, params.repeat_penalty,
                            params.frequency_penalty, params.presence_penalty))  # fmt: skip
    if params.temperature <= 0:
        add(L.llama_sampler_init_greedy())
        return chain
    if params.top_k > 0:
        add(L.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        add(L.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0:
        add(L.llama_sampler_init_min_p(params.min_p, 1))
    add(L.llama_sampler_init_temp(params.temperature))
    add(L.llama_sampler_init_dist(seed))
    return chain


def penalised(params: SamplingParams) -> bool:
    """Whether the chain has llama.cpp's penalties sampler: repeat, frequency or presence."""
    return params.repeat_penalty != 1.0 or bool(params.frequency_penalty) or bool(params.presence_penalty)


def penalty_sampler(L, n_vocab: int, last_n: int, repeat: float, frequency: float = 0.0,
                    presence: float = 0.0):  # fmt: skip
    """The penalties sampler (repetition, frequency, presence over the last `last_n` tokens);
    llama.cpp builds differ on whether it takes n_vocab first."""
    try:
        return L.llama_sampler_init_penalties(n_vocab, last_n, repeat, frequency, presence)
    except TypeError:  # the four-argument form of other llama.cpp versions
        return L.llama_sampler_init_penalties(last_n, repeat, frequency, presence)


def pick(L, ctx, sampler, n_vocab: int, greedy: bool):
    """`pick(i)`: the token sampled from the logits at batch position i (-1: the last).

    A chain that is only llama.cpp's greedy sampler (temperature 0, no grammar, no penalties) picks
    the first highest logit and keeps no state, so an argmax over the logits in place gives the
    same token without the chain's copy of the whole vocabulary into a candidate array: about 10
    us a position against 90 (SmolLM2's 49,152 tokens; five times that for Gemma's 262,144), which
    a verification batch pays at every position.

    The argmax is numpy's, and importing numpy costs about 0.1 s, as much as a thousand picks by
    the chain: so a process picks by the chain until it has made `CHAIN_PICKS` greedy picks (a
    short answer never imports numpy), then by the argmax. Both pick the same token."""
    if not greedy:
        return lambda i: L.llama_sampler_sample(sampler, ctx, i)
    logits, shape = L.llama_get_logits_ith, (n_vocab,)
    argmax = None

    def greedy_pick(i: int) -> int:
        nonlocal argmax
        if argmax is None:
            np = _numpy_once_worth_it()
            if np is None:
                return L.llama_sampler_sample(sampler, ctx, i)
            as_array = np.ctypeslib.as_array
            argmax = lambda i: int(as_array(logits(ctx, i), shape=shape).argmax())  # noqa: E731
        return argmax(i)

    return greedy_pick


CHAIN_PICKS = 256  # greedy picks by llama.cpp's chain before the argmax is worth numpy's import
_chain_picks_left = [CHAIN_PICKS]


def _numpy_once_worth_it():
    """numpy, when it is imported already or the process has made `CHAIN_PICKS` greedy picks;
    else None (and one more pick is counted)."""
    np = sys.modules.get("numpy")
    if np is not None:
        return np
    _chain_picks_left[0] -= 1
    if _chain_picks_left[0] > 0:
        return None
    import numpy

    return numpy


@contextmanager
def _stderr_kept(printed: list[str], keep: bool = True) -> Iterator[None]:
    """Route file descriptor 2 to a temporary file around a C call that prints its errors there
    rather than through llama.cpp's log (the grammar parser), and append what it printed to
    `printed`; with `keep` false (--debug) the output goes to the terminal as it is."""
    if not keep:
        yield
        return
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            printed.append(sink.read(4096).decode("utf-8", "replace"))


def grammar_error(grammar: str, printed: str) -> str:
    """One line for a GBNF grammar llama.cpp refused: the parser's reason where it printed one
    (its first line, without the rest of the grammar that follows "at"), else what is checked here."""
    import re

    found = re.search(r"error parsing grammar: ([^\n]*)", printed)
    if found:
        reason = found.group(1).strip()
        if len(reason) > 80:
            reason = reason[:77] + "..."
        return f"the grammar could not be parsed: {reason}"
    if not re.search(r"(?m)^\s*root\s*::=", grammar):
        return "the grammar has no `root` rule (generation starts from `root ::= ...`)"
    return "the grammar could not be used (an undefined rule or left recursion; see --debug)"


class GrammarProbe:
    """Where the grammar sampler accepted: after each token, whether it would let an
    end-of-generation token through now (it does so only when the root rule is complete).

    The sampler's own state answers this for GBNF and JSON schemas alike, with the exact grammar
    llama.cpp enforced; a re-parse would need a second parser per kind and could disagree. It is
    asked with a one-candidate array, which `llama_sampler_apply` masks without changing state.
    Offsets are characters of the decoded text at token boundaries, so a text cut by a stop string
    (or inside a multi-byte character) is complete only when it ends exactly where the grammar
    accepted."""

    def __init__(self, tokenizer: Tokenizer, chain, *, note_start: bool = True) -> None:
        L = self.L = tokenizer.L
        self.sampler = L.llama_sampler_chain_get(chain, 0)  # the grammar comes first in the chain
        eog = L.llama_vocab_eos(tokenizer.handle)
        self.eog = eog if eog >= 0 else L.llama_vocab_eot(tokenizer.handle)
        self.data = (L.llama_token_data * 1)()
        self.array = L.llama_token_data_array(
            data=ctypes.cast(self.data, ctypes.POINTER(L.llama_token_data)), size=1, selected=-1, sorted=False
        )
        self.points: set[int] = set()
        if note_start:  # else the caller notes where the constrained text starts
            self.note(0, pending_bytes=False)

    def note(self, chars: int, *, pending_bytes: bool) -> None:
        if not pending_bytes and self.eog >= 0 and self._accepts_eog():
            self.points.add(chars)

    def complete_now(self) -> bool:
        """Whether the grammar's text is complete at this point (it would let EOG through)."""
        return self._accepts_eog()

    def _accepts_eog(self) -> bool:
        self.data[0].id, self.data[0].logit, self.data[0].p = self.eog, 0.0, 0.0
        self.array.size, self.array.selected = 1, -1
        self.L.llama_sampler_apply(self.sampler, ctypes.byref(self.array))
        return self.data[0].logit != float("-inf")

    def accepted_at(self, chars: int) -> bool:
        return chars in self.points
