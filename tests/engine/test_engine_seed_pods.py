"""The seed documents' pods on the default 2-socket / 4-NUMA / 32-core SMT2 machine, under each
topology policy and both scopes; whole-pod admission and the incremental (NRI) path must agree.

Derivation (reserved CPU 0; NUMA k = CPUs 8k..8k+7 and their siblings +32; 1Gi reserved on
NUMA 0, so node 0 has 15Gi allocatable and the others 16Gi):

- scope pod: the pod budget gives single-NUMA preferred hints; the narrowest common one is
  NUMA 0 (NUMA 1 for the 16Gi database pod, which does not fit NUMA 0's 15Gi). The bubble is
  takeByTopology over the node's free CPUs: whole cores 1 and 2 -> {1,2,33,34} (4 CPUs), cores
  8-11 -> {8-11,40-43} (8 CPUs). Exclusive slices are then taken from the bubble in spec order:
  2 CPUs -> core 1 {1,33}; 3 -> core 1 + CPU 2 {1,2,33}; 6 -> cores 8-10. The rest is the pod
  shared pool for the shared containers.
- scope container: each exclusive container is aligned on its own from the node pool
  (NUMA 0): 2 CPUs -> {1,33}; 1 CPU -> 32 (the lone free sibling of reserved CPU 0); 3 CPUs ->
  {1,33} + 32; after that sidecar took 32, 3 CPUs -> {1,2,33}; 6 -> cores 1-3. Shared
  containers run in the node shared pool.
- empty-shared-pool in scope pod fails validatePodScopeResources: restricted and
  single-numa-node reject with TopologyAffinityError (the tutorial's message), best-effort
  admits the hint and AllocatePod rejects with EmptyPodSharedPoolError.
"""

from __future__ import annotations

from typing import Any

import pytest
from seed_pods import GI, SEED_PODS, seed_config, seed_topology

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import (
    EMPTY_POD_SHARED_POOL_ERROR,
    TOPOLOGY_AFFINITY_ERROR,
    AdmissionError,
    AssignmentType,
    ContainerKind,
    ContainerSpec,
    MemoryBlock,
    PodSpec,
)

POLICIES = ("best-effort", "restricted", "single-numa-node")
PE, PS = AssignmentType.POD_EXCLUSIVE, AssignmentType.POD_SHARED
NE, NS = AssignmentType.NODE_EXCLUSIVE, AssignmentType.NODE_SHARED

# pod -> (bubble, {container: (type, cpus or None for the node pool, exclusive memory GiB)})
POD_SCOPE: dict[str, tuple[str, dict[str, tuple[AssignmentType, str | None, int]]]] = {
    "pod-scope-mixed": (
        "1-2,33-34",
        {
            "metrics-sidecar": (PS, "2,34", 0),
            "logging-sidecar": (PS, "2,34", 0),
            "main-app": (PE, "1,33", 2),
        },
    ),
    "container-scope-mixed": (
        "1-2,33-34",
        {
            "infrastructure-sidecar": (PE, "1,33", 2),
            "worker-1": (PS, "2,34", 0),
            "worker-2": (PS, "2,34", 0),
        },
    ),
    "tightly-coupled-database": (
        "8-11,40-43",
        {
            "metrics-exporter": (PS, "11,43", 0),
            "backup-agent": (PS, "11,43", 0),
            "database": (PE, "8-10,40-42", 12),
        },
    ),
    "ml-workload": (
        "1-2,33-34",
        {"service-mesh-sidecar": (PS, "34", 0), "ml-training": (PE, "1-2,33", 6)},
    ),
}

CONTAINER_SCOPE: dict[str, dict[str, tuple[AssignmentType, str | None, int]]] = {
    "pod-scope-mixed": {
        "metrics-sidecar": (NS, None, 0),
        "logging-sidecar": (NS, None, 0),
        "main-app": (NE, "1,33", 2),
    },
    "empty-shared-pool": {
        "metrics-sidecar": (NE, "32", 1),
        "logging-sidecar": (NS, None, 0),
        "main-app": (NE, "1-2,33", 3),
    },
    "container-scope-mixed": {
        "infrastructure-sidecar": (NE, "1,33", 2),
        "worker-1": (NS, None, 0),
        "worker-2": (NS, None, 0),
    },
    "tightly-coupled-database": {
        "metrics-exporter": (NS, None, 0),
        "backup-agent": (NS, None, 0),
        "database": (NE, "1-3,33-35", 12),
    },
    "ml-workload": {"service-mesh-sidecar": (NS, None, 0), "ml-training": (NE, "1,32-33", 6)},
}

