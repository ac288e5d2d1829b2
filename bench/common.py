"""Helpers shared by the benchmark modules: percentiles, machine facts, the command line."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; raises ValueError on no samples."""
    if not samples:
        raise ValueError("percentile of no samples")
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def machine() -> dict[str, object]:
    """Facts about the machine the figures were measured on."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def main(run: Callable[[], dict[str, float]], argv: Sequence[str] | None = None) -> None:
    """Command line of one benchmark module: print its figures, or JSON with ``--json``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    args = parser.parse_args(argv)
    report(run(), args.json)


def report(results: dict[str, float], as_json: bool) -> None:
    """Print a module's figures, one a line, or as a JSON report with the machine's facts."""
    if as_json:
        json.dump({"machine": machine(), "results": results}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for name, value in results.items():
            print(f"{name:40s} {value:12.3f}")
