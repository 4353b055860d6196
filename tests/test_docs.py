"""The user docs stay true to the CLI: every option of every command is documented in README.md or
docs/, and every relative link between the docs resolves (scripts/check_docs.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_option_is_documented_and_every_link_resolves():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_docs.py")], capture_output=True,
                            text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_is_a_guide_not_a_manual():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 320
    assert len((ROOT / "docs" / "SPECULATIVE.md").read_text().splitlines()) < 250
