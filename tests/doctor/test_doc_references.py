"""Doctor's fixes name the documentation where the node has it (issue 31 item 13)."""

from __future__ import annotations

import ast
from pathlib import Path

from nri_plrm.doctor.docs import DOC_DIR, doc_ref

REPO = Path(__file__).resolve().parents[2]


def test_installed_docs_are_named_by_their_path_on_the_node(tmp_path: Path) -> None:
    (tmp_path / "install.md").write_text("# install\n")
    assert doc_ref("install.md", "step 1", str(tmp_path)) == f"{tmp_path}/install.md, step 1"


def test_without_installed_docs_both_places_are_named(tmp_path: Path) -> None:
    assert doc_ref("install.md", "step 2", str(tmp_path)) == (
        f"docs/install.md (on a node: {tmp_path}/install.md), step 2"
    )
    assert doc_ref("config.md") in (
        f"{DOC_DIR}/config.md",
        f"docs/config.md (on a node: {DOC_DIR}/config.md)",
    )


def _strings_outside_docstrings(tree: ast.AST) -> list[str]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docstrings.add(id(node.value))  # attribute docstrings
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            found.append(node.value)
    return found


def test_no_fix_names_a_source_tree_path_by_itself() -> None:
    """Every docs/ page doctor prints comes from doc_ref, which names the installed copy."""
    for module in sorted((REPO / "nri_plrm" / "doctor").glob("*.py")):
        if module.name == "docs.py":
            continue
        for text in _strings_outside_docstrings(ast.parse(module.read_text())):
            assert "docs/" not in text, f"{module.name}: {text!r}"
