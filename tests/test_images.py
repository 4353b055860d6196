"""Images in generate (issue 57): the checks media/ makes before anything decodes, and, with the
tiny random projector of tests/projector.py, the image through llama.cpp's mtmd in llmcli's own
decode loop: different images give different answers, --json records them, and the greedy answer
equals llama-mtmd-cli's on the same model, projector and images."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from llmcli.errors import UsageError
from llmcli.media import image as media

SYSTEM = "You are a helpful assistant."
QUESTION = "Describe the image in one word."


def png(width: int, height: int, rgb: tuple[int, int, int] | None = None, noise: int | None = None) -> bytes:
    """A PNG written by hand (no imaging library in the test extra): a flat colour or seeded noise."""
    import random

    rng = random.Random(noise)
    rows = b"".join(
        b"\x00" + bytes(rgb * width if rgb else (rng.randrange(256) for _ in range(3 * width)))
        for _ in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


# -- media/: what an image is, refused before decoding -------------------------------------------


def test_magic_bytes_and_header_sizes():
    assert media.from_bytes("a", png(3, 2, (1, 2, 3))).media_type == "image/png"
    assert (
        media.from_bytes("a", png(3, 2, (1, 2, 3))).width,
        media.from_bytes("a", png(3, 2, (1, 2, 3))).height,
    ) == (3, 2)
    gif = b"GIF89a" + struct.pack("<HH", 40, 30) + b"\x00\x00\x00" + b";"
    assert media.dimensions("image/gif", gif) == (40, 30)
    jpeg = (
        b"\xff\xd8\xff\xe0" + struct.pack(">H", 4) + b"JF" + b"\xff\xc0" + struct.pack(">HBHH", 11, 8, 48, 64)
    )
    assert media.sniff(jpeg) == "image/jpeg" and media.dimensions("image/jpeg", jpeg) == (64, 48)
    webp = (
        b"RIFF"
        + b"\x00" * 4
        + b"WEBPVP8X"
        + b"\x00" * 8
        + (99).to_bytes(3, "little")
        + (49).to_bytes(3, "little")
    )
    assert media.dimensions("image/webp", webp) == (100, 50)


@pytest.mark.parametrize(
    "data, words",
    [
        (b"hello, not a picture", "not an image"),
        (png(4, 4, (0, 0, 0))[:20], "truncated"),
        (
            b"\x89PNG\r\n\x1a\n"
            + struct.pack(">I", 13)
            + b"IHDR"
            + struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
            + b"\x00" * 4,
            "20000 x 20000",
        ),  # fmt: skip
    ],
)
def test_bad_images_refused_in_one_line(data, words):
    with pytest.raises(UsageError) as e:
        media.from_bytes("x", data)
    assert words in e.value.message and "\n" not in e.value.message


def test_cli_refuses_bad_input_before_loading_anything(tmp_path):
    from helpers import run

    bad = tmp_path / "notes.bin"
    bad.write_bytes(b"\x00\x01 binary")  # neither an image nor text (issue 65: a text file is taken now)
    for args, words in [
        (["-a", str(bad)], "not an image"),
        (["-a", str(tmp_path / "absent.png")], "cannot read image"),
        (["-a", "-", "-a", "-"], "once"),
    ]:
        result = run("generate", "-m", "no-such-model", *args, "what is this?")
        assert result.exit_code == 2, result.output
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- the real path: SmolLM2-135M with the tiny projector ------------------------------------------


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    import projector

    try:
        mmproj = projector.path()
    except projector.Unavailable as e:
        pytest.skip(f"the test projector cannot be built here: {e}")
    from llmcli.hub.default_model import model_path

    try:
        model = model_path("smollm2-135m")
    except Exception as e:  # the bundled model is missing
        pytest.skip(f"SmolLM2-135M is not installed: {e}")
    folder = tmp_path_factory.mktemp("images")
    images = {
        "red": png(64, 64, (255, 0, 0)),
        "noise": png(200, 150, noise=1),
        "blue": png(64, 64, (0, 0, 255)),
    }
    paths = {}
    for name, data in images.items():
        paths[name] = folder / f"{name}.png"
        paths[name].write_bytes(data)
    return model, mmproj, paths


def llmcli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    src = Path(__file__).parent.parent / "src"
    return subprocess.run(
        [sys.executable, "-m", "llmcli", "generate", *args], input=stdin, capture_output=True, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(src)},
    )  # fmt: skip


def answer(model, mmproj, image, *more: str) -> subprocess.CompletedProcess:
    return llmcli("-m", str(model), "--mmproj", str(mmproj), "-a", str(image), "--system", SYSTEM, QUESTION,
                  "--temp", "0", "-n", "16", "-t", "1", "-nfa", "-c", "8192", *more)  # fmt: skip


@pytest.mark.model
def test_different_images_different_answers_and_the_record(fixture):
    model, mmproj, paths = fixture
    red = answer(model, mmproj, paths["red"], "--json")
    assert red.returncode == 0, red.stderr.decode()
    doc = json.loads(red.stdout)
    (att,) = doc["attachments"]
    assert att["media_type"] == "image/png" and att["tokens"] == 16 and att["encode_ms"] > 0
    assert att["sha256"] == media.load(str(paths["red"])).sha256
    assert doc["usage"]["image_tokens"] == 16 and doc["timings"]["image_ms"] > 0
    assert doc["usage"]["prompt_tokens"] > 16
    blue = answer(model, mmproj, paths["blue"], "--json")
    noise = answer(model, mmproj, paths["noise"], "--json")
    texts = {json.loads(r.stdout)["text"] for r in (red, blue, noise)}
    assert len(texts) >= 2, texts  # the image reaches the model: not all answers are the same


@pytest.mark.model
def test_stdin_image_and_the_projector_beside_the_model(fixture, tmp_path):
    model, mmproj, paths = fixture
    by_file = answer(model, mmproj, paths["noise"])
    piped = llmcli("-m", str(model), "--mmproj", str(mmproj), "-a", "-", "--system", SYSTEM, QUESTION,
                   "--temp", "0", "-n", "16", "-t", "1", "-nfa", "-c", "8192",
                   stdin=paths["noise"].read_bytes())  # fmt: skip
    assert piped.returncode == 0 and piped.stdout == by_file.stdout
    (tmp_path / "model.gguf").symlink_to(model)
    (tmp_path / "mmproj-model-f16.gguf").symlink_to(mmproj)
    beside = llmcli("-m", str(tmp_path / "model.gguf"), "-a", str(paths["noise"]),
                    "--system", SYSTEM, QUESTION,
                    "--temp", "0", "-n", "16", "-t", "1", "-nfa", "-c", "8192")  # fmt: skip
    assert beside.returncode == 0 and beside.stdout == by_file.stdout


@pytest.mark.model
def test_no_projector_is_one_line_naming_mmproj(fixture, tmp_path):
    model, _, paths = fixture
    (tmp_path / "model.gguf").symlink_to(model)
    result = llmcli("-m", str(tmp_path / "model.gguf"), "-a", str(paths["red"]), "hi", "-n", "4")
    assert result.returncode == 2 and result.stdout == b""
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "--mmproj" in lines[0]


@pytest.mark.model
@pytest.mark.model
def test_parity_with_llama_mtmd_cli(fixture):
    """llmcli's greedy answer equals llama-mtmd-cli's, same model, projector and settings (flash
    attention off on both, one thread), on two different images.

    Both render the model's own chat template (`--jinja`) with no system message: llama-mtmd-cli
    evaluates a `-sys` message apart from the first user turn, a prompt one token longer than
    the conversation rendered whole, so with `-sys` the two prompts differ (docs/IMAGES.md)."""
    import llamacpp_tools

    model, mmproj, paths = fixture
    try:
        tool = llamacpp_tools.ensure("llama-mtmd-cli")["llama-mtmd-cli"]
    except llamacpp_tools.ToolsUnavailable as e:
        pytest.skip(str(e))
    answers = []
    for name in ("red", "noise"):
        ours = llmcli("-m", str(model), "--mmproj", str(mmproj), "-a", str(paths[name]), QUESTION,
                      "--temp", "0", "-n", "16", "-t", "1", "-nfa", "-c", "8192", "--json")  # fmt: skip
        assert ours.returncode == 0, ours.stderr.decode()
        doc = json.loads(ours.stdout)
        theirs = subprocess.run(
            [str(tool), "-m", str(model), "--mmproj", str(mmproj), "--image", str(paths[name]),
             "-p", QUESTION, "--jinja", "-v",  # -v: it logs the prompt tokens it evaluated
             "--temp", "0", "-n", "16", "-t", "1", "-fa", "off", "-c", "8192",
             *llamacpp_tools.weights_args("llama-mtmd-cli")],
            capture_output=True, timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert theirs.returncode == 0, theirs.stderr.decode()[-800:]
        evaluated = re.search(r"prompt eval time =.*/\s*(\d+) tokens", theirs.stderr.decode())
        assert evaluated and int(evaluated.group(1)) == doc["usage"]["prompt_tokens"]  # the same prompt
        assert doc["text"].strip() and doc["text"].strip() == theirs.stdout.decode().strip()
        answers.append(doc["text"])
    assert answers[0] != answers[1]


@pytest.mark.model
def test_webp_and_gif_answer_as_the_png_of_their_pixels(fixture, tmp_path):
    """WebP goes to llama.cpp's decoder as PNG (mtmd reads WebP only through an ffmpeg on PATH), a
    GIF by its first frame: each answers exactly as the PNG of the same pixels."""
    from PIL import Image as Picture

    model, mmproj, paths = fixture
    frames = [Picture.open(paths[name]).convert("RGB").resize((64, 64)) for name in ("noise", "red")]
    frames[0].save(tmp_path / "a.webp", lossless=True)
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    Picture.open(tmp_path / "a.gif").convert("RGB").save(tmp_path / "gif-frame.png")
    frames[0].save(tmp_path / "a.png")
    answers = {}
    for name in ("a.webp", "a.png", "a.gif", "gif-frame.png"):
        result = answer(model, mmproj, tmp_path / name)
        assert result.returncode == 0, (name, result.stderr.decode())
        answers[name] = result.stdout
    assert answers["a.webp"] == answers["a.png"] and answers["a.webp"].strip()
    assert answers["a.gif"] == answers["gif-frame.png"]


@pytest.mark.model
def test_truncated_webp_body_is_one_line(fixture, tmp_path):
    model, mmproj, paths = fixture
    from PIL import Image as Picture

    Picture.open(paths["noise"]).save(tmp_path / "good.webp")
    data = (tmp_path / "good.webp").read_bytes()
    (tmp_path / "bad.webp").write_bytes(data[: len(data) // 2])  # its header intact, the rest cut off
    result = answer(model, mmproj, tmp_path / "bad.webp")
    assert result.returncode == 2 and result.stdout == b""
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "webp" in lines[0], lines
