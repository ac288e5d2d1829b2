"""In-place resize in the engine: what kubelet 1.37 performs and what it refuses, with its reasons
and messages, and the opt-in rules (kubernetes/kubernetes#140629 for exclusive containers, the
plugin's own for pod budgets) with their topology checks. The cases are the rows of the table in
docs/design.md section 10; the end-to-end side is tests/plugin/test_plugin_resize_table.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from seed_pods import GI, seed_config, seed_topology

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.memory_state import POLICY_NONE, MemoryManagerConfig
from nri_plrm.engine.resize import (
    CPU_STATIC_MESSAGE,
    INCONSISTENT_CPU_ALLOCATION_ERROR,
    INFEASIBLE,
    MEMORY_STATIC_MESSAGE,
    POD_LEVEL_GATE_MESSAGE,
    POD_LEVEL_SLICE_MESSAGE,
    PROHIBITED_CPU_ALLOCATION_ERROR,
    init_container_message,
    quantity,
    resize_container,
    resize_pod,
)
from nri_plrm.engine.spec import (
    EMPTY_POD_SHARED_POOL_ERROR,
    TOPOLOGY_AFFINITY_ERROR,
    AdmissionError,
    AssignmentType,
    ContainerAssignment,
    ContainerKind,
    ContainerSpec,
    PodSpec,
    ResizeGates,
)
from nri_plrm.engine.topology_manager import TOPOLOGY_AFFINITY_MESSAGE


def make(
    scope: str = "container",
    *,
    cpus: bool = False,
    pod_level: bool = True,
    budget_cpus: bool = False,
    policy: str = "single-numa-node",
    memory_static: bool = True,
) -> Engine:
    gates = ResizeGates(cpus, pod_level, budget_cpus)
    config = replace(seed_config(policy, scope), resize=gates)
    if not memory_static:
        config = replace(config, memory_manager=MemoryManagerConfig(policy=POLICY_NONE))
    return Engine(seed_topology(), config)


def guaranteed(name: str, millis: int, memory: int = GI) -> ContainerSpec:
    res = {"cpu": millis, "memory": memory}
    return ContainerSpec(name, requests=res, limits=res)


def classic(uid: str, *containers: ContainerSpec) -> PodSpec:
    return PodSpec(uid=uid, name=uid, containers=containers)


def admit(e: Engine, pod: PodSpec, name: str) -> ContainerAssignment:
    """Admit a whole pod; the assignment of its container ``name``."""
    e.admit_pod(pod)
    assignment = e.assignment(pod.uid, name)
    assert assignment is not None
    return assignment


def numa_of(cpu: int) -> int:
    """NUMA node of a CPU on the seed machine (node k: CPUs 8k..8k+7 and their siblings)."""
    return (cpu % 32) // 8


def state(e: Engine) -> str:
    return json.dumps(e.snapshot(), sort_keys=True)


def refused(e: Engine, call: object, reason: str, message: str | None = None) -> AdmissionError:
    before = state(e)
    with pytest.raises(AdmissionError) as info:
        call()  # type: ignore[operator]
    assert info.value.reason == reason
    if message is not None:
        assert info.value.message == message
    assert state(e) == before, "a refused resize changed the state"
    return info.value


def test_quantity_prints_like_kubernetes() -> None:
    assert [quantity(m) for m in (2000, 1500, 250, 0)] == ["2", "1500m", "250m", "0"]


def test_default_gates_refuse_cpu_and_memory_of_guaranteed_pods() -> None:
    e = make()
    e.admit_pod(classic("p", guaranteed("c", 2000)))
    refused(
        e, lambda: resize_container(e, "p", guaranteed("c", 3000)), INFEASIBLE, CPU_STATIC_MESSAGE
    )
    refused(
        e,
        lambda: resize_container(e, "p", guaranteed("c", 2000, 2 * GI)),
        INFEASIBLE,
        MEMORY_STATIC_MESSAGE,
    )
    # Both changed: the CPU manager's check comes first, as in the kubelet's handler.
    refused(
        e,
        lambda: resize_container(e, "p", guaranteed("c", 3000, 2 * GI)),
        INFEASIBLE,
        CPU_STATIC_MESSAGE,
    )


def test_burstable_container_resize_is_performed_on_the_shared_pool() -> None:
    e = make()
    burst = ContainerSpec("b", requests={"cpu": 500}, limits={"cpu": 1000})
    e.admit_pod(classic("p", burst))
    grown = ContainerSpec("b", requests={"cpu": 1500}, limits={"cpu": 3000})
    assignment, changes = resize_container(e, "p", grown)
    assert assignment.assignment is AssignmentType.NODE_SHARED
    assert assignment.cpus == e.node_shared_pool() and changes == {}
    assert e.pod_so_far("p").container("b") == grown  # type: ignore[union-attr]


def test_exclusive_grow_keeps_cpus_and_aligns_new_ones() -> None:
    e = make(cpus=True)
    e.admit_pod(classic("other", ContainerSpec("shared", requests={"cpu": 100})))
    first = admit(e, classic("p", guaranteed("c", 2000)), "c")
    assignment, changes = resize_container(e, "p", guaranteed("c", 4000))
    assert assignment.exclusive and len(assignment.cpus) == 4
    assert first.cpus <= assignment.cpus
    numa = {numa_of(c) for c in assignment.cpus}
    assert numa == {numa_of(next(iter(first.cpus)))}
    assert not assignment.cpus & e.node_shared_pool()
    assert changes[("other", "shared")].cpus == e.node_shared_pool()
    assert e.verify() == []


def test_exclusive_shrink_keeps_the_baseline_and_refuses_below_it() -> None:
    e = make(cpus=True)
    base = admit(e, classic("p", guaranteed("c", 2000)), "c").cpus
    resize_container(e, "p", guaranteed("c", 4000))
    shrunk, _ = resize_container(e, "p", guaranteed("c", 3000))
    assert base <= shrunk.cpus and len(shrunk.cpus) == 3
    back, _ = resize_container(e, "p", guaranteed("c", 2000))
    assert back.cpus == base
    err = refused(
        e, lambda: resize_container(e, "p", guaranteed("c", 1000)), PROHIBITED_CPU_ALLOCATION_ERROR
    )
    assert err.message == (
        "prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively "
        "allocated pool below promised, (requested CPUs = 1, allocated CPUs = 2, promised CPUs = "
        "2, guaranteed CPUs = 1)"
    )
    assert e.verify() == []


def test_moving_between_exclusive_and_shared_is_inconsistent() -> None:
    e = make(cpus=True)
    e.admit_pod(classic("p", guaranteed("c", 2000)))
    err = refused(
        e,
        lambda: resize_container(e, "p", guaranteed("c", 1500)),
        INCONSISTENT_CPU_ALLOCATION_ERROR,
    )
    assert err.message == (
        "inconsistentCPUAllocation Error: Not allowed to move a container from  exclusively "
        "allocated pool to shared pool, not allowed (requested CPUs = 1500m, allocated CPUs = 2)"
    )
    e.admit_pod(classic("q", guaranteed("s", 500)))
    err = refused(
        e,
        lambda: resize_container(e, "q", guaranteed("s", 1000)),
        INCONSISTENT_CPU_ALLOCATION_ERROR,
    )
    assert "from shared pool to exclusively allocated pool" in err.message
    assert "(requested CPUs = 1, allocated CPUs = 500m)" in err.message
    shared, _ = resize_container(e, "q", guaranteed("s", 700))
    assert shared.assignment is AssignmentType.NODE_SHARED


def test_grow_beyond_the_node_allocatable_is_infeasible() -> None:
    e = make(cpus=True)
    e.admit_pod(classic("p", guaranteed("c", 2000)))
    refused(
        e,
        lambda: resize_container(e, "p", guaranteed("c", 64000)),
        INFEASIBLE,
        "Node didn't have enough capacity: cpu, requested: 64000, capacity: 63000",
    )
    # The capacity check holds with the default gates too, for any QoS; memory is checked first.
    d = make()
    d.admit_pod(classic("b", ContainerSpec("x", requests={"cpu": 500})))
    huge = ContainerSpec("x", requests={"cpu": 70000, "memory": 64 * GI})
    refused(
        d,
        lambda: resize_container(d, "b", huge),
        INFEASIBLE,
        f"Node didn't have enough capacity: memory, requested: {64 * GI}, capacity: {63 * GI}",
    )


def test_a_plain_init_container_is_not_resized() -> None:
    e = make(cpus=True)
    init = replace(guaranteed("init", 2000), kind=ContainerKind.INIT)
    e.admit_pod(
        PodSpec(uid="p", name="p", init_containers=(init,), containers=(guaranteed("c", 2000),))
    )
    grown = replace(guaranteed("init", 4000), kind=ContainerKind.INIT)
    refused(e, lambda: resize_container(e, "p", grown), INFEASIBLE, init_container_message("init"))


@pytest.mark.parametrize(
    ("policy", "to", "outcome"),
    [
        # 2 -> 14 CPUs fit the container's NUMA node (15 allocatable on node 0): preferred.
        ("single-numa-node", 14, "node"),
        ("restricted", 14, "node"),
        ("best-effort", 14, "node"),
        # 2 -> 16 needs node 0 and another; one node could hold 16, so that is not preferred.
        ("single-numa-node", 16, "refused"),
        ("restricted", 16, "refused"),
        ("best-effort", 16, "two"),
        ("none", 16, "any"),
        # 2 -> 20 needs two nodes on any machine of this shape: preferred, but not single.
        ("single-numa-node", 20, "refused"),
        ("restricted", 20, "two"),
    ],
)
def test_grow_follows_the_topology_policy(policy: str, to: int, outcome: str) -> None:
    """The issue's example: ``{1,33}`` grown to 16 CPUs under single-numa-node is refused."""
    e = make(cpus=True, policy=policy, memory_static=False)
    base = admit(e, classic("p", guaranteed("c", 2000, GI)), "c").cpus
    assert base == CPUSet([1, 33])
    call = lambda: resize_container(e, "p", guaranteed("c", to * 1000, GI))  # noqa: E731
    if outcome == "refused":
        refused(e, call, TOPOLOGY_AFFINITY_ERROR, TOPOLOGY_AFFINITY_MESSAGE)
        return
    grown, _ = call()
    nodes = {numa_of(c) for c in grown.cpus}
    assert base <= grown.cpus and len(grown.cpus) == to
    if outcome == "node":
        assert nodes == {0}
    elif outcome == "two":
        assert len(nodes) == 2 and 0 in nodes
    assert e.verify() == []


