"""`llmcli models ...`: list, show, remove, name, locate and verify the models on this machine.

Thin: each command parses its flags, calls `llmcli.hub`, and prints. Tables and JSON go to
stdout; progress and confirmations to stderr. huggingface_hub is only imported by the hub
modules, inside the functions that talk to the network.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from llmcli import render
from llmcli.cli import options as o
from llmcli.errors import InvalidModelError, ModelNotFoundError, UsageError
from llmcli.render.tables import printable

Ref = Annotated[
    str,
    typer.Argument(
        metavar="REF",
        help="org/repo[:QUANT][@REV], org/repo/file.gguf, an alias, or a .gguf path.",
        show_default=False,
        autocompletion=o._complete_models,
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")]

models_app = typer.Typer(
    name="models",
    help="Manage downloaded models: list, show, rm, alias, path, verify.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")


# -- models ----------------------------------------------------------------------------------


@models_app.command("list")
def list_models(
    as_json: Json = False,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            metavar="URL|NAME",
            show_default=False,
            help="List what an OpenAI-compatible server serves (/v1/models): its URL, or the name of "
            "an [endpoints.NAME] table in the config file.",
        ),
    ] = None,  # fmt: skip
) -> None:
    """List downloaded models: name, quantization, size, architecture, parameters, context, source.

    Example: llmcli models list --json
    """
    if endpoint is not None:
        return _list_served(endpoint, as_json)
    from llmcli.hub import store

    infos = [store.describe(m) for m in store.all_models()]
    if as_json:
        return render.out_json(infos, schema="models/list")
    if not infos:
        render.info("no models downloaded yet; try `llmcli pull org/repo`")
        return
    rows = [_model_row(i) for i in infos]
    _table(["NAME", "QUANT", "SIZE", "ARCH", "PARAMS", "CTX", "SOURCE"], rows)


def _list_served(text: str, as_json: bool) -> None:
    from llmcli.served import config, endpoints
    from llmcli.served.client import Client

    if "/" in text and not endpoints.is_url(text):
        raise UsageError(f"--endpoint takes a URL or an endpoint name, got {text!r}")
    endpoint = config.lookup(text)
    if endpoint is None:
        raise UsageError(
            f"no endpoint named {text!r} in the config file",
            hint="give a URL (http://HOST:PORT/v1) or add an [endpoints.NAME] table",
        )
    client = Client(endpoint)
    try:
        data = client.get_json("/models")
        listed = data.get("data") if isinstance(data, dict) else None
        if not isinstance(listed, list):
            raise UsageError(f"{endpoint.url}/models is not an OpenAI-compatible model list")
        models = [m for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]
        # llama-server says its served context in /props; vLLM in the listing (max_model_len)
        props = client.get_json("/props", root=True, quiet=True) if models else None
    finally:
        client.close()
    from llmcli.served.engine import takes_images

    contexts = [_served_ctx(m, props if len(models) == 1 else None) for m in models]
    vision = takes_images(props) if len(models) == 1 else None  # llama-server's one model
    if as_json:
        listing = [{"id": m["id"], "owned_by": m.get("owned_by"), "ref": endpoint.with_model(m["id"]).ref,
                    "context": ctx, "n_ctx_train": (m.get("meta") or {}).get("n_ctx_train"), "vision": vision}
                   for m, ctx in zip(models, contexts, strict=True)]  # fmt: skip
        return render.out_json(listing, schema="models/served_list")
    if not models:
        render.info(f"{endpoint.url} serves no models")
        return
    shown = {True: "yes", False: "no", None: "-"}[vision]
    rows = [[endpoint.with_model(m["id"]).ref, str(m.get("owned_by") or ""), shown, _count(ctx, plain=True)]
            for m, ctx in zip(models, contexts, strict=True)]  # fmt: skip
    _table(["MODEL", "OWNED BY", "VISION", "CTX"], rows)


def _served_ctx(model: dict[str, Any], props: Any) -> int | None:
    """The context the server serves the model with; where it does not say, the model's trained
    context (its GGUF metadata, in llama-server's listing)."""
    from llmcli.served.engine import served_context

    served = served_context(model, props if isinstance(props, dict) else None)
    trained = (model.get("meta") or {}).get("n_ctx_train")
    return served or (trained if isinstance(trained, int) else None)


def _model_row(info: dict[str, Any]) -> list[str]:
    params, ctx = _count(info.get("n_params")), _count(info.get("n_ctx_train"), plain=True)
    quant, arch = info.get("quantization") or "?", info.get("architecture") or "?"
    return [info["name"], quant, _size(info["size"]), arch, params, ctx, info["source"]]


@models_app.command("show")
def show(
    ref: Ref,
    all_keys: Annotated[bool, typer.Option("--all", help="Also list every metadata key.")] = False,
    as_json: Json = False,
) -> None:
    """Show a downloaded model's metadata, read from its GGUF header (weights are not loaded).

    Example: llmcli models show bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M --all
    """
    from llmcli.hub import store

    info = store.describe(store.lookup(ref), keys=all_keys)
    if "error" in info:
        raise InvalidModelError(f"{info['name']}: {info['error']}")
    if as_json:
        return render.out_json(info, schema="models/show")
    for key, value in _show_rows(info):
        sys.stdout.write(f"{key:<14} {'-' if value in (None, '') else printable(value)}\n")
    for key, value in info.get("metadata", {}).items():
        sys.stdout.write(f"  {printable(key)} = {printable(value)}\n")


def _show_rows(info: dict[str, Any]) -> list[tuple[str, Any]]:
    sha256 = ", ".join(s or "not recorded" for s in info["sha256"])
    return [
        ("name", info["name"]),
        ("path", info["path"]),
        ("architecture", info["architecture"]),
        ("model name", info["model_name"]),
        ("size label", info["size_label"]),
        ("quantization", info["quantization"]),
        ("parameters", _count(info["n_params"])),
        ("layers", info["n_layers"]),
        ("context", info["n_ctx_train"]),
        ("vocabulary", info["n_vocab"]),
        ("type", _type_row(info)),
        ("chat template", _template_row(info)),
        ("reasoning", _reasoning_row(info)),
        ("vision", f"yes (projector {Path(info['projector']).name})" if info.get("projector") else "no"),
        ("license", info["license"]),
        ("size on disk", _size(info["size"])),
        ("files", len(info["files"])),
        ("source", info["source"]),
        ("aliases", ", ".join(info["aliases"])),
        ("sha256", sha256),
    ]


def _type_row(info: dict[str, Any]) -> str:
    if info.get("model_type") == "base":
        return "base (no chat template, no chat or instruct fine-tune in its metadata)"
    how = "chat template" if info["chat_template"] else "named in its metadata"
    return f"instruct ({how})"


def _template_row(info: dict[str, Any]) -> str:
    if not info["chat_template"]:
        return "no"
    problem = info.get("chat_template_problem")
    return f"yes, refused: {problem}" if problem else "yes"


def _reasoning_row(info: dict[str, Any]) -> str:
    from llmcli import reasoning

    found = info.get("reasoning")  # describe's JSON form, or None
    return reasoning.describe(reasoning.ReasoningFormat.from_dict(found) if found else None)


@models_app.command("rm")
def rm(
    refs_: Annotated[
        list[str],
        typer.Argument(
            metavar="REF...", help="Models to remove.", show_default=False, autocompletion=o._complete_models
        ),
    ],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Remove downloaded models: their files, except those another model still uses.

    Example: llmcli models rm bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0 --yes
    """
    from llmcli.hub import store

    models = [_removable(text) for text in refs_]
    total = sum(m.size for m in models)
    names = ", ".join(m.name for m in models)
    if not yes and not _confirm(f"remove {names} ({_size(total)} on disk)?"):
        render.info("nothing removed")
        raise typer.Exit(1)
    for model in models:
        kept = store.aliases_of(model)  # before the files go: hub aliases match what is local
        freed = store.remove(model)
        shared = "" if freed else "; its data is still used by another model"
        render.info(f"removed {model.name}, freed {_size(freed)}{shared}")
        if kept:
            render.info(
                f"  kept alias {', '.join(kept)}: it downloads the model again when used"
                f" (`llmcli models alias --delete NAME` removes an alias)"
            )


def _removable(text: str):
    from llmcli.hub import refs, store

    model = store.lookup(text)
    parsed = refs.parse(text)
    if isinstance(parsed, refs.HubRef) and not parsed.quant and not parsed.filename:
        siblings = [
            m.name for m in store.hub_models() if m.repo_id == model.repo_id and m.commit == model.commit
        ]
        if len(siblings) > 1:
            raise UsageError(
                f"{text} names {len(siblings)} downloaded models", hint=f"name one: {', '.join(siblings)}"
            )
    if model.kind != "hub":
        raise UsageError(
            f"{model.name} is not in the Hugging Face cache", hint="llmcli removes only what it downloads"
        )
    return model


def _confirm(question: str) -> bool:
    try:
        return typer.confirm(question, default=False, err=True)
    except typer.Abort:  # end of input
        sys.stderr.write("\n")
        return False


@models_app.command("alias")
def alias(
    name: Annotated[str | None, typer.Argument(metavar="NAME", help="The alias.", show_default=False)] = None,
    ref: Annotated[
        str | None,
        typer.Argument(metavar="REF", help="What it names (any model reference).", show_default=False),
    ] = None,
    delete: Annotated[bool, typer.Option("--delete", help="Remove the alias.")] = False,
    as_json: Json = False,
) -> None:
    """Name a model: `alias NAME REF` sets, `alias NAME` shows, `alias` lists, `--delete` removes.

    Example: llmcli models alias llama1b bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M
    """
    from llmcli.hub import aliases

    if delete:
        if name is None or ref is not None:
            raise UsageError("--delete takes exactly one alias name")
        render.info(f"alias {name} removed (it pointed to {aliases.delete(name)})")
    elif name is not None and ref is not None:
        before = aliases.get(name)
        after = aliases.set_alias(name, ref)
        replaced = f" (it pointed to {before})" if before is not None and before != after else ""
        render.info(f"{name} -> {after}{replaced}")
    elif name is not None:
        target = aliases.get(name)
        if target is None:
            raise ModelNotFoundError(f"no alias named {name!r}", hint="see `llmcli models alias`")
        sys.stdout.write(target + "\n")
    elif as_json:
        render.out_json(aliases.load(), schema="aliases")
    else:
        _table(["ALIAS", "REFERENCE"], [[k, v] for k, v in sorted(aliases.load().items())])


@models_app.command("path")
def path(ref: Ref) -> None:
    """Print the file to load for a downloaded model (the first shard of a split model).

    Example: llama-cli -m "$(llmcli models path llama1b)"
    """
    from llmcli.hub import store

    sys.stdout.write(f"{store.lookup(ref).path}\n")


@models_app.command("verify")
def verify(
    ref: Annotated[
        str | None,
        typer.Argument(
            metavar="REF",
            help="A downloaded model (default: all).",
            show_default=False,
            autocompletion=o._complete_models,
        ),
    ] = None,
) -> None:
    """Re-hash a model's files against the hub's hash and the SHA-256 recorded at download.

    Example: llmcli models verify llama1b
    """
    from llmcli import reporting
    from llmcli.hub import store

    models = [store.lookup(ref)] if ref else store.hub_models()
    failed = []
    with reporting.progress() as prog:
        for model in models:
            for result in store.verify(model, prog):
                status = "ok" if result.ok else "FAILED"
                sys.stdout.write(f"{result.sha256}  {model.name}  {result.file}  {status}\n")
                if not result.ok:
                    failed.append(f"{model.name} ({result.file}: {result.why})")
    if failed:
        raise InvalidModelError(
            f"{len(failed)} file(s) do not match: {'; '.join(failed)}",
            hint="download again with `llmcli pull --force REF`",
        )


# -- formatting ------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[Any]]) -> None:
    from llmcli.render import tables

    sys.stdout.write(tables.plain(headers, rows))


def _size(n: int | None) -> str:
    from llmcli.units import human_size

    return human_size(n)


def _count(n: int | None, *, plain: bool = False) -> str:
    if n is None:
        return "?"
    if plain or n < 1000:
        return str(n)
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}" if n / scale < 100 else f"{n / scale:.0f}{unit}"
    return str(n)  # pragma: no cover


def _files(files: tuple[str, ...]) -> str:
    return files[0] + (f" (+{len(files) - 1} shards)" if len(files) > 1 else "")
