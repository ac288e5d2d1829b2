"""The package's shape: the import graph has no cycle and points downwards; modules stay small.

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
MAX_MODULE_LINES = 600
MAX_HANDLER_CLASS_LINES = 400
LEAVES = frozenset({"nri_plrm.cpuset", "nri_plrm.quantity", "nri_plrm.topology.model"})
"""Data modules below the engine: they import nothing of nri_plrm but each other."""
PROTOCOL_FORBIDDEN = (
    "nri_plrm.engine",
    "nri_plrm.ledger",
    "nri_plrm.plugin",
    "nri_plrm.translate",
    "nri_plrm.config",
    "nri_plrm.config_file",
    "nri_plrm.config_values",
    "nri_plrm.daemon",
    "nri_plrm.cli",
)
"""What the protocol layers (``ttrpc``, ``nri``) must not reach."""


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
    assert "nri_plrm.ledger" in edges["nri_plrm.plugin"]
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


def test_engine_imports_only_engine_and_leaf_modules() -> None:
    edges = graph()
    for name, targets in edges.items():
        if name.startswith("nri_plrm.engine"):
            outside = {
                t for t in targets if not t.startswith("nri_plrm.engine") and t not in LEAVES
            }
            assert not outside, f"{name} imports {sorted(outside)}"
        if name in LEAVES:
            assert targets <= LEAVES, f"{name} imports {sorted(targets - LEAVES)}"


@pytest.mark.parametrize("layer", ["nri_plrm.ttrpc", "nri_plrm.nri"])
def test_protocol_layers_import_nothing_above_them(layer: str) -> None:
    for name, targets in graph().items():
        if name.startswith(layer):
            upward = {t for t in targets if t.startswith(PROTOCOL_FORBIDDEN)}
            assert not upward, f"{name} imports {sorted(upward)}"


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_size(name: str) -> None:
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name}: {lines} lines (at most {MAX_MODULE_LINES})"


def test_nri_handler_class_size() -> None:
    tree = ast.parse((PACKAGE / "plugin.py").read_text())
    (handlers,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Plugin"]
    assert handlers.end_lineno is not None
    lines = handlers.end_lineno - handlers.lineno + 1
    assert lines <= MAX_HANDLER_CLASS_LINES, f"Plugin: {lines} lines"