@pytest.mark.parametrize("policy", ["single-numa-node", "restricted", "best-effort"])
def test_grow_whose_cpus_leave_the_memory_numa_nodes_is_refused(policy: str) -> None:
    """With the Memory Manager's Static policy the memory stays where it is: CPUs that would
    leave its NUMA nodes are refused under every aligning policy (the PR's memory check)."""
    e = make(cpus=True, policy=policy)
    base = admit(e, classic("p", guaranteed("c", 2000, GI)), "c")
    assert base.mems == CPUSet([0])
    target = 20 if policy == "restricted" else 16
    refused(
        e,
        lambda: resize_container(e, "p", guaranteed("c", target * 1000, GI)),
        TOPOLOGY_AFFINITY_ERROR,
        TOPOLOGY_AFFINITY_MESSAGE,
    )
    grown, _ = resize_container(e, "p", guaranteed("c", 12000, GI))
    assert {numa_of(c) for c in grown.cpus} == {0} and grown.mems == base.mems


def budget_pod(e: Engine, uid: str, cpus: int, slice_cpus: int = 2) -> None:
    res = {"cpu": cpus * 1000, "memory": 4 * GI}
    pod = PodSpec(uid=uid, name=uid, requests=res, limits=res)
    e.admit_sandbox(pod)
    e.add_container(pod, guaranteed("main", slice_cpus * 1000))
    e.add_container(pod, ContainerSpec("sidecar"))


