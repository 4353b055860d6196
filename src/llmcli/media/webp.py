"""WebP for llama.cpp's image decoder. mtmd decodes PNG, JPEG and GIF itself (stb_image) and hands
WebP to an `ffmpeg` found on PATH; so that a WebP gives the same answer on every machine, with or
without ffmpeg, llmcli converts it to PNG with Pillow first (the first frame of an animation),
losslessly, and mtmd decodes that. The image's SHA-256, size and name stay the original file's."""

from __future__ import annotations

import io

from llmcli.errors import UsageError


def as_png(name: str, data: bytes) -> bytes:
    """The first frame of WebP `data` as PNG bytes; one line if Pillow cannot read it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as picture:
            picture.seek(0)
            frame = picture.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise UsageError(f"{name}: the image/webp could not be decoded ({e})") from None
    out = io.BytesIO()
    frame.save(out, format="PNG", compress_level=1)
    return out.getvalue()
