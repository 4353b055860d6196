"""Sizes as people read them, in one unit system: decimal (kB, MB, GB), as the hub and most
download tools show them. Pure text, no output: the hub's messages, `models list`, `/show` and
the bench tables all format bytes here.
"""

from __future__ import annotations


def human_size(n: float | None) -> str:
    """4.9 GB, 98.4 MB, 352 B; "?" when unknown."""
    if n is None:
        return "?"
    units = ("B", "kB", "MB", "GB", "TB")
    value, i = float(n), 0
    while abs(value) >= 1000 and i < len(units) - 1:
        value, i = value / 1000, i + 1
    if i == 0:
        return f"{int(value)} B"
    return f"{value:.1f} {units[i]}" if value < 100 else f"{value:.0f} {units[i]}"
