"""Where a request's images go: every image of its conversation by the index of its user message
in the request's messages (`Request.images` are the last user message's, `history_images` the
earlier ones'), as the local prompt renders them and the log records them."""

from __future__ import annotations

from typing import Any

from llmcli.media.image import Image


def placed_images(request: Any) -> dict[int, tuple[Image, ...]]:
    """`request`: a contract.Request (not imported: the contract imports media)."""
    placed = {i: tuple(imgs) for i, imgs in request.history_images.items() if imgs}
    users = [i for i, m in enumerate(request.messages or []) if m.get("role") == "user"]
    if request.images and users:
        placed[users[-1]] = tuple(request.images)
    return placed
