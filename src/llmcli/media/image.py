"""One attached image: its bytes, its media type by magic bytes, its pixel size read from the
header (refused above `MAX_PIXELS` before any decoder sees it), and its SHA-256.

PNG, JPEG, WebP and GIF (whose first frame llama.cpp's decoder reads) are taken; anything else is
refused in one line, as is a file whose header is cut short."""

from __future__ import annotations

import hashlib
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from llmcli.errors import UsageError

MAX_SIDE = 8192
MAX_PIXELS = MAX_SIDE * MAX_SIDE  # a header claiming more is refused before decoding
MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Image:
    name: str  # the path or URL as given, or "-" (stdin)
    media_type: str  # image/png, image/jpeg, image/webp, image/gif
    data: bytes
    sha256: str
    width: int
    height: int

    @property
    def size(self) -> int:
        return len(self.data)

    def data_uri(self) -> str:
        import base64

        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"


def load(name: str, *, offline: bool = False) -> Image:
    """The image at path `name` ("-": stdin; an http(s) URL: fetched into memory, `media/fetch.py`),
    checked; a bad one raises UsageError (a URL that cannot be fetched NetworkError) in one line."""
    from llmcli.media import fetch

    if fetch.is_url(name):
        data = fetch.fetch(name, MAX_BYTES, offline=offline)
        if not data:
            raise UsageError(f"{name}: empty, not an image")
    else:
        data = _read(name)
    return from_bytes(name, data)


def from_bytes(name: str, data: bytes) -> Image:
    media_type = sniff(data)
    if media_type is None:
        raise UsageError(f"{name}: not an image (PNG, JPEG, WebP or GIF)")
    dims = dimensions(media_type, data)
    if dims is None:
        raise UsageError(f"{name}: truncated or damaged {media_type} header")
    width, height = dims
    if width <= 0 or height <= 0:
        raise UsageError(f"{name}: the {media_type} header gives an empty image ({width} x {height})")
    if width * height > MAX_PIXELS:
        raise UsageError(
            f"{name}: {width} x {height} pixels is more than llmcli decodes ({MAX_SIDE} x {MAX_SIDE} at most)"
        )
    return Image(name, media_type, data, hashlib.sha256(data).hexdigest(), width, height)


def _read(name: str) -> bytes:
    try:
        if name == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with Path(name).expanduser().open("rb") as f:
                data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise UsageError(f"cannot read image {name}: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"{name}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
    if not data:
        raise UsageError(f"{name}: empty, not an image")
    return data


def sniff(data: bytes) -> str | None:
    """The media type by magic bytes, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return None


def dimensions(media_type: str, data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header, or None where the header is cut short or unreadable."""
    try:
        if media_type == "image/png":
            if data[12:16] != b"IHDR" or len(data) < 33:
                return None
            return struct.unpack(">II", data[16:24])
        if media_type == "image/gif":
            return struct.unpack("<HH", data[6:10]) if len(data) >= 13 else None
        if media_type == "image/webp":
            return _webp(data)
        return _jpeg(data)
    except struct.error:
        return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None


_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg(data: bytes) -> tuple[int, int] | None:
    """The frame size from the first start-of-frame marker."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers with no length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if marker in _SOF:
            if i + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None
