"""The exact state in the NodeResourceTopology object: valid against the upstream CRD schema,
read back to the machine, configuration and free resources the node's engine holds, and every
malformed or unknown attribute refused with its name."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest
from crd_schema import crd_schema, validate
from extender_diff import random_node, random_pod

from nri_plrm.podsource.fingerprint import fingerprint
from nri_plrm.podsource.nrt_exact_state import (
    ATTR_CPU_TOPOLOGY,
    ATTR_PODS,
    ATTR_VERSION,
    ZONE_FREE_CPUS,
    ZONE_MEMORY,
    PublishedStateError,
    cpu_layout,
    read_published,
)

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "packaging" / "helm" / "nri-plrm" / "crds" / "noderesourcetopologies.yaml"
SCHEMA = crd_schema(CRD, "v1alpha2")


def _busy_node(seed: int) -> Any:
    rng = random.Random(seed)
    node = random_node(rng, "worker-1")
    for i in range(12):
        _obj, spec = random_pod(rng, i, node.topology)
        node.admit(spec)
    return node


@pytest.mark.parametrize("seed", range(8))
def test_objects_validate_and_read_back_to_the_engines_state(seed: int) -> None:
    node = _busy_node(seed)
    obj = node.published()
    assert validate(obj, SCHEMA) == []
    state = read_published(obj)
    engine = node.ledger.engine
    assert state.name == "worker-1"
    assert cpu_layout(state.topology) == cpu_layout(engine.topology)
    assert state.free_cpus == engine.cpu_manager.available_cpus()
    assert state.config.topology_manager == engine.config.topology_manager
    assert state.config.memory_manager.policy == engine.config.memory_manager.policy
    want = engine.memory_manager.machine_state
    assert {n: s.to_dict() for n, s in state.machine_state.items()} == {
        n: s.to_dict() for n, s in want.items()
    }
    pods = [(p.namespace, p.name) for p in node.ledger.pods()]
    assert state.fingerprint == fingerprint(pods)
    assert all(state.shows(ns, name) for ns, name in pods)
    assert not state.shows("diff", "never-admitted")


def _attrs(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in obj["attributes"]}


def test_an_object_without_the_exact_state_is_refused_by_name() -> None:
    obj = _busy_node(1).published()
    obj["attributes"] = [a for a in obj["attributes"] if a["name"] != ATTR_VERSION]
    with pytest.raises(PublishedStateError, match="nriPlrmStateVersion: None: this reader knows"):
        read_published(obj)


@pytest.mark.parametrize(
    ("where", "name", "value", "expected"),
    [
        ("top", ATTR_VERSION, "2", "nriPlrmStateVersion: '2'"),
        ("top", ATTR_CPU_TOPOLOGY, "0/0/0", "must be <cpus>/<core>/<socket>/<numa>/<l3>/<die>"),
        ("top", ATTR_CPU_TOPOLOGY, "0/0/0/x/0/0", "'x': must be an integer"),
        ("top", ATTR_PODS, "00000000000000aa", "do not give nodeTopologyPodsFingerprint"),
        ("zone", ZONE_FREE_CPUS, "3-1", "node-0.nriPlrmFreeCPUs: '3-1'"),
        ("zone", ZONE_MEMORY, "memory=1/2/3", "must be <type>=<total>/<systemReserved>"),
    ],
)
def test_malformed_attributes_are_named(where: str, name: str, value: str, expected: str) -> None:
    obj = copy.deepcopy(_busy_node(2).published())
    holder = obj["attributes"] if where == "top" else obj["zones"][0]["attributes"]
    for attr in holder:
        if attr["name"] == name:
            attr["value"] = value
    with pytest.raises(PublishedStateError, match=expected.replace("(", r"\(")):
        read_published(obj)


def test_equal_states_share_a_key_and_the_pod_list_is_not_part_of_it() -> None:
    a = _busy_node(3)
    b = _busy_node(3)
    b.name = "worker-2"
    assert read_published(a.published()).state_key == read_published(b.published()).state_key
    uid = a.uids()[0]
    a.remove(uid)
    assert read_published(a.published()).state_key != read_published(b.published()).state_key
