"""Validate objects against a CRD's ``openAPIV3Schema``: the structural-schema subset CRDs use.

Supported: ``type`` (object, array, string, integer, number, boolean), ``properties``,
``required``, ``items``, ``anyOf``, ``pattern``, ``format: int64``,
``x-kubernetes-int-or-string`` and ``x-kubernetes-preserve-unknown-fields``. As the API server
prunes them, fields not named in ``properties`` are reported (an object writer that relies on
pruning loses data). Any other schema keyword fails loudly, so the subset cannot silently grow.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "anyOf",
        "pattern",
        "format",
        "description",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
    }
)
_INT64 = (-(2**63), 2**63 - 1)


def crd_schema(path: Path, version: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of ``version`` in the CRD file at ``path``."""
    doc = yaml.safe_load(path.read_text())
    for entry in doc["spec"]["versions"]:
        if entry["name"] == version:
            return dict(entry["schema"]["openAPIV3Schema"])
    raise KeyError(f"{path}: no version {version!r}")


def validate(obj: Any, schema: Mapping[str, Any], where: str = "") -> list[str]:
    """Every violation of ``schema`` by ``obj`` as ``"<path>: <problem>"`` (empty = valid)."""
    unknown = set(schema) - _KEYWORDS
    if unknown:
        raise ValueError(f"{where or '<root>'}: schema keywords {sorted(unknown)} not supported")
    here = where or "<root>"
    if "anyOf" in schema:
        options = [validate(obj, option, where) for option in schema["anyOf"]]
        if all(options):
            return [f"{here}: matches none of anyOf ({'; '.join(o[0] for o in options)})"]
    if schema.get("x-kubernetes-int-or-string") and not (
        isinstance(obj, str) or (isinstance(obj, int) and not isinstance(obj, bool))
    ):
        return [f"{here}: {obj!r} is neither an integer nor a string"]
    problems = _check_type(obj, schema.get("type"), here)
    if problems:
        return problems
    if "pattern" in schema and isinstance(obj, str) and not re.search(schema["pattern"], obj):
        problems.append(f"{here}: {obj!r} does not match {schema['pattern']}")
    if (
        schema.get("format") == "int64"
        and isinstance(obj, int)
        and not _INT64[0] <= obj <= _INT64[1]
    ):
        problems.append(f"{here}: {obj} outside int64")
    if isinstance(obj, Mapping):
        for key in schema.get("required", ()):
            if key not in obj:
                problems.append(f"{here}: required field {key!r} missing")
        properties = schema.get("properties")
        if properties is not None:
            for key, value in obj.items():
                if key in properties:
                    problems += validate(value, properties[key], f"{where}.{key}")
                elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                    problems.append(f"{where}.{key}: not in the schema (pruned)")
    if isinstance(obj, list) and "items" in schema:
        for i, item in enumerate(obj):
            problems += validate(item, schema["items"], f"{where}[{i}]")
    return problems


def _check_type(obj: Any, kind: str | None, here: str) -> list[str]:
    expected: dict[str, tuple[type, ...]] = {
        "object": (dict,),
        "array": (list,),
        "string": (str,),
        "integer": (int,),
        "number": (int, float),
        "boolean": (bool,),
    }
    if kind is None:
        return []
    if kind not in expected:
        raise ValueError(f"{here}: schema type {kind!r} not supported")
    ok = isinstance(obj, expected[kind])
    if kind in ("integer", "number") and isinstance(obj, bool):
        ok = False
    return [] if ok else [f"{here}: {obj!r} is not of type {kind}"]
