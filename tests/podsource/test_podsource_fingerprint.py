"""The NodeResourceTopology pod fingerprint against the podfingerprint library's own vector:
its ``testdata/pods.json`` (259 pods of a real cluster, copied to tests/data/podfingerprint)
signs as ``pfp0v001e477a4e3b2fc0ec6`` in any order ("correct fingerprint" in its Check test)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from nri_plrm.podsource.fingerprint import METHOD_ALL, fingerprint, pod_hash

PODS = Path(__file__).resolve().parents[1] / "data" / "podfingerprint" / "pods.json"


def pods() -> list[tuple[str, str]]:
    return [(p["namespace"], p["name"]) for p in json.loads(PODS.read_text())]


def test_the_library_vector_in_any_order() -> None:
    listed = pods()
    assert len(listed) == 259
    assert fingerprint(listed) == "pfp0v001e477a4e3b2fc0ec6"
    shuffled = listed[:]
    random.Random(7).shuffle(shuffled)
    assert fingerprint(shuffled) == "pfp0v001e477a4e3b2fc0ec6"


def test_one_pod_more_or_less_changes_it() -> None:
    listed = pods()
    assert fingerprint(listed[1:]) != fingerprint(listed)
    assert fingerprint([*listed, ("default", "extra")]) != fingerprint(listed)


def test_namespace_and_name_are_not_interchangeable() -> None:
    assert pod_hash("a", "b") != pod_hash("b", "a")
    assert fingerprint([]) == "pfp0v001ef46db3751d8e999"
    assert METHOD_ALL == "all"
