"""Rejection explanations: one line, in operator terms, from the engine's own numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.explain import explain_rejection
from nri_plrm.engine.facade import Engine, EngineConfig
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.spec import (
    EMPTY_POD_SHARED_POOL_ERROR,
    SMT_ALIGNMENT_ERROR,
    TOPOLOGY_AFFINITY_ERROR,
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    ContainerKind,
    ContainerSpec,
    PodSpec,
)
from nri_plrm.engine.topology_manager import TopologyManagerConfig
from nri_plrm.topology.machines import load_topology
from nri_plrm.topology.synthetic import DEFAULT_SPEC
from nri_plrm.translate.manifest_to_pod import load_manifests

ROOT = Path(__file__).resolve().parents[2]
GI = 1 << 30
SMALL = "sockets=1,numa_per_socket=2,cores_per_numa=4,threads_per_core=2,memory_per_numa=8Gi"
DEFAULT_FREE_CPUS = "NUMA 0: 15, NUMA 1: 16, NUMA 2: 16, NUMA 3: 16"
DEFAULT_FREE_MEMORY = "NUMA 0: 15.5Gi, NUMA 1: 16Gi, NUMA 2: 16Gi, NUMA 3: 16Gi"


def engine(
    spec: str = DEFAULT_SPEC,
    policy: str = "single-numa-node",
    options: dict[str, bool] | None = None,
) -> Engine:
    """CPU 0 and 512Mi on NUMA 0 reserved (as the defaults), scope pod, ``policy``, ``options``."""
    return Engine(
        load_topology(spec),
        EngineConfig(
            topology_manager=TopologyManagerConfig(policy, "pod"),
            cpu_manager=CPUManagerConfig(
                reserved_cpus=CPUSet.parse("0"), options=dict(options or {})
            ),
            memory_manager=MemoryManagerConfig(reserved={0: {"memory": GI // 2}}),
        ),
    )


def budget_pod(name: str, cpus: int, memory: int, *containers: ContainerSpec) -> PodSpec:
    budget = {"cpu": cpus * 1000, "memory": memory}
    return PodSpec(
        uid=name,
        name=name,
        requests=budget,
        limits=budget,
        containers=containers or (ContainerSpec("app"),),
    )


def guaranteed_pod(name: str, cpus: int, memory: int = GI) -> PodSpec:
    res = {"cpu": cpus * 1000, "memory": memory}
    return PodSpec(
        uid=name, name=name, containers=(ContainerSpec("app", requests=res, limits=res),)
    )


def reject(e: Engine, pod: PodSpec) -> tuple[AdmissionError, str]:
    """Admit ``pod`` expecting a rejection; the error and its explanation (engine unchanged)."""
    with pytest.raises(AdmissionError) as caught:
        e.admit_pod(pod)
    before = json.dumps(e.snapshot(), sort_keys=True)
    text = explain_rejection(e, pod, caught.value)
    assert json.dumps(e.snapshot(), sort_keys=True) == before  # pure: reads, never changes
    return caught.value, text


def test_empty_shared_pool_example() -> None:
    (pod,) = load_manifests([ROOT / "examples" / "empty-shared-pool.yaml"])
    err, text = reject(engine(), pod)
    assert err.reason == TOPOLOGY_AFFINITY_ERROR
    assert text == (
        "exclusive containers request 4 CPUs = pod budget 4 CPUs, nothing left for the "
        "1 shared container (logging-sidecar)"
    )


def test_empty_shared_pool_under_best_effort_names_the_same_numbers() -> None:
    (pod,) = load_manifests([ROOT / "examples" / "empty-shared-pool.yaml"])
    err, text = reject(engine(policy="best-effort"), pod)
    assert err.reason == EMPTY_POD_SHARED_POOL_ERROR
    assert text.startswith("exclusive containers request 4 CPUs = pod budget 4 CPUs")


def test_two_shared_containers_and_an_over_budget_split() -> None:
    res = {"cpu": 3000, "memory": GI}
    pod = budget_pod(
        "over",
        2,
        2 * GI,
        ContainerSpec("a", requests=res, limits=res),
        ContainerSpec("b"),
        ContainerSpec("c"),
    )
    _, text = reject(engine(), pod)
    assert text == (
        "exclusive containers request 3 CPUs > pod budget 2 CPUs, nothing left for the "
        "2 shared containers (b, c)"
    )


def test_too_big_budget() -> None:
    _, text = reject(engine(policy="best-effort"), budget_pod("huge", 10_000, GI))
    assert (
        text == f"pod budget asks 10000 exclusive CPUs, the node has 63 free ({DEFAULT_FREE_CPUS})"
    )


def test_too_big_memory() -> None:
    err, text = reject(engine(policy="best-effort"), budget_pod("huge-memory", 2, 100 << 40))
    assert err.reason == UNEXPECTED_ADMISSION_ERROR
    assert text == (
        f"pod budget asks 100Ti memory, the node has 63.5Gi free ({DEFAULT_FREE_MEMORY})"
    )


NEVER = "so it can never be admitted here; topology manager policy single-numa-node needs one node"


def test_more_cpus_than_any_numa_node_has_can_never_fit() -> None:
    """2 NUMA nodes of 4 CPUs, CPU 0 reserved: 7 free on the node, but no node ever has 8."""
    e = engine(
        "sockets=1,numa_per_socket=2,cores_per_numa=2,threads_per_core=2,memory_per_numa=8Gi"
    )
    err, text = reject(e, budget_pod("eight", 8, GI))
    assert err.reason == TOPOLOGY_AFFINITY_ERROR
    assert text == (
        "pod budget asks 8 exclusive CPUs, no NUMA node of this machine has 8 CPUs (largest: 4 "
        f"allocatable), {NEVER} for all of it"
    )
    _, huge = reject(engine(), budget_pod("huge", 10_000, GI))
    assert huge.startswith("pod budget asks 10000 exclusive CPUs, no NUMA node of this machine")


def test_more_memory_than_any_numa_node_has_can_never_fit() -> None:
    _, text = reject(engine(), budget_pod("wide-memory", 2, 17 * GI))
    assert text == (
        "pod budget asks 17Gi memory, no NUMA node of this machine has that much (largest: 16Gi "
        f"allocatable), {NEVER} for all of it"
    )


def test_no_single_numa_node_fits_the_cpus() -> None:
    e = engine(SMALL)
    e.admit_pod(budget_pod("x", 4, GI))
    e.admit_pod(budget_pod("y", 4, GI))
    err, text = reject(e, budget_pod("wide", 6, GI))
    assert err.reason == TOPOLOGY_AFFINITY_ERROR
    assert text == (
        "pod budget asks 6 exclusive CPUs, no single NUMA node has that many free "
        "(NUMA 0: 3, NUMA 1: 4); topology manager policy single-numa-node needs one node for "
        "all of it"
    )


def test_no_single_numa_node_fits_the_memory() -> None:
    e = engine(SMALL)
    e.admit_pod(budget_pod("x", 1, 4 * GI))
    e.admit_pod(budget_pod("y", 1, 4 * GI))
    _, text = reject(e, budget_pod("wide-memory", 1, 5 * GI))
    assert text == (
        "pod budget asks 5Gi memory, no single NUMA node has that much free "
        "(NUMA 0: 3.5Gi, NUMA 1: 4Gi); topology manager policy single-numa-node needs one node "
        "for all of it"
    )


def test_cpus_and_memory_fit_on_different_numa_nodes() -> None:
    e = engine(SMALL)
    e.admit_pod(budget_pod("x", 2, 7 * GI))  # NUMA 0: 5 CPUs and 512Mi left
    e.admit_pod(budget_pod("y", 7, GI))  # NUMA 1: 1 CPU and 7Gi left
    _, text = reject(e, budget_pod("z", 4, 4 * GI))
    assert text == (
        "pod budget: 4 CPUs fit on NUMA 0 only and 4Gi memory on NUMA 1 only, no single NUMA "
        "node has both; topology manager policy single-numa-node needs one node for all of it"
    )


def test_smt_alignment_odd_request() -> None:
    e = engine(SMALL, options={"full-pcpus-only": True})
    err, text = reject(e, guaranteed_pod("odd", 3))
    assert err.reason == SMT_ALIGNMENT_ERROR
    assert text == (
        "full-pcpus-only: 3 CPUs asked is not a multiple of the 2 threads per core; ask for "
        "whole cores (2 or 4 CPUs)"
    )


def test_smt_alignment_not_enough_whole_cores() -> None:
    e = engine(SMALL, options={"full-pcpus-only": True})
    e.admit_pod(guaranteed_pod("a", 6))
    _, text = reject(e, guaranteed_pod("b", 10))
    # 16 CPUs: core 0 holds the reserved CPU 0, "a" took 6: 8 CPUs on whole free cores.
    assert text == (
        "full-pcpus-only: 10 CPUs asked, only 8 free CPUs sit on whole cores without a "
        "reserved thread"
    )


def test_restricted_policy_names_the_preferred_set_rule() -> None:
    _, text = reject(engine(policy="restricted"), budget_pod("wide", 20, GI))
    assert text.endswith("topology manager policy restricted admits only that preferred set")
    assert "pod budget asks 20 exclusive CPUs and 1Gi memory" in text
    assert DEFAULT_FREE_CPUS in text


def test_container_slice_of_a_reserved_budget_over_nri() -> None:
    """Over NRI alone the budget is reserved at sandbox time and containers arrive one by one."""
    e = engine()
    pod = budget_pod("incremental", 4, 4 * GI)
    e.admit_sandbox(pod)
    e.add_container(pod, ContainerSpec("sidecar", ContainerKind.SIDECAR))
    res = {"cpu": 4000, "memory": GI}
    app = ContainerSpec("app", requests=res, limits=res)
    with pytest.raises(AdmissionError) as caught:
        e.add_container(pod, app)
    assert caught.value.reason == EMPTY_POD_SHARED_POOL_ERROR
    assert explain_rejection(e, pod, caught.value, app) == (
        "container app asks 4 exclusive CPUs = all that is left of the pod budget 4 CPUs, "
        "nothing left for the pod's shared containers"
    )
    more = {"cpu": 6000, "memory": GI}
    big = ContainerSpec("big", requests=more, limits=more)
    with pytest.raises(AdmissionError) as caught:
        e.add_container(pod, big)
    assert explain_rejection(e, pod, caught.value, big) == (
        "container big asks 6 exclusive CPUs, only 4 CPUs of the pod budget 4 CPUs are left "
        "(exclusive containers hold 0 CPUs)"
    )


def test_explanation_is_never_empty_for_classic_container_scope() -> None:
    e = Engine(
        load_topology(SMALL),
        EngineConfig(
            TopologyManagerConfig("single-numa-node", "container"),
            CPUManagerConfig(reserved_cpus=CPUSet.parse("0")),
            MemoryManagerConfig(reserved={0: {"memory": GI // 2}}),
        ),
    )
    _, text = reject(e, guaranteed_pod("classic", 9))
    assert text == (
        "container app asks 9 exclusive CPUs, no NUMA node of this machine has 9 CPUs (largest: "
        f"8 allocatable), {NEVER} for all of it"
    )
    e.admit_pod(guaranteed_pod("first", 4))
    e.admit_pod(guaranteed_pod("second", 4))
    _, text = reject(e, guaranteed_pod("classic", 5))
    assert text.startswith("container app asks 5 exclusive CPUs, no single NUMA node has that ")


def test_classic_sandbox_known_only_by_its_aggregate() -> None:
    """Over NRI a classic Guaranteed pod is aligned at sandbox time on its containers' sum."""
    e = engine()
    bare = PodSpec(uid="classic", name="classic")
    aggregate = {"cpu": 20_000, "memory": GI}
    with pytest.raises(AdmissionError) as caught:
        e.admit_sandbox(bare, aggregate)
    assert explain_rejection(e, bare, caught.value, aggregate=aggregate) == (
        "pod (all containers) asks 20 exclusive CPUs, no NUMA node of this machine has 20 CPUs "
        f"(largest: 16 allocatable), {NEVER} for all of it"
    )
