"""Bad image input (issue 57, point 6), each one line on stderr, a non-zero exit and nothing on
stdout: not an image, a header cut short, a body cut short (the decoder's refusal), a header
claiming 20000 x 20000 pixels (refused by count before anything decodes it), an unreadable path, a
directory, and a projector made for another model (its embedding width). The URL and served cases
are in test_images_url.py and test_images_served.py."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from helpers import run
from test_images import llmcli, png

HUGE = (
    b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
    + struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0) + b"\x00" * 4
)  # fmt: skip


def one_line(stderr: str | bytes, *words: str) -> str:
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.write_text("plain text"), ("not an image",)),
        (lambda p: p.write_bytes(png(8, 8, (1, 2, 3))[:20]), ("truncated",)),
        (lambda p: p.write_bytes(HUGE), ("20000 x 20000", "8192 x 8192")),
        (lambda p: p.write_bytes(b""), ("empty",)),
        (lambda p: p.mkdir(), ("cannot read image",)),
        (lambda p: None, ("cannot read image", "No such file")),
    ],
)
def test_refused_before_any_model_loads(tmp_path, make, words):
    """The model named does not exist: an image error here proves nothing was loaded first."""
    bad = tmp_path / "picture.png"
    make(bad)
    result = run("generate", "-m", "no-such-model", "-a", str(bad), "what is this?")
    assert result.exit_code == 2 and result.stdout == ""
    one_line(result.stderr, *words)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    import projector
    import qwen

    try:
        mmproj = projector.path()
        other = qwen.path()
    except Exception as e:  # noqa: BLE001  a fixture that cannot be had here
        pytest.skip(f"the image fixtures are not available: {e}")
    from llmcli.hub.default_model import model_path

    return model_path("smollm2-135m"), mmproj, other, tmp_path_factory.mktemp("bad-images")


@pytest.mark.model
def test_a_body_cut_short_is_the_decoders_one_line(real):
    model, mmproj, _, folder = real
    half = folder / "half.png"
    half.write_bytes(png(200, 150, noise=1)[:40000])  # the header whole, the pixels cut
    result = llmcli(
        "-m", str(model), "--mmproj", str(mmproj), "-a", str(half), "what?", "-n", "2", "-c", "2048"
    )
    assert result.returncode == 2 and result.stdout == b""
    one_line(result.stderr, "half.png", "could not be decoded")


@pytest.mark.model
def test_a_projector_for_another_model_is_one_line(real):
    """The SmolLM2 projector (576 wide) with Qwen2.5 0.5B (896): llama.cpp refuses it at load."""
    _, mmproj, other, folder = real
    image = folder / "red.png"
    image.write_bytes(png(64, 64, (255, 0, 0)))
    given = llmcli(
        "-m", str(other), "--mmproj", str(mmproj), "-a", str(image), "what?", "-n", "2", "-c", "2048"
    )
    assert given.returncode == 2 and given.stdout == b""
    one_line(given.stderr, "--mmproj", "not a projector for this model", "896")
    (folder / "qwen.gguf").symlink_to(other)
    (folder / "mmproj-smollm2.gguf").symlink_to(mmproj)
    beside = llmcli("-m", str(folder / "qwen.gguf"), "-a", str(image), "what?", "-n", "2", "-c", "2048")
    assert beside.returncode == 2 and beside.stdout == b""
    one_line(beside.stderr, "the projector beside the model", "not a projector for this model")


def test_the_projector_beside_a_model_among_several(tmp_path):
    """A snapshot that pulled two quantizations holds two projectors: each model gets its own
    quantization's, else F16; `--mmproj` of a missing file is one line."""
    from llmcli.errors import UsageError
    from llmcli.media import projector

    for name in ("m-Q8_0.gguf", "m-Q4_K_M.gguf", "mmproj-m-F16.gguf", "mmproj-m-Q8_0.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    assert projector.find(str(tmp_path / "m-Q8_0.gguf"), None).name == "mmproj-m-Q8_0.gguf"
    assert projector.find(str(tmp_path / "m-Q4_K_M.gguf"), None).name == "mmproj-m-F16.gguf"
    with pytest.raises(UsageError, match="no such file"):
        projector.find(str(tmp_path / "m-Q8_0.gguf"), str(tmp_path / "absent.gguf"))
