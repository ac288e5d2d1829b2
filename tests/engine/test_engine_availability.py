"""free_per_numa: the engine's free resources per NUMA node, checked against the allocations
the engine reports (exclusive CPUs, pod budgets, memory blocks) and against what it admits."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.config.file import parse_config
from nri_plrm.engine.availability import free_per_numa, free_per_numa_to_dict
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AdmissionError, PodSpec
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.synthetic import synthetic_topology
from nri_plrm.translate.manifest_to_pod import load_manifests, parse_manifests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
CONTAINER_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "container"\n'
HUGE_MACHINE = (
    "sockets=2,numa_per_socket=1,cores_per_numa=4,threads_per_core=2,memory_per_numa=16Gi,"
    "hugepages_2Mi_per_numa=512,hugepages_1Gi_per_numa=2"
)
GI = 1 << 30
MI = 1 << 20


def engine(config: str, machine: str = "default") -> Engine:
    topology = synthetic_topology(HUGE_MACHINE) if machine == "huge" else MACHINES[machine]
    return Engine(topology, parse_config(config).engine_config())


def example(name: str) -> PodSpec:
    (pod,) = load_manifests([EXAMPLES / f"{name}.yaml"])
    return pod


def guaranteed(name: str, cpu: str, memory: str, extra: str = "") -> PodSpec:
    text = f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - name: app
    resources:
      requests: {{cpu: "{cpu}", memory: "{memory}"{extra}}}
      limits: {{cpu: "{cpu}", memory: "{memory}"{extra}}}
"""
    (pod,) = parse_manifests(text)
    return pod


def held_cpus(e: Engine) -> CPUSet:
    """CPUs the engine's allocations hold: exclusive containers plus pod budgets."""
    held = CPUSet()
    for a in e.assignments().values():
        if a.exclusive:
            held |= a.cpus
    for uid in e.pods():
        held |= e.pod_cpus(uid) or CPUSet()
    return held


def held_memory(e: Engine, node: int, resource: str) -> int:
    """Bytes the engine's single-node memory blocks charge to ``node``: a pod budget's blocks
    (its containers' slices come out of it), else its containers' own blocks."""
    total = 0
    for uid in e.pods():
        blocks = list(e.pod_memory(uid))
        if not blocks:
            for (owner, _), a in e.assignments().items():
                if owner == uid:
                    blocks += a.memory
        total += sum(b.size for b in blocks if b.numa_nodes == (node,) and b.resource == resource)
    return total


def check_against_allocations(e: Engine) -> None:
    topo = e.topology
    reserved = e.cpu_manager.reserved_cpus
    held = held_cpus(e)
    for numa in free_per_numa(e):
        cpus = topo.numa_nodes[numa.node].cpus
        cpu = numa.resource("cpu")
        assert cpu is not None
        assert cpu.capacity == len(cpus)
        assert cpu.allocatable == len(cpus - reserved)
        assert cpu.available == len(cpus - reserved - held), numa.node
        for r in numa.resources[1:]:
            assert r.capacity == topo.memory_of(numa.node, r.name)
            assert r.available == r.allocatable - held_memory(e, numa.node, r.name), (
                numa.node,
                r.name,
            )


def test_empty_node_reports_everything_allocatable_as_available() -> None:
    e = engine(POD_SCOPE, "huge")
    free = free_per_numa(e)
    assert [n.node for n in free] == [0, 1]
    assert [r.name for r in free[0].resources] == [
        "cpu",
        "memory",
        "hugepages-1Gi",
        "hugepages-2Mi",
    ]
    as_dict = free_per_numa_to_dict(free)
    # CPU 0 reserved; 512Mi of memory reserved on node 0; memory excludes the hugepages
    assert as_dict["0"]["cpu"] == {"capacity": 8, "allocatable": 7, "available": 7}
    assert as_dict["1"]["cpu"] == {"capacity": 8, "allocatable": 8, "available": 8}
    hugepages = 2 * GI + 512 * 2 * MI
    assert as_dict["0"]["memory"] == {
        "capacity": 16 * GI,
        "allocatable": 16 * GI - 512 * MI - hugepages,
        "available": 16 * GI - 512 * MI - hugepages,
    }
    assert as_dict["1"]["hugepages-1Gi"] == {
        "capacity": 2 * GI,
        "allocatable": 2 * GI,
        "available": 2 * GI,
    }


@pytest.mark.parametrize("config", [POD_SCOPE, CONTAINER_SCOPE])
def test_exclusive_containers_pod_budgets_and_hugepages_are_carved_out(config: str) -> None:
    e = engine(config, "huge")
    e.admit_pod(guaranteed("db", "4", "2Gi", ', hugepages-1Gi: "1Gi"'))
    e.admit_pod(guaranteed("web", "500m", "1Gi"))  # shared: holds no CPU, no NUMA memory
    check_against_allocations(e)
    free = free_per_numa_to_dict(free_per_numa(e))
    assert sum(free[n]["cpu"]["available"] for n in free) == 15 - 4
    assert sum(free[n]["hugepages-1Gi"]["available"] for n in free) == 3 * GI


def test_seed_pods_with_pod_budgets_and_shared_pools() -> None:
    e = engine(POD_SCOPE)
    for name in ("pod-scope-mixed", "tightly-coupled-database", "classic-guaranteed"):
        e.admit_pod(example(name))
    check_against_allocations(e)
    # the pod-level pod's budget (4 CPUs: 2 exclusive + a pod shared pool of 2) is gone whole
    bubble = e.pod_cpus(example("pod-scope-mixed").uid)
    assert bubble is not None and len(bubble) == 4


def test_available_is_what_the_engine_admits() -> None:
    """A NUMA node reporting N available CPUs admits an N-CPU single-numa-node pod, and N+1
    is refused everywhere once every node reports fewer."""
    e = engine(CONTAINER_SCOPE, "huge")
    e.admit_pod(guaranteed("a", "6", "1Gi"))
    free = free_per_numa(e)
    most = max(n.resource("cpu").available for n in free)  # type: ignore[union-attr]
    with pytest.raises(AdmissionError):
        e.admit_pod(guaranteed("too-big", str(most + 1), "1Gi"))
    e.admit_pod(guaranteed("fits", str(most), "1Gi"))
    check_against_allocations(e)


def test_release_gives_everything_back() -> None:
    e = engine(POD_SCOPE)
    before = free_per_numa(e)
    for name in ("pod-scope-mixed", "tightly-coupled-database"):
        e.admit_pod(example(name))
    assert free_per_numa(e) != before
    for name in ("pod-scope-mixed", "tightly-coupled-database"):
        e.remove_pod(example(name).uid)
    assert free_per_numa(e) == before


def test_restored_engine_reports_the_same() -> None:
    e = engine(POD_SCOPE)
    for name in ("pod-scope-mixed", "classic-guaranteed"):
        e.admit_pod(example(name))
    again = Engine.restore(e.topology, e.config, e.snapshot())
    assert free_per_numa(again) == free_per_numa(e)
