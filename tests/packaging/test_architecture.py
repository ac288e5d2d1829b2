"""The package's shape: which packages may import which, no import cycle, no module reaching
into another module's private names, and few loose modules.

The graph is read from the source with ``ast`` (every ``import``/``from ... import`` of an
``nri_plrm`` module, at any depth: function-level imports count), so nothing is imported here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nri_plrm"
ROOT_PACKAGE = "<root>"
"""The package's own ``__init__``/``__main__`` and any module directly under ``nri_plrm/``."""
BELOW_ENGINE = {"base", "util", "topology"}
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "util": set(),
    "topology": {"base", "util"},
    "ttrpc": {"base", "util"},
    "nri": {"base", "util", "ttrpc"},
    "engine": BELOW_ENGINE,
    "checkpoint": BELOW_ENGINE | {"engine"},
    "translate": BELOW_ENGINE | {"engine"},
    "ledger": BELOW_ENGINE | {"engine", "checkpoint", "translate"},
    "config": BELOW_ENGINE | {"engine", "checkpoint"},
    "observability": BELOW_ENGINE | {"engine", "ledger", ROOT_PACKAGE},
    "podsource": BELOW_ENGINE | {"engine", "translate", "config", "observability"},
    "podresources": BELOW_ENGINE | {"engine", "translate", "ledger", "config"},
    "plugin": BELOW_ENGINE
    | {"engine", "translate", "ledger", "nri", "observability", "podsource", "podresources"},
    "scheduler": BELOW_ENGINE | {"engine", "translate", "config", "observability", "podsource"},
    "doctor": BELOW_ENGINE
    | {"engine", "checkpoint", "config", "observability", "podsource", "podresources"},
    "daemon": BELOW_ENGINE
    | {"engine", "checkpoint", "translate", "ledger", "config", "nri", "observability"}
    | {"podsource", "podresources", "plugin"},
    "cli": BELOW_ENGINE
    | {"engine", "checkpoint", "translate", "ledger", "config", "nri", "observability"}
    | {"podsource", "podresources", "plugin", "doctor", "daemon", "scheduler", ROOT_PACKAGE},
    ROOT_PACKAGE: {"cli"},
}
"""The packages each package may import (besides itself and the generated ``proto``): base
types and generic helpers nothing of ours; the machine model only those; the engine only the
machine model; nothing imports ``cli``, and only ``cli`` imports ``daemon``."""
MAX_LOOSE_MODULES = 3
"""Modules directly under ``nri_plrm/`` besides ``__init__`` and ``__main__``."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    return {name: path for name, path in found.items() if ".proto." not in name + "."}


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The nri_plrm modules ``name`` imports (a ``from pkg import sub`` names ``pkg.sub``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target in known and target != name:
                yield target


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, known)) for name, path in known.items()}


def test_the_graph_is_read() -> None:
    edges = graph()
    assert "nri_plrm.ledger" in edges["nri_plrm.plugin.handlers"]
    assert "nri_plrm.ledger.node" in edges["nri_plrm.ledger"]
    assert "nri_plrm.engine.facade" in edges["nri_plrm.ledger.node"]


def test_no_import_cycle() -> None:
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def package_of(name: str) -> str:
    """The top-level package of module ``name`` (``<root>`` for modules directly under it)."""
    parts = name.split(".")
    if len(parts) == 1 or (PACKAGE / parts[1]).with_suffix(".py").is_file():
        return ROOT_PACKAGE
    return parts[1]


def test_every_package_has_a_rule() -> None:
    packages = {package_of(name) for name in modules()}
    assert packages == set(ALLOWED), f"packages without a rule: {packages - set(ALLOWED)}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_its_rule_allows(package: str) -> None:
    wrong = sorted(
        f"{name} -> {target}"
        for name, targets in graph().items()
        if package_of(name) == package
        for target in targets
        if package_of(target) not in ALLOWED[package] | {package}
    )
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package])}: {wrong}"


def test_few_loose_modules() -> None:
    loose = sorted(
        p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")
    )
    assert len(loose) <= MAX_LOOSE_MODULES, f"modules directly under nri_plrm/: {loose}"


def private_names_defined(tree: ast.Module) -> set[str]:
    """The private names a module defines: top-level and class-level names, methods and
    attributes it assigns (``x._name = ...``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_reaches(path: Path) -> Iterator[str]:
    """Where ``path`` imports another module's private name or uses a private attribute that
    it does not define itself (``other._name``, not ``self._name``)."""
    tree = ast.parse(path.read_text(), str(path))
    own = private_names_defined(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    yield f"line {node.lineno}: from {node.module} import {alias.name}"
        elif isinstance(node, ast.Attribute):
            attr = node.attr
            if not attr.startswith("_") or attr.startswith("__"):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                if attr in own:
                    continue
            elif attr in own:
                continue
            yield f"line {node.lineno}: {ast.unparse(node)}"


def test_private_reaches_are_found(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text(
        "import argparse\n"
        "from other import _hidden\n"
        "class Own:\n"
        "    def __init__(self) -> None:\n"
        "        self._mine = 1\n"
        "    def same(self, other: 'Own') -> int:\n"
        "        return other._mine + self._mine\n"
        "def reach(engine: object) -> object:\n"
        "    return engine._pods, argparse._SubParsersAction\n"
    )
    found = list(private_reaches(module))
    assert [f.split(": ", 1)[1] for f in found] == [
        "from other import _hidden",
        "engine._pods",
        "argparse._SubParsersAction",
    ]


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_reach_into_another_modules_private_names(name: str) -> None:
    reaches = list(private_reaches(modules()[name]))
    assert not reaches, f"{name} reaches into private names: {reaches}"
