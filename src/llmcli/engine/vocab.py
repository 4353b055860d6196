"""A loaded model's vocabulary: text to tokens and tokens to bytes, and the special tokens' text.

`LlamaEngine` answers the contract's tokenizer calls from it; the decode loop, the grammar probe
and the exactness probe use it directly."""

from __future__ import annotations

import ctypes


class Tokenizer:
    """llama.cpp's tokenizer for one model's vocabulary (`handle`, a `llama_vocab` pointer)."""

    def __init__(self, L, handle) -> None:
        self.L = L
        self.handle = handle
        # Control tokens that are tool-call markup (`<tool_call>` in Qwen2.5, `<|python_tag|>`): shown
        # in the text, where the call parser takes them out; every other control token is not.
        self.shown = self._markup_tokens()

    def _markup_tokens(self) -> frozenset[int]:
        from llmcli.tools.calls import MARKUP

        found = set()
        for text in MARKUP:
            try:
                tokens = self.tokenize(text, special=True)
            except Exception:  # a vocabulary that cannot tokenize it has no such token
                continue
            if len(tokens) == 1:
                found.add(tokens[0])
        return frozenset(found)

    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        """Tokens of `text`; `special` parses control tokens such as <start_of_turn>."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (self.L.llama_token * cap)()
        n = self.L.llama_tokenize(self.handle, data, len(data), buf, cap, add_bos, special)
        if n < 0:
            cap = -n
            buf = (self.L.llama_token * cap)()
            n = self.L.llama_tokenize(self.handle, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def token_bytes(self, token: int, buf: ctypes.Array | None = None) -> bytes:
        """The raw bytes of one token; control tokens render as nothing."""
        buf = buf if buf is not None else ctypes.create_string_buffer(64)
        special = token in self.shown
        n = self.L.llama_token_to_piece(self.handle, token, buf, len(buf), 0, special)
        if n < 0:  # the piece is longer than the buffer: never truncate, ask again
            buf = ctypes.create_string_buffer(-n)
            n = self.L.llama_token_to_piece(self.handle, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    @property
    def add_bos(self) -> bool:
        return bool(self.L.llama_vocab_get_add_bos(self.handle))

    def bos_text(self) -> str:
        return self.special_text(self.L.llama_vocab_bos(self.handle))

    def eos_text(self) -> str:
        return self.special_text(self.L.llama_vocab_eos(self.handle))

    def special_text(self, token: int) -> str:
        """The text of a control token (e.g. "<bos>"), for chat templates; "" when there is none."""
        if token < 0:
            return ""
        buf = ctypes.create_string_buffer(64)
        n = self.L.llama_token_to_piece(self.handle, token, buf, len(buf), 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", "replace")
