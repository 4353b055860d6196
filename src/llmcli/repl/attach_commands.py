"""Images in chat: `/attach PATH` joins an image to the next message, `/attach` lists what is
attached, `/detach` takes it all back. The image is checked (media.image) and the model's
projector loaded when it is attached, so a bad file or a model without a projector is said then,
in one line, not after the message is typed."""

from __future__ import annotations

from llmcli.errors import UsageError
from llmcli.loader import ready_for_images
from llmcli.repl.commands import Repl, command


def describe(image) -> str:
    from llmcli.units import human_size

    kind = image.media_type.removeprefix("image/").upper()
    return f"{image.name} ({kind} {image.width} x {image.height}, {human_size(image.size)})"


def attach(repl: Repl, path: str) -> None:
    """Check the image at `path` and the model's projector; the image joins the next message."""
    from llmcli.media.image import load

    s = repl.session
    image = load(path)
    if any(p.sha256 == image.sha256 for p in s.pending):
        repl.info(f"{image.name} is already attached to the next message")
        return
    ready_for_images(s.engine)  # no projector: refused now, in one line naming --mmproj
    s.pending.append(image)
    repl.info(f"attached {describe(image)}: it goes with your next message")


@command("/attach", "/attach [PATH]", "Attach an image to the next message; alone, list what is attached.")
def _attach(repl: Repl, arg: str) -> None:
    path = arg.strip()
    if len(path) > 1 and path[0] == path[-1] and path[0] in "'\"":  # a quoted path with spaces
        path = path[1:-1]
    if path:
        attach(repl, path)
        return
    pending = repl.session.pending
    if not pending:
        repl.info("nothing attached (/attach PATH attaches an image to the next message)")
        return
    repl.info(f"attached to the next message: {', '.join(describe(image) for image in pending)}")


@command("/detach", "/detach", "Take back the images attached to the next message.")
def _detach(repl: Repl, arg: str) -> None:
    if arg.strip():
        raise UsageError("usage: /detach (it takes back every attached image)")
    n = len(repl.session.pending)
    repl.session.pending.clear()
    repl.info(f"detached {n} image(s)" if n else "nothing attached")
