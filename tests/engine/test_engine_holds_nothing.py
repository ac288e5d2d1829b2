"""The classic container path's shortcut for containers that can hold nothing (issue 28,
finding 8): which containers take it, and that they are stored as the full path stores them."""

from __future__ import annotations

import pytest

from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.facade import Engine, EngineConfig
from nri_plrm.engine.holds_nothing import holds_nothing
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.spec import ContainerSpec, Device, PodSpec, TopologyHint
from nri_plrm.engine.topology_manager import TopologyManagerConfig
from nri_plrm.topology.synthetic import synthetic_topology

GI = 1024**3
TWO_NUMA = "sockets=2,numa_per_socket=1,cores_per_numa=4,threads_per_core=2,memory_per_numa=8Gi"
GPU = "nvidia.com/gpu"
ONE = {"cpu": 1000, "memory": GI}


def _engine(policy: str, scope: str) -> Engine:
    config = EngineConfig(
        topology_manager=TopologyManagerConfig(policy, scope),
        cpu_manager=CPUManagerConfig(reserved_cpu_count=1),
        memory_manager=MemoryManagerConfig(reserved={0: {"memory": GI}}),
    )
    e = Engine(synthetic_topology(TWO_NUMA), config)
    e.device_manager.set_node_devices({GPU: [(0,), (1,)]})
    return e


def test_which_containers_hold_nothing() -> None:
    plain = ContainerSpec("c")
    assert holds_nothing(PodSpec(uid="p"), plain)
    assert holds_nothing(PodSpec(uid="p"), ContainerSpec("c", requests={"cpu": 100}))
    assert not holds_nothing(PodSpec(uid="p"), ContainerSpec("c", requests=ONE, limits=ONE))
    assert not holds_nothing(PodSpec(uid="p", requests=ONE, limits=ONE), plain)
    assert not holds_nothing(PodSpec(uid="p", devices={"c": {GPU: (Device("g", (1,)),)}}), plain)
    assert not holds_nothing(PodSpec(uid="p"), ContainerSpec("c", devices={GPU: (Device("g"),)}))


@pytest.mark.parametrize("policy", ("best-effort", "restricted", "single-numa-node"))
def test_a_best_effort_container_holding_a_gpu_is_aligned_to_it(policy: str) -> None:
    """No requests but a GPU on NUMA 1: the device's hint is merged (not the shortcut's)."""
    e = _engine(policy, "container")
    gpu = {"c": {GPU: (Device("gpu-1", (1,)),)}}
    e.admit_sandbox(PodSpec(uid="p", devices=gpu), None)
    sandbox = e.pod_so_far("p")
    assert sandbox is not None
    e.add_container(sandbox, ContainerSpec("c"))
    assert e.topology_manager.get_affinity("p", "c") == TopologyHint(0b10, True)


@pytest.mark.parametrize("scope", ("container", "pod"))
@pytest.mark.parametrize("policy", ("none", "best-effort", "restricted", "single-numa-node"))
def test_a_container_holding_nothing_is_stored_as_the_full_path_stores_it(
    policy: str, scope: str
) -> None:
    """Beside a Guaranteed container: the same hint, assignment and snapshot as the
    providers' own answers (asked directly) give."""
    e = _engine(policy, scope)
    pod = PodSpec(uid="p", containers=(ContainerSpec("g", requests=ONE, limits=ONE),))
    e.admit_sandbox(PodSpec(uid="p"), {"cpu": 1000, "memory": GI})
    for ctr in (pod.containers[0], ContainerSpec("be")):
        sandbox = e.pod_so_far("p")
        assert sandbox is not None
        e.add_container(sandbox, ctr)
    spec = e.pod_so_far("p")
    assert spec is not None
    tm, be = e.topology_manager, spec.containers[1]
    providers = (e.cpu_manager, e.memory_manager, e.device_manager)
    assert all(not p.get_topology_hints(spec, be) for p in providers)
    if policy == "none":
        assert tm.get_affinity("p", "be") == TopologyHint(None, False)
    elif scope == "container":
        assert tm.get_affinity("p", "be") == tm.container_hint(spec, be, providers)
    else:
        assert tm.get_affinity("p", "be") == tm.get_affinity("p", "g")
    got = e.assignment("p", "be")
    assert got is not None and got.cpus == e.cpu_manager.default_cpuset
