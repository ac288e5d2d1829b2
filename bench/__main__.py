"""Run every benchmark module and print the figures, or one JSON report with ``--json``.

Report shape: ``{"machine": {...}, "results": {NAME: number, ...}}``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time

import bench
from bench.common import machine

SKIP = {"common"}


def main() -> None:
    """Discover ``bench/*.py`` modules with a ``run()`` function and merge their results."""
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--json", action="store_true", help="print one JSON report")
    parser.add_argument("--only", action="append", default=[], help="run only these modules")
    args = parser.parse_args()
    results: dict[str, float] = {}
    durations: dict[str, float] = {}
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda i: i.name):
        if info.name in SKIP or info.name.startswith("_"):
            continue
        if args.only and info.name not in args.only:
            continue
        module = importlib.import_module(f"bench.{info.name}")
        run = getattr(module, "run", None)
        if run is None:
            continue
        started = time.perf_counter()
        results.update(run())
        durations[info.name] = round(time.perf_counter() - started, 2)
        if not args.json:
            print(f"# bench.{info.name}: {durations[info.name]} s", file=sys.stderr)
    if args.json:
        report = {"machine": machine() | {"durations_s": durations}, "results": results}
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for name, value in results.items():
            print(f"{name:40s} {value:12.3f}")


if __name__ == "__main__":
    main()
