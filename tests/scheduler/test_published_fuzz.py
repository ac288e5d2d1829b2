"""A NodeResourceTopology object changed at random (any field replaced by another JSON value)
is read or refused with PublishedStateError: nothing else escapes, so one bad object cannot
stop the extender's list of every node."""

from __future__ import annotations

import copy
import random
from typing import Any

from extender_diff import random_node, random_pod

from nri_plrm.podsource.nrt_exact_state import PublishedStateError, read_published
from nri_plrm.scheduler.extender import Extender
from nri_plrm.scheduler.settings import ExtenderSettings

VALUES: tuple[Any, ...] = (None, 0, -1, 1.5, "", "x", "0-3", "a=1/2", [], [1], {}, {"a": 1}, True)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out.extend(_paths(value, (*prefix, i)))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


def test_mutated_objects_are_read_or_refused_by_name() -> None:
    rng = random.Random(5)
    node = random_node(rng, "n")
    for i in range(5):
        node.admit(random_pod(rng, i, node.topology)[1])
    base = node.published()
    paths = _paths(base)
    extender = Extender(ExtenderSettings(), lambda: 0.0)
    refused = 0
    for i in range(1500):
        doc = _set(copy.deepcopy(base), rng.choice(paths), rng.choice(VALUES))
        try:
            read_published(doc)
        except PublishedStateError:
            refused += 1
        if isinstance(doc, dict):
            if isinstance(doc.get("metadata"), dict):
                doc["metadata"]["resourceVersion"] = str(i)
            extender.update_node(doc)  # never raises
    assert refused > 300
