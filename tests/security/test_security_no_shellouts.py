"""No shell-outs and no unsafe deserialisation anywhere in the package (docs/security.md).

The plugin runs as root beside containerd; it must never start a program (no ``subprocess``,
``os.system``, ``os.popen``, ``os.exec*``, ``os.spawn*``, ``pty``), never evaluate text as code
(``eval``/``exec``/``compile``), and never deserialise with a format that can run code
(``pickle``, ``marshal``, ``shelve``, ``yaml.load`` without a safe loader). The check parses
every module of ``nri_plrm`` (generated protobuf modules included) with ``ast``, so comments and
strings do not count and aliases (``import subprocess as sp``) do.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "nri_plrm"
FORBIDDEN_MODULES = {"subprocess", "pty", "pickle", "marshal", "shelve", "commands", "popen2"}
FORBIDDEN_OS = {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp"}
FORBIDDEN_OS_PREFIXES = ("exec", "spawn")
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__"}
SAFE_YAML = {"safe_load", "safe_load_all", "safe_dump", "safe_dump_all", "dump", "YAMLError"}


def modules() -> list[Path]:
    found = sorted(PACKAGE.rglob("*.py"))
    assert len(found) > 30, f"only {len(found)} modules under {PACKAGE}"
    return found


def violations(path: Path, base: Path = PACKAGE.parent) -> list[str]:
    """Every forbidden construct in ``path`` as ``file:line: what``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(base)
    out: list[str] = []
    os_names = {"os"}
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root in FORBIDDEN_MODULES:
                    out.append(f"{where}: import {alias.name}")
                if alias.name == "os":
                    os_names.add(alias.asname or "os")
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            if module in FORBIDDEN_MODULES:
                out.append(f"{where}: from {node.module} import ...")
            for alias in node.names:
                if module == "os" and _forbidden_os(alias.name):
                    out.append(f"{where}: from os import {alias.name}")
                if module == "yaml" and alias.name not in SAFE_YAML:
                    out.append(f"{where}: from yaml import {alias.name}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in os_names and _forbidden_os(node.attr):
                out.append(f"{where}: {node.value.id}.{node.attr}")
            if node.value.id == "yaml" and node.attr not in SAFE_YAML:
                out.append(f"{where}: yaml.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in FORBIDDEN_BUILTINS:
                out.append(f"{where}: {node.func.id}()")
        elif isinstance(node, ast.keyword) and node.arg == "shell":
            out.append(f"{where}: shell= keyword")
    return out


def _forbidden_os(name: str) -> bool:
    return name in FORBIDDEN_OS or name.startswith(FORBIDDEN_OS_PREFIXES)


def test_package_never_starts_programs_or_evaluates_code() -> None:
    problems = [v for path in modules() for v in violations(path)]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    "source",
    [
        "import subprocess\n",
        "import subprocess as sp\n",
        "from subprocess import run\n",
        "import os\nos.system('x')\n",
        "import os as o\no.execvp('x', [])\n",
        "from os import popen\n",
        "import os\nos.posix_spawn('x', [], {})\n",
        "eval('1')\n",
        "import yaml\nyaml.load('x')\n",
        "from yaml import load\n",
        "import pickle\n",
        "f(shell=True)\n",
    ],
)
def test_the_checker_catches(tmp_path: Path, source: str) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(source)
    assert violations(sample, tmp_path), f"not caught: {source!r}"


def test_the_checker_allows_safe_yaml_and_plain_os(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\nimport yaml\nos.path.join('a')\nos.replace('a', 'b')\n"
        "yaml.safe_load('x')\n# import subprocess, in a comment\ntext = 'os.system'\n"
    )
    assert violations(sample, tmp_path) == []
