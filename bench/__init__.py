"""Benchmarks. Each ``bench/<name>.py`` module exposes ``run() -> dict[str, float]`` and can be run
alone (``python -m bench.<name> [--json]``); ``python -m bench [--json]`` runs them all.

The test fixtures the benchmarks share with the tests (the runtime-side NRI simulator, the fake
sysfs writer, a fixed PodResources view) live in ``tests/support``; importing this package puts
that directory on ``sys.path`` once, for every benchmark module."""

import sys
from pathlib import Path

SUPPORT = str(Path(__file__).resolve().parent.parent / "tests" / "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)
