"""Append a dated section to benchmarks/RESULTS.md."""
from __future__ import annotations

import datetime as dt
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def append_results(title: str, lines: Sequence[str]) -> None:
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    with RESULTS.open("a", encoding="utf-8") as f:
        f.write(f"\n## {title}: {stamp} (python {sys.version.split()[0]}, {platform.machine()})\n\n")
        f.write("\n".join(lines) + "\n")


def publish(title: str, lines: Sequence[str], *, save: bool = True) -> None:
    """Print a benchmark's lines and, unless ``save`` is False, append them to RESULTS.md."""
    print("\n".join(lines))
    if save:
        append_results(title, lines)
