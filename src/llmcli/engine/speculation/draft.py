"""The draft model of speculative decoding (-md): a second model and context that proposes tokens
greedily for the target to verify, and the check, before either model's weights load, that its
vocabulary is the target's."""

from __future__ import annotations

from pathlib import Path

from llmcli.contract import EngineOptions
from llmcli.engine.native import AbortFlag, ggml_type, raise_for, set_attention
from llmcli.engine.sampler import penalty_sampler, pick
from llmcli.errors import InvalidModelError, LlmcliError, UsageError


class DraftModel:
    """The draft model: a second model and context (same vocabulary, checked before loading) that
    proposes tokens greedily. Its cache follows the target's history by prefix reuse: rejected
    proposals are dropped at the next proposal, missing tokens evaluated in one batch.

    What it takes from the target is passed in: its options, context size and micro-batch, thread
    count, abort flag, weight repacking and vocabulary size. A load that fails raises; the engine
    that loads it then frees the target."""

    def __init__(self, L, options: EngineOptions, hits: list[int], *, n_ctx: int, n_ubatch: int,
                 threads: int, abort: AbortFlag, repack: bool, n_vocab_target: int) -> None:  # fmt: skip
        self.L = L
        opts = options.speculative
        self.path = Path(str(opts.model_draft))
        self.ctx = None
        self.sampler = None
        self._penalised: tuple[tuple[float, int], object] | None = None  # (setting, sampler chain)
        params = L.llama_model_default_params()
        params.use_extra_bufts = repack
        gpu = opts.gpu_layers_draft
        all_layers = 999 if L.llama_supports_gpu_offload() else 0
        params.n_gpu_layers = all_layers if gpu is None or gpu < 0 else gpu
        progress = L.llama_progress_callback(lambda value, data: not hits)
        params.progress_callback = progress
        self.model = L.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.model:
            if hits:
                raise_for(hits)
            raise InvalidModelError(f"llama.cpp could not load the draft model {self.path}",
                                    hint="run with --debug for llama.cpp's log")  # fmt: skip
        self.vocab = L.llama_model_get_vocab(self.model)
        cparams = L.llama_context_default_params()
        n_ctx = opts.ctx_size_draft or n_ctx
        cparams.n_ctx = max(256, -(-n_ctx // 256) * 256)
        cparams.n_batch = min(options.batch_size, cparams.n_ctx)
        cparams.n_ubatch = min(n_ubatch, cparams.n_batch)
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.no_perf = False
        cparams.n_outputs_max = opts.draft_max + 1  # as the target's: the same graphs, the same numerics
        cparams.swa_full = True
        # the target's attention and KV cache types: a draft that rounds as the target does proposes
        # what the target samples (a self-draft on a q8_0 cache: 93-98% accepted with the draft's
        # cache left at f16, llama.cpp's default for it)
        # (-ctkd/-ctvd set them apart, as llama.cpp's tools do)
        set_attention(L, cparams, options)
        self.type_k, self.type_v = options.draft_cache_types()
        cparams.type_k, cparams.type_v = ggml_type(L, self.type_k), ggml_type(L, self.type_v)
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            L.llama_model_free(self.model)
            self.model = None
            raise LlmcliError(f"llama.cpp could not create the draft model's context of {n_ctx} tokens",
                              hint="try a smaller -cd/--ctx-size-draft")  # fmt: skip
        self.n_ctx = L.llama_n_ctx(self.ctx)
        self.n_batch = L.llama_n_batch(self.ctx)
        self.threads = threads
        L.llama_set_abort_callback(self.ctx, abort.callback, abort.data)
        self.sampler = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(self.sampler, L.llama_sampler_init_greedy())
        self.pick = pick(L, self.ctx, self.sampler, L.llama_vocab_n_tokens(self.vocab), greedy=True)
        self.n_vocab_target = n_vocab_target
        self._cached: list[int] = []

    def reset(self) -> None:
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        self._cached = []

    def reset_perf(self) -> None:
        self.L.llama_perf_context_reset(self.ctx)

    def perf_ms(self) -> float:
        """Its evaluation time so far (llama.cpp adds to its counters only when it synchronizes,
        which a batch with no logits read yet has not done: so it synchronizes first)."""
        self.L.llama_synchronize(self.ctx)
        data = self.L.llama_perf_context(self.ctx)
        return data.t_p_eval_ms + data.t_eval_ms

    def _decode(self, tokens: list[int]) -> bool:
        L = self.L
        arr = (L.llama_token * len(tokens))(*tokens)
        rc = L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(tokens)))
        if rc == 0:
            self._cached.extend(tokens)
            return True
        self._resync()
        return False

    def _resync(self) -> None:
        mem = self.L.llama_get_memory(self.ctx)
        in_cache = self.L.llama_memory_seq_pos_max(mem, 0) + 1
        if in_cache < len(self._cached):
            del self._cached[in_cache:]
        elif in_cache > len(self._cached) and not self.L.llama_memory_seq_rm(mem, 0, len(self._cached), -1):
            self.L.llama_memory_clear(mem, True)
            self._cached = []

    def sync(self, tokens: list[int]) -> bool:
        """Make the cache hold exactly `tokens` (at least one evaluated now, for fresh logits)."""
        L = self.L
        if len(tokens) > self.n_ctx or not tokens:
            return False
        common, cached = 0, self._cached
        limit = min(len(cached), len(tokens) - 1)
        while common < limit and cached[common] == tokens[common]:
            common += 1
        if common < len(cached):
            mem = L.llama_get_memory(self.ctx)
            if not L.llama_memory_seq_rm(mem, 0, common, -1):
                L.llama_memory_clear(mem, True)
                common = 0
            del cached[common:]
        for i in range(common, len(tokens), self.n_batch):
            if not self._decode(tokens[i : i + self.n_batch]):
                return False
        return True

    def propose(
        self, history: list[int], k: int, threads: int, penalty: tuple[float, int] | None = None,
        window: list[int] | None = None,
    ) -> list[int]:  # fmt: skip
        """Up to `k` greedy tokens after `history`; stops after an end-of-generation token. With
        `penalty` (the target's repeat penalty and window), the pick is llama.cpp's penalty sampler
        then greedy, primed with the tokens in `window`, as the target's chain has seen them."""
        L = self.L
        if threads != self.threads:
            L.llama_set_n_threads(self.ctx, threads, threads)
            self.threads = threads
        if len(history) + k > self.n_ctx or not self.sync(history):
            return []
        out: list[int] = []
        pick = self.pick if penalty is None else self._penalised_pick(penalty, window or [])
        while True:
            token = pick(-1)
            if token >= self.n_vocab_target:  # a token the target's vocabulary does not have
                break
            out.append(token)
            if len(out) >= k or L.llama_vocab_is_eog(self.vocab, token):
                break
            if not self._decode([token]):
                break
        return out

    def _penalised_pick(self, penalty: tuple[float, int], window: list[int]):
        """A pick through a chain of llama.cpp's penalty sampler and greedy (made once per setting),
        reset and fed `window`; each pick is then accepted into it, as a proposal goes on."""
        L = self.L
        if self._penalised is None or self._penalised[0] != penalty:
            self._free_penalised()
            chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
            repeat, last_n = penalty
            n_vocab = L.llama_vocab_n_tokens(self.vocab)
            L.llama_sampler_chain_add(chain, penalty_sampler(L, n_vocab, last_n, repeat))
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
            self._penalised = (penalty, chain)
        chain = self._penalised[1]
        L.llama_sampler_reset(chain)
        for token in window:
            L.llama_sampler_accept(chain, token)
        return lambda i: L.llama_sampler_sample(chain, self.ctx, i)  # accepts what it picks

    def _free_penalised(self) -> None:
        if (made := getattr(self, "_penalised", None)) is not None:
            self.L.llama_sampler_free(made[1])
        self._penalised = None

    def close(self) -> None:
        L = self.L
        self._free_penalised()
        if getattr(self, "sampler", None):
            L.llama_sampler_free(self.sampler)
            self.sampler = None
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            L.llama_model_free(self.model)
            self.model = None


