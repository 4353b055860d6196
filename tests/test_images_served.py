"""Images to a served model (issue 57): `generate -a` sends them as OpenAI content parts to a real
llama-server started with SmolLM2-135M and the tiny projector of tests/projector.py (`--mmproj`).
Different images give different answers; the greedy answer equals the local one (same model,
projector, context, one thread, flash attention off on both); a text-only llama-server refuses an
image in its own words, in one line. The request's shape is checked without a server too."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
from helpers import run

from llmcli.media import image as media
from llmcli.served.wire import openai_messages

sys.path.insert(0, str(Path(__file__).parent))

from test_images import QUESTION, SYSTEM, answer, png  # noqa: E402  the local side, as test_images runs it

# -- the request's shape, no server -----------------------------------------------------------------


def test_images_join_the_last_user_message_as_content_parts():
    red = media.from_bytes("red.png", png(8, 8, (255, 0, 0)))
    blue = media.from_bytes("blue.png", png(8, 8, (0, 0, 255)))
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "ok", "reasoning_content": "hidden"},
        {"role": "user", "content": "what is this?"},
    ]
    sent = openai_messages(messages, (red, blue))
    assert sent[:2] == messages[:2] and "reasoning_content" not in sent[2]
    first, second, text = sent[3]["content"]
    assert text == {"type": "text", "text": "what is this?"}
    assert first["type"] == second["type"] == "image_url"
    head, _, payload = first["image_url"]["url"].partition(",")
    assert head == "data:image/png;base64" and base64.b64decode(payload) == red.data
    assert base64.b64decode(second["image_url"]["url"].partition(",")[2]) == blue.data
    assert openai_messages(messages) == [sent[0], sent[1], sent[2], messages[3]]  # no image: as before


def test_an_earlier_messages_images_go_again_with_that_message():
    red = media.from_bytes("red.png", png(8, 8, (255, 0, 0)))
    blue = media.from_bytes("blue.png", png(8, 8, (0, 0, 255)))
    messages = [
        {"role": "user", "content": "what is this?"},
        {"role": "assistant", "content": "red"},
        {"role": "user", "content": "and this?"},
    ]
    sent = openai_messages(messages, (blue,), {0: (red,)})
    assert [part["type"] for part in sent[0]["content"]] == ["image_url", "text"]
    assert base64.b64decode(sent[0]["content"][0]["image_url"]["url"].partition(",")[2]) == red.data
    assert sent[1] == messages[1]
    assert base64.b64decode(sent[2]["content"][0]["image_url"]["url"].partition(",")[2]) == blue.data


def test_debug_log_shows_an_image_by_its_length():
    from llmcli.served.client import _loggable

    red = media.from_bytes("red.png", png(64, 64, (255, 0, 0)))
    body = {"messages": openai_messages([{"role": "user", "content": "hi"}], (red,))}
    shown = json.dumps(_loggable(body))
    assert red.data_uri() not in shown and f"({len(red.data_uri())} chars)" in shown


def test_a_server_that_takes_no_images_is_a_refusal_in_its_words():
    from llmcli.errors import ExitCode
    from llmcli.served.faults import refusal

    said = "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
    error = refusal(500, said, "http://x/v1/chat/completions", "none")
    assert error.exit_code == ExitCode.ERROR and said in error.one_line() and "\n" not in error.one_line()
    # any server error in its own words is a refusal (exit 1) since issue 63; a gateway's is the network's
    assert refusal(500, "something else", "u", "none").exit_code == ExitCode.ERROR
    assert refusal(502, "something else", "u", "none").exit_code == ExitCode.NETWORK


# -- a real llama-server --mmproj -----------------------------------------------------------------


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    """(the llama-server with the projector, the model, the projector, the image paths)."""
    import llamacpp_tools
    import projector
    from servers import smollm2_path, start_llama_server

    try:
        mmproj = projector.path()
    except projector.Unavailable as e:
        pytest.skip(f"the test projector cannot be built here: {e}")
    model = smollm2_path()
    folder = tmp_path_factory.mktemp("served-images")
    paths = {}
    for name, data in {"red": png(64, 64, (255, 0, 0)), "noise": png(200, 150, noise=1),
                       "blue": png(64, 64, (0, 0, 255))}.items():  # fmt: skip
        paths[name] = folder / f"{name}.png"
        paths[name].write_bytes(data)
    try:  # one slot of the whole context, one thread, no flash attention: as the local runs
        server = start_llama_server(folder, slots=1, ctx=8192, threads=1,
                                    extra=["--mmproj", str(mmproj), "-fa", "off"])  # fmt: skip
    except llamacpp_tools.ToolsUnavailable as exc:
        pytest.skip(f"llama-server cannot be built here: {exc}")
    yield server, model, mmproj, paths
    server.stop()


def served_answer(server, image: Path, *more: str):
    return run("generate", "-m", server.ref, "-a", str(image), "--system", SYSTEM, QUESTION,
               "--temp", "0", "--seed", "1", "-n", "16", *more)  # fmt: skip


@pytest.mark.served
@pytest.mark.model
def test_served_images_differ_and_are_recorded(vision):
    server, _, _, paths = vision
    texts = set()
    for name in ("red", "noise", "blue"):
        result = served_answer(server, paths[name], "--json")
        assert result.exit_code == 0, result.stderr
        doc = json.loads(result.stdout)
        (att,) = doc["attachments"]
        assert att["sha256"] == media.load(str(paths[name])).sha256 and att["media_type"] == "image/png"
        assert att["tokens"] is None and att["encode_ms"] is None  # the server's, not reported
        assert doc["usage"]["image_tokens"] is None and doc["timings"]["image_ms"] is None
        assert doc["usage"]["prompt_tokens"] > 16  # the image's 16 positions are in the server's count
        texts.add(doc["text"])
    assert len(texts) >= 2, texts  # the image reaches the model through the server


@pytest.mark.served
@pytest.mark.model
def test_served_greedy_answer_equals_the_local_one(vision):
    """The same model, projector, image and settings: llama-server's greedy answer is llmcli's
    local one, token for token (both: 8192 context, one thread, flash attention off)."""
    server, model, mmproj, paths = vision
    answers = []
    for name in ("red", "noise"):
        local = answer(model, mmproj, paths[name])
        assert local.returncode == 0, local.stderr.decode()
        served = served_answer(server, paths[name])
        assert served.exit_code == 0, served.stderr
        assert served.stdout.strip() == local.stdout.decode().strip()
        answers.append(served.stdout)
    assert answers[0] != answers[1]


@pytest.mark.served
@pytest.mark.model
def test_a_second_turn_sends_the_first_turns_image_again(vision):
    """--continue against a server: the whole conversation goes every turn, the first message's
    image with it (the server has no conversation of its own to keep it in)."""
    server, _, _, paths = vision
    first = served_answer(server, paths["red"], "--json")
    assert first.exit_code == 0, first.stderr
    before = json.loads(first.stdout)["usage"]
    second = run("generate", "-m", server.ref, "--continue", "Why?", "--temp", "0", "-n", "8", "--json")
    assert second.exit_code == 0, second.stderr
    after = json.loads(second.stdout)["usage"]
    # the first prompt (16 of its tokens the image's) and its answer are all in the second prompt;
    # without the image it would be 16 shorter, more than "Why?" and its turn markers add
    assert after["prompt_tokens"] >= before["prompt_tokens"] + before["completion_tokens"]


@pytest.mark.served
def test_an_image_to_a_text_only_server_is_its_own_error_in_one_line(llama_server, tmp_path):
    image = tmp_path / "red.png"
    image.write_bytes(png(16, 16, (255, 0, 0)))
    result = run("generate", "-m", llama_server.ref, "-a", str(image), "What is this?", "-n", "4")
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "image input is not supported" in lines[0], lines


@pytest.mark.served
def test_raw_with_an_image_is_refused_before_sending(llama_server, tmp_path):
    image = tmp_path / "red.png"
    image.write_bytes(png(16, 16, (255, 0, 0)))
    result = run("generate", "-m", llama_server.ref, "--raw", "-a", str(image), "What is", "-n", "4")
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "--raw" in result.stderr


@pytest.mark.served
@pytest.mark.model
def test_an_image_by_url_is_the_same_question(vision):
    """`-a http://...`: fetched here, sent as a data URI; the answer is the file's."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    server, _, _, paths = vision

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(paths["red"].parent))
    site = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{site.server_address[1]}/red.png"
        by_url = served_answer(server, url, "--json")  # type: ignore[arg-type]
        by_file = served_answer(server, paths["red"], "--json")
    finally:
        site.shutdown()
        site.server_close()
    assert by_url.exit_code == 0, by_url.stderr
    got, want = json.loads(by_url.stdout), json.loads(by_file.stdout)
    assert got["text"] == want["text"]
    assert got["attachments"][0]["name"] == url
    assert got["attachments"][0]["sha256"] == want["attachments"][0]["sha256"]


@pytest.mark.served
def test_models_list_says_which_served_model_takes_images(vision, llama_server):
    from documents import check

    for server, takes in ((vision[0], True), (llama_server, False)):
        result = run("models", "list", "--endpoint", server.url, "--json")
        assert result.exit_code == 0, result.stderr
        [listed] = check(json.loads(result.stdout), "models/served_list")
        assert listed["vision"] is takes
        table = run("models", "list", "--endpoint", server.url).stdout.splitlines()
        assert table[0].split() == ["MODEL", "OWNED", "BY", "VISION", "CTX"]
        assert table[1].split()[-2] == ("yes" if takes else "no")


@pytest.mark.vllm
def test_an_image_to_vllms_text_only_model_is_its_own_error_in_one_line(vllm_server, tmp_path):
    """vLLM takes the same content parts; its SmolLM2 (a text-only model) refuses the image in
    its own words, one line, a non-zero exit, nothing on stdout."""
    image = tmp_path / "red.png"
    image.write_bytes(png(16, 16, (255, 0, 0)))
    result = run("generate", "-m", vllm_server.ref, "-a", str(image), "What is this?", "-n", "4")
    assert result.exit_code != 0 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "HTTP 400" in lines[0], lines
