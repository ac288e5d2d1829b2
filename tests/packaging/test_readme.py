"""The README's ``simulate --output json`` schema names every key the output has."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nri_plrm.cli.simulate import simulate
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC

REPO = Path(__file__).resolve().parents[2]


def _keys(doc: Any, inside: set[str]) -> set[str]:
    """Every key of ``doc`` and of the dicts and first list items under it, except under
    ``inside``."""
    found: set[str] = set()
    if isinstance(doc, dict):
        for key, value in doc.items():
            found.add(key)
            if key not in inside:
                found |= _keys(value, inside)
    elif isinstance(doc, list) and doc:
        found |= _keys(doc[0], inside)
    return found


def test_json_schema_in_the_readme_matches_the_output() -> None:
    text = " ".join((REPO / "README.md").read_text().split())
    match = re.search(r"prints the machine-readable result: `(\{.*?\})`", text)
    assert match, "README: the simulate JSON schema is missing"
    documented = set(re.findall(r'"([\w-]+)"', match.group(1)))
    examples = [REPO / "examples" / f for f in ("pod-scope-mixed.yaml", "empty-shared-pool.yaml")]
    output = simulate(examples, load_topology(DEFAULT_SPEC)).to_json()
    undocumented = _keys(output, inside={"topology", "free_per_numa"}) - documented
    assert not undocumented, f"README: simulate JSON keys missing from the schema: {undocumented}"
    assert {"config", "explanation", "free_per_numa"} <= documented