def resize_budget(e: Engine, uid: str, cpus: int) -> object:
    res = {"cpu": cpus * 1000, "memory": 4 * GI}
    return resize_pod(e, uid, res, res)


def test_pod_budget_resize_needs_its_gate() -> None:
    e = make("pod", cpus=True, pod_level=False)
    budget_pod(e, "p", 4)
    refused(e, lambda: resize_budget(e, "p", 6), INFEASIBLE, POD_LEVEL_GATE_MESSAGE)


@pytest.mark.parametrize("scope", ["pod", "container"])
def test_pod_budget_resize_keeps_cpus_and_memory_by_default(scope: str) -> None:
    """Kubelet 1.37: admitted (gate on by default), the managers leave their allocations."""
    e = make(scope)
    budget_pod(e, "p", 4)
    before = {n: e.assignment("p", n) for n in ("main", "sidecar")}
    bubble, default = e.pod_cpus("p"), e.node_shared_pool()
    assert resize_budget(e, "p", 6) == {}
    res = {"cpu": 3000, "memory": 5 * GI}
    assert resize_pod(e, "p", res, res) == {}
    assert {n: e.assignment("p", n) for n in ("main", "sidecar")} == before
    assert e.pod_cpus("p") == bubble and e.node_shared_pool() == default
    known = e.pod_so_far("p")
    assert known is not None and known.requests == res
    refused(
        e,
        lambda: resize_budget(e, "p", 64),
        INFEASIBLE,
        "Node didn't have enough capacity: cpu, requested: 64000, capacity: 63000",
    )
    assert e.verify() == []


