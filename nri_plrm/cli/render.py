"""Output shared by the commands: the ``--output`` option, plain text tables and indented JSON."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """``--output``/``-o``: ``table`` (the default) or ``json``."""
    parser.add_argument(
        "--output", "-o", choices=("table", "json"), default="table", help="output format"
    )


def emit_json(out: TextIO, data: Any) -> None:
    """``data`` as indented JSON (keys in insertion order) and a newline."""
    json.dump(data, out, indent=2, sort_keys=False)
    out.write("\n")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table with left-aligned columns separated by two spaces."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines) + "\n"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 socket``, ``2 sockets``, ``1 NUMA node``, ``2 threads``."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
