"""Attachments in chat: `/attach PATH|URL` joins an image or a text file to the next message,
`/attach` lists what is attached, `/detach` takes it all back. The attachment is checked when it is
attached (media.attach: an image by media.image, with the model's projector loaded; a text as UTF-8),
so a bad file or a model without a projector is said then, in one line, not after the message is
typed. A text goes into the message as a named fenced block before what you type (media.fragment)."""

from __future__ import annotations

from llmcli.errors import UsageError
from llmcli.loader import ready_for_images
from llmcli.repl.commands import Repl, command


def describe(image) -> str:
    from llmcli.media.image import Image
    from llmcli.units import human_size

    if not isinstance(image, Image):  # a text attachment
        return f"{image.name} ({image.media_type}, {human_size(image.size)})"
    kind = image.media_type.removeprefix("image/").upper()
    return f"{image.name} ({kind} {image.width} x {image.height}, {human_size(image.size)})"


def attach(repl: Repl, path: str) -> None:
    """Check the attachment at `path` (an image: and the model's projector); it joins the next message."""
    from llmcli.media.attach import load
    from llmcli.media.image import Image

    s = repl.session
    image = load(path)
    if any(p.sha256 == image.sha256 for p in s.pending):
        repl.info(f"{image.name} is already attached to the next message")
        return
    if isinstance(image, Image):
        ready_for_images(s.engine)  # no projector: refused now, in one line naming --mmproj
    s.pending.append(image)
    repl.info(f"attached {describe(image)}: it goes with your next message")


@command("/attach", "/attach [PATH]",
         "Attach an image or a text file to the next message; alone, list what is attached.")  # fmt: skip
def _attach(repl: Repl, arg: str) -> None:
    path = arg.strip()
    if len(path) > 1 and path[0] == path[-1] and path[0] in "'\"":  # a quoted path with spaces
        path = path[1:-1]
    if path:
        attach(repl, path)
        return
    pending = repl.session.pending
    if not pending:
        repl.info("nothing attached (/attach PATH attaches an image or a text file to the next message)")
        return
    repl.info(f"attached to the next message: {', '.join(describe(image) for image in pending)}")


@command("/detach", "/detach", "Take back what is attached to the next message.")
def _detach(repl: Repl, arg: str) -> None:
    if arg.strip():
        raise UsageError("usage: /detach (it takes back everything attached)")
    n = len(repl.session.pending)
    said = counted(repl.session.pending)
    repl.session.pending.clear()
    repl.info(f"detached {said}" if n else "nothing attached")


def counted(attached: list) -> str:
    """`1 image(s)`, `2 text(s)`, or both: what is attached, in words."""
    from llmcli.media.image import Image

    images = sum(isinstance(a, Image) for a in attached)
    texts = len(attached) - images
    parts = [f"{images} image(s)" if images else "", f"{texts} text(s)" if texts else ""]
    return " and ".join(p for p in parts if p)