def test_pod_budget_grows_and_shrinks_through_its_shared_pool() -> None:
    e = make("pod", budget_cpus=True)
    budget_pod(e, "p", 4)
    main = e.assignment("p", "main")
    bubble = e.pod_cpus("p")
    assert main is not None and bubble is not None
    changes = resize_budget(e, "p", 6)
    grown = e.pod_cpus("p")
    assert grown is not None and len(grown) == 6 and bubble <= grown
    assert e.assignment("p", "main") == main
    sidecar = e.assignment("p", "sidecar")
    assert sidecar is not None and sidecar.cpus == grown - main.cpus
    assert changes[("p", "sidecar")] == sidecar  # type: ignore[index]
    assert len({numa_of(c) for c in grown}) == 1
    resize_budget(e, "p", 3)
    shrunk = e.pod_cpus("p")
    assert shrunk is not None and len(shrunk) == 3 and main.cpus <= shrunk
    assert e.assignment("p", "sidecar").cpus == shrunk - main.cpus  # type: ignore[union-attr]
    assert e.verify() == []


def test_pod_budget_grow_follows_the_topology_policy() -> None:
    """The issue's example for a budget: growing past the pod's NUMA node under
    single-numa-node is refused; the budget stays on its node otherwise."""
    e = make("pod", budget_cpus=True)
    budget_pod(e, "p", 4)
    bubble = e.pod_cpus("p")
    assert bubble is not None
    refused(e, lambda: resize_budget(e, "p", 16), TOPOLOGY_AFFINITY_ERROR)
    resize_budget(e, "p", 15)
    grown = e.pod_cpus("p")
    assert grown is not None and {numa_of(c) for c in grown} == {numa_of(min(bubble))}


def test_pod_budget_refusals_keep_the_slices_and_the_shared_pool() -> None:
    e = make("pod", budget_cpus=True)
    budget_pod(e, "p", 4)
    refused(
        e,
        lambda: resize_budget(e, "p", 2),
        EMPTY_POD_SHARED_POOL_ERROR,
        "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no "
        "cpus for shared containers",
    )
    refused(
        e,
        lambda: resize_budget(e, "p", 1),
        EMPTY_POD_SHARED_POOL_ERROR,
        "pod rejected, exclusive container requests 2 cpus, but only 1 available in the pod budget",
    )


@pytest.mark.parametrize("scope", ["pod", "container"])
def test_pod_level_slices_and_shared_containers(scope: str) -> None:
    e = make(scope, cpus=True)
    budget_pod(e, "p", 4)
    refused(
        e,
        lambda: resize_container(e, "p", guaranteed("main", 3000)),
        INFEASIBLE,
        POD_LEVEL_SLICE_MESSAGE,
    )
    pool = e.assignment("p", "sidecar")
    quota_only = ContainerSpec("sidecar", limits={"cpu": 1500})
    assignment, changes = resize_container(e, "p", quota_only)
    assert assignment == pool and changes == {}
    d = make(scope)
    budget_pod(d, "p", 4)
    refused(
        d,
        lambda: resize_container(d, "p", guaranteed("main", 3000)),
        INFEASIBLE,
        CPU_STATIC_MESSAGE,
    )


def test_resized_state_survives_snapshot_and_restore() -> None:
    e = make(cpus=True)
    base = admit(e, classic("p", guaranteed("c", 2000)), "c").cpus
    resize_container(e, "p", guaranteed("c", 4000))
    again = Engine.restore(e.topology, e.config, json.loads(state(e)))
    assert state(again) == state(e)
    back, _ = resize_container(again, "p", guaranteed("c", 2000))
    assert back.cpus == base
    assert again.verify() == []
    held = again.assignment("p", "c")
    assert held is not None and held.cpus == base and isinstance(held.cpus, CPUSet)
