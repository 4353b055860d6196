"""OpenAI content parts into a Request's text and images (media/parts.py): the text parts joined,
every image read by its hash, the last user message's apart from the history's, bad parts refused."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image as PILImage

from llmcli.errors import UsageError
from llmcli.media.parts import split_parts


def _png(color: str) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (4, 4), color).save(out, format="PNG")
    return out.getvalue()


def _part(data: bytes) -> dict:
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    return {"type": "image_url", "image_url": {"url": uri}}


def test_parts_become_text_and_images_by_message(tmp_path):
    red, blue = _png("red"), _png("blue")
    (tmp_path / "blue.png").write_bytes(blue)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What colour?"}, _part(red)]},
        {"role": "assistant", "content": "Red."},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(tmp_path / "blue.png")}},
                                     {"type": "text", "text": "And this?"}]},
    ]  # fmt: skip
    flat, images = split_parts(messages)
    assert [m["content"] for m in flat] == ["Be brief.", "What colour?", "Red.", "And this?"]
    assert sorted(images) == [1, 3]
    assert images[1][0].data == red and images[3][0].data == blue
    assert images[1][0].sha256 != images[3][0].sha256
    assert messages[1]["content"][0]["type"] == "text"  # the input is left as it was


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("data:image/png,abc", "must be base64"),
        ("data:image/png;base64,@@@", "not valid base64"),
        ("data:image/png;base64," + base64.b64encode(b"not an image").decode(), "not an image"),
        ("-", "needs its image_url.url"),
        ("/no/such/image.png", "/no/such/image.png"),
    ],
)
def test_a_bad_image_part_is_one_line(url, says):
    with pytest.raises(UsageError) as caught:
        split_parts([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}])
    assert says in caught.value.message and "\n" not in caught.value.message