EMPTY_POOL_CPU_MESSAGE = (
    "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus "
    "for shared containers"
)
POD_SCOPE_MESSAGE = (
    "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"
)


def _check(
    engine: Engine,
    pod: PodSpec,
    expected: dict[str, tuple[AssignmentType, str | None, int]],
    bubble: str | None,
) -> None:
    numa = 1 if pod.name == "tightly-coupled-database" and bubble else 0
    exclusive = CPUSet()
    for name, (atype, cpus, mem_gi) in expected.items():
        got = engine.assignment(pod.uid, name)
        assert got is not None, name
        assert got.assignment is atype, name
        if cpus is None:
            assert got.cpus == engine.node_shared_pool(), name
            assert got.mems == CPUSet() and got.memory == (), name
        else:
            assert got.cpus == CPUSet.parse(cpus), name
            assert got.mems == CPUSet([numa]), name
            assert got.exclusive == (mem_gi > 0), name
        if mem_gi:
            exclusive = exclusive | got.cpus
            assert got.memory == (MemoryBlock((numa,), "memory", mem_gi * GI),), name
        elif atype is PS:
            assert got.memory == (), name
    if bubble is None:
        assert engine.pod_cpus(pod.uid) is None
        assert not (exclusive & engine.node_shared_pool())
    else:
        pod_cpus = engine.pod_cpus(pod.uid)
        assert pod_cpus == CPUSet.parse(bubble)
        assert not (pod_cpus & engine.node_shared_pool())
        budget = (pod.requests or {})["memory"]
        assert engine.pod_memory(pod.uid) == (MemoryBlock((numa,), "memory", budget),)
    assert engine.verify() == []


def _incremental(engine: Engine, pod: PodSpec) -> list[tuple[ContainerSpec, Any]]:
    """Feed the pod the way NRI shows it: budget first, containers in creation order, kind
    unknown (APP), stopping nothing (every container here is long-running)."""
    budget = PodSpec(uid=pod.uid, name=pod.name, requests=pod.requests, limits=pod.limits)
    engine.admit_sandbox(budget)
    results = []
    for c in pod.all_containers():
        as_nri = ContainerSpec(c.name, ContainerKind.APP, c.requests, c.limits)
        results.append((as_nri, engine.add_container(budget, as_nri)))
    return results


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", sorted(POD_SCOPE))
def test_pod_scope_admitted(policy: str, name: str) -> None:
    bubble, expected = POD_SCOPE[name]
    pod = SEED_PODS[name]()
    whole = Engine(seed_topology(), seed_config(policy, "pod"))
    whole.admit_pod(pod)
    _check(whole, pod, expected, bubble)
    incremental = Engine(seed_topology(), seed_config(policy, "pod"))
    _incremental(incremental, pod)
    _check(incremental, pod, expected, bubble)
    assert incremental.assignments() == whole.assignments()
    assert incremental.node_shared_pool() == whole.node_shared_pool()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", sorted(CONTAINER_SCOPE))
def test_container_scope_admitted(policy: str, name: str) -> None:
    expected = CONTAINER_SCOPE[name]
    pod = SEED_PODS[name]()
    whole = Engine(seed_topology(), seed_config(policy, "container"))
    whole.admit_pod(pod)
    _check(whole, pod, expected, None)
    incremental = Engine(seed_topology(), seed_config(policy, "container"))
    _incremental(incremental, pod)
    _check(incremental, pod, expected, None)
    assert incremental.assignments() == whole.assignments()
    assert incremental.node_shared_pool() == whole.node_shared_pool()


@pytest.mark.parametrize(
    ("policy", "reason", "message"),
    [
        ("best-effort", EMPTY_POD_SHARED_POOL_ERROR, EMPTY_POOL_CPU_MESSAGE),
        ("restricted", TOPOLOGY_AFFINITY_ERROR, POD_SCOPE_MESSAGE),
        ("single-numa-node", TOPOLOGY_AFFINITY_ERROR, POD_SCOPE_MESSAGE),
    ],
)
def test_pod_scope_empty_shared_pool_rejected(policy: str, reason: str, message: str) -> None:
    pod = SEED_PODS["empty-shared-pool"]()
    engine = Engine(seed_topology(), seed_config(policy, "pod"))
    untouched = engine.snapshot()
    with pytest.raises(AdmissionError) as err:
        engine.admit_pod(pod)
    assert (err.value.reason, err.value.message) == (reason, message)
    assert engine.node_shared_pool() == CPUSet.from_range(0, 63)
    assert engine.pod_cpus(pod.uid) is None and engine.assignment(pod.uid, "main-app") is None
    assert engine.snapshot()["cpu"] == untouched["cpu"]
    assert engine.snapshot()["memory"] == untouched["memory"]


