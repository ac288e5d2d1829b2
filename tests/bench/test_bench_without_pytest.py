"""The benchmarks run where only the package is installed (``pip install .``, no pytest): every
module ``bench`` imports, including the test fixtures it borrows from tests/support, imports
with pytest unavailable."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

WITHOUT_PYTEST = "import sys; sys.modules['pytest'] = None\n"
"""Makes ``import pytest`` raise ImportError, as in an environment without it."""


def imported_modules() -> list[str]:
    """Every module named by an import statement anywhere in bench/*.py (also inside
    functions, where the benchmarks import the simulator)."""
    names: set[str] = set()
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
    return sorted(names)


def run_without_pytest(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PYTEST + code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_module_bench_imports_imports_without_pytest() -> None:
    modules = imported_modules()
    assert "nrisim" in modules and "plrm_runtime" in modules
    code = "import bench\n" + "".join(f"import {name}\n" for name in modules)
    done = run_without_pytest(code)
    assert done.returncode == 0, done.stderr


def test_python_m_bench_help_runs_without_pytest() -> None:
    done = run_without_pytest(
        "import runpy; sys.argv = ['bench', '--help']\n"
        "try:\n    runpy.run_module('bench', run_name='__main__')\n"
        "except SystemExit as exit:\n    sys.exit(exit.code)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "usage: python -m bench" in done.stdout
