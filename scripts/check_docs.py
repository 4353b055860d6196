"""Check the user docs against the CLI: every option of every llmcli command appears in README.md or
docs/*.md, and every relative link (with its #anchor) between README.md, docs/ and benchmarks/
resolves. Run from the repository root: `PYTHONPATH=src python scripts/check_docs.py`; exits 1
and lists what is wrong."""

import re
import sys
from pathlib import Path

import typer.main

from llmcli.cli.app import app

ROOT = Path(__file__).resolve().parent.parent


def undocumented_options() -> list[str]:
    text = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    missing: list[str] = []

    def walk(command, path: list[str]) -> None:
        for param in command.params:
            for opt in [*param.opts, *getattr(param, "secondary_opts", [])]:
                if opt.startswith("-") and opt not in ("--help", "-h"):
                    if not re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", text):
                        missing.append(f"{' '.join(path)} {opt}")
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), ["llmcli"])
    return missing


def anchors(path: Path) -> set[str]:
    found = set()
    for line in path.read_text().split("\n"):
        heading = re.match(r"^#+ (.*)", line)
        if heading:
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return found


def broken_links() -> list[str]:
    docs, benchmarks = sorted((ROOT / "docs").glob("*.md")), sorted((ROOT / "benchmarks").rglob("*.md"))
    pages = [ROOT / "README.md", *docs, *benchmarks]
    broken = []
    for page in pages:
        for link in re.finditer(r"\]\(([^)\s]+)\)", page.read_text()):
            target = link.group(1)
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} does not exist")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} has no such heading")
    return broken


if __name__ == "__main__":
    problems = [f"undocumented option: {o}" for o in undocumented_options()] + broken_links()
    print("\n".join(problems) or "docs: every option documented, every link resolves")
    sys.exit(1 if problems else 0)