@pytest.mark.parametrize("policy", POLICIES)
def test_pod_scope_empty_shared_pool_incremental(policy: str) -> None:
    """NRI cannot see the whole pod at sandbox time: the budget is reserved, the sidecars are
    placed, and main-app (3 CPUs, which would empty the pool of the live shared logging-sidecar)
    is refused at creation with the kubelet's EmptyPodSharedPoolError message."""
    pod = SEED_PODS["empty-shared-pool"]()
    engine = Engine(seed_topology(), seed_config(policy, "pod"))
    budget = PodSpec(uid=pod.uid, name=pod.name, requests=pod.requests, limits=pod.limits)
    assert engine.admit_sandbox(budget) == {}
    assert engine.pod_cpus(pod.uid) == CPUSet.parse("1-2,33-34")
    metrics, logging, main = pod.all_containers()
    got, _ = engine.add_container(
        budget, ContainerSpec(metrics.name, requests=metrics.requests, limits=metrics.limits)
    )
    assert got.assignment is PE and got.cpus == CPUSet([1])
    got, _ = engine.add_container(budget, ContainerSpec(logging.name))
    assert got.assignment is PS and got.cpus == CPUSet.parse("2,33-34")
    with pytest.raises(AdmissionError) as err:
        engine.add_container(
            budget, ContainerSpec(main.name, requests=main.requests, limits=main.limits)
        )
    assert (err.value.reason, err.value.message) == (
        EMPTY_POD_SHARED_POOL_ERROR,
        EMPTY_POOL_CPU_MESSAGE,
    )
    assert engine.assignment(pod.uid, "main-app") is None
    assert engine.assignment(pod.uid, "logging-sidecar").cpus == CPUSet.parse("2,33-34")  # type: ignore[union-attr]
    assert engine.verify() == []


# --- KEP-5526 worked examples (pod budget 5 CPUs) ----------------------------------------------


def _kep_pod(uid: str, *cpus: int) -> PodSpec:
    budget = {"cpu": 5000, "memory": 5 * GI}

    def c(i: int, n: int) -> ContainerSpec:
        if not n:
            return ContainerSpec(f"c{i}")
        res = {"cpu": n * 1000, "memory": n * GI}
        return ContainerSpec(f"c{i}", requests=res, limits=res)

    return PodSpec(
        uid=uid,
        containers=tuple(c(i + 1, n) for i, n in enumerate(cpus)),
        requests=budget,
        limits=budget,
    )


KEP_PODS = {
    "all exclusive": (3, 1, 1),
    "one exclusive, two shared": (3, 0, 0),
    "all shared": (0, 0, 0),
}


@pytest.mark.parametrize("scope", ["pod", "container"])
@pytest.mark.parametrize("name", sorted(KEP_PODS))
def test_kep_examples_whole_equals_incremental(scope: str, name: str) -> None:
    pod = _kep_pod("kep", *KEP_PODS[name])
    whole = Engine(seed_topology(), seed_config("single-numa-node", scope))
    whole.admit_pod(pod)
    inc = Engine(seed_topology(), seed_config("single-numa-node", scope))
    _incremental(inc, pod)
    assert inc.assignments() == whole.assignments()
    assert inc.pod_cpus("kep") == whole.pod_cpus("kep")
    exclusive = [a for a in whole.assignments().values() if a.exclusive]
    assert sorted(len(a.cpus) for a in exclusive) == sorted(n for n in KEP_PODS[name] if n)
    shared = [a for a in whole.assignments().values() if not a.exclusive]
    if scope == "pod":
        bubble = whole.pod_cpus("kep")
        assert bubble is not None and len(bubble) == 5
        pool = bubble.difference(CPUSet().union(*(a.cpus for a in exclusive)))
        assert all(a.cpus == pool and a.assignment is PS for a in shared)
    else:
        assert all(a.cpus == whole.node_shared_pool() for a in shared)
    assert whole.verify() == [] and inc.verify() == []


def test_kep_example_empty_pool_rejected() -> None:
    pod = _kep_pod("kep", 3, 2, 0)
    whole = Engine(seed_topology(), seed_config("single-numa-node", "pod"))
    with pytest.raises(AdmissionError) as err:
        whole.admit_pod(pod)
    assert err.value.reason == TOPOLOGY_AFFINITY_ERROR
    inc = Engine(seed_topology(), seed_config("single-numa-node", "pod"))
    with pytest.raises(AdmissionError) as err:
        _incremental(inc, pod)
    assert (err.value.reason, err.value.message) == (
        EMPTY_POD_SHARED_POOL_ERROR,
        EMPTY_POOL_CPU_MESSAGE,
    )
    assert inc.verify() == []