SPEC_VOCAB_MAX_DIFFERENCE = 128  # as llama.cpp: padding rows a draft and target may differ by


def check_draft_vocab(L, target: Path, draft: Path) -> None:
    """Refuse a draft model whose vocabulary is not the target's, before either model's weights
    load (both vocabularies are read alone): naming both files and the first difference."""

    def load(path: Path):
        params = L.llama_model_default_params()
        params.vocab_only = True
        params.n_gpu_layers = 0
        model = L.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            raise InvalidModelError(f"llama.cpp could not read the vocabulary of {path}")
        return model

    m_t = load(target)
    try:
        m_d = load(draft)
    except BaseException:
        L.llama_model_free(m_t)
        raise
    try:
        problem = vocab_difference(L, L.llama_model_get_vocab(m_d), L.llama_model_get_vocab(m_t),
                                   draft.name, target.name)  # fmt: skip
    finally:
        L.llama_model_free(m_d)
        L.llama_model_free(m_t)
    if problem:
        raise UsageError(
            f"the draft model {draft.name} does not share the vocabulary of {target.name}: {problem}",
            hint="-md/--model-draft needs a model with the same tokenizer (usually the same family)",
        )


def vocab_difference(L, vd, vt, d: str = "the draft", t: str = "the target") -> str | None:
    """Where the draft vocabulary `vd` differs from the target's `vt` (named `d` and `t`); None
    when a draft from one may be verified by the other."""
    names = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo-2"}
    td, tt = L.llama_vocab_type(vd), L.llama_vocab_type(vt)
    if tt != td:
        return f"its tokenizer is {names.get(td, td)}, {t}'s is {names.get(tt, tt)}"
    nd, nt = L.llama_vocab_n_tokens(vd), L.llama_vocab_n_tokens(vt)
    if abs(nt - nd) > SPEC_VOCAB_MAX_DIFFERENCE:
        return f"{d} has {nd} tokens, {t} {nt}"
    for what, fn in (("BOS", L.llama_vocab_bos), ("EOS", L.llama_vocab_eos), ("EOT", L.llama_vocab_eot)):
        if fn(vt) != fn(vd):
            return f"the {what} token is {fn(vd)} in {d}, {fn(vt)} in {t}"
    if bool(L.llama_vocab_get_add_bos(vt)) != bool(L.llama_vocab_get_add_bos(vd)):
        return f"{d} and {t} disagree on adding a BOS token"
    for i in range(min(nt, nd)):
        a, b = L.llama_vocab_get_text(vd, i), L.llama_vocab_get_text(vt, i)
        if a != b:
            show = lambda raw: (raw or b"").decode("utf-8", "replace")  # noqa: E731
            return f"token {i} is {show(a)!r} in {d}, {show(b)!r} in {t}"
    return None
