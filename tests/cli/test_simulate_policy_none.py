"""``simulate --config examples/policy-none.toml``: the documented outcomes under the kubelet's
default topology policy ``none`` (examples/README.md, "Topology manager policy none")."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.cli.simulate import SimulatedPod, SimulationResult, simulate
from nri_plrm.config.file import load_config
from nri_plrm.topology.synthetic import DEFAULT_SPEC, synthetic_topology

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOPOLOGY = synthetic_topology(DEFAULT_SPEC)
CONFIG = load_config(EXAMPLES / "policy-none.toml")
P = CPUSet.parse
GI = 1 << 30


def _run(*names: str) -> SimulationResult:
    return simulate([EXAMPLES / f"{n}.yaml" for n in names], TOPOLOGY, CONFIG)


def _containers(pod: SimulatedPod) -> dict[str, tuple[str, str, str, int | None]]:
    return {c.name: (c.assignment, str(c.cpus), str(c.mems), c.cpu_quota) for c in pod.containers}


def test_the_example_config_is_policy_none() -> None:
    assert CONFIG.topology_manager.policy == "none"
    result = _run("besteffort")
    assert (result.policy, result.scope) == ("none", "container")


ALONE: dict[str, dict[str, tuple[str, str, str, int | None]]] = {
    "pod-scope-mixed": {
        "metrics-sidecar": ("node_shared", "0,2-32,34-63", "", 400000),
        "logging-sidecar": ("node_shared", "0,2-32,34-63", "", 400000),
        "main-app": ("node_exclusive", "1,33", "0", -1),
    },
    "empty-shared-pool": {
        "metrics-sidecar": ("node_exclusive", "32", "0", -1),
        "logging-sidecar": ("node_shared", "0,3-31,34-63", "", 400000),
        "main-app": ("node_exclusive", "1-2,33", "0", -1),
    },
    "container-scope-mixed": {
        "infrastructure-sidecar": ("node_exclusive", "1,33", "0", -1),
        "worker-1": ("node_shared", "0,2-32,34-63", "", 400000),
        "worker-2": ("node_shared", "0,2-32,34-63", "", 400000),
    },
    "tightly-coupled-database": {
        "metrics-exporter": ("node_shared", "0,4-32,36-63", "", 800000),
        "backup-agent": ("node_shared", "0,4-32,36-63", "", 800000),
        "database": ("node_exclusive", "1-3,33-35", "0", -1),
    },
    "ml-workload": {
        "service-mesh-sidecar": ("node_shared", "0,2-31,34-63", "", 400000),
        "ml-training": ("node_exclusive", "1,32-33", "0", -1),
    },
    "classic-guaranteed": {
        "migrate-schema": ("node_exclusive", "1,33", "0", -1),
        "web": ("node_exclusive", "1,33", "0", -1),
        "cache": ("node_exclusive", "32", "0", -1),
    },
    "besteffort": {"batch": ("node_shared", "0-63", "", None)},
}


@pytest.mark.parametrize("name", sorted(ALONE))
def test_each_example_alone(name: str) -> None:
    (pod,) = _run(name).pods
    assert pod.admitted and pod.reason == ""
    assert pod.cpu_ids == CPUSet() and pod.memory == ()  # no pod budget under none
    assert _containers(pod) == ALONE[name]


def test_all_examples_in_one_run() -> None:
    result = simulate(sorted(EXAMPLES.glob("*.yaml")), TOPOLOGY, CONFIG)
    assert all(p.admitted for p in result.pods)
    assert result.shared_pool == P("0,11-31,38,43-63")
    got = {
        (p.name, c.name): (c.assignment, str(c.cpus), str(c.mems))
        for p in result.pods
        for c in p.containers
    }
    exclusive = {k: v for k, v in got.items() if v[0] == "node_exclusive"}
    assert exclusive == {
        ("classic-guaranteed", "migrate-schema"): ("node_exclusive", "1,33", "0"),
        ("classic-guaranteed", "web"): ("node_exclusive", "1,33", "0"),
        ("classic-guaranteed", "cache"): ("node_exclusive", "32", "0"),
        ("container-scope-mixed", "infrastructure-sidecar"): ("node_exclusive", "2,34", "0"),
        ("empty-shared-pool", "metrics-sidecar"): ("node_exclusive", "3", "0"),
        ("empty-shared-pool", "main-app"): ("node_exclusive", "4,35-36", "0"),
        ("ml-workload", "ml-training"): ("node_exclusive", "5-6,37", "0"),
        # NUMA 0's memory is used up by now (3 + 2 + 1 + 3 + 6 of its 15.5Gi): the memory
        # manager's default hint moves on to NUMA 1 while the CPUs stay on NUMA 0.
        ("pod-scope-mixed", "main-app"): ("node_exclusive", "7,39", "1"),
        ("tightly-coupled-database", "database"): ("node_exclusive", "8-10,40-42", "1"),
    }
    shared = [v for v in got.values() if v[0] == "node_shared"]
    assert shared and all(v[1] == str(result.shared_pool) for v in shared)
