"""Devices in the alignment: the Device Manager's hints for already allocated devices, merged by
the Topology Manager with the CPU and memory managers' hints, in both scopes and all three
aligning policies.

The hint rows are the kubelet's ``TestGetTopologyHints`` rows for already allocated devices
(devicemanager/topology_hints_test.go, numbers only), on its two NUMA nodes; the
``cross-NUMA`` row's available devices are taken as the allocated ones, which is the same
computation in ``generateDeviceTopologyHints``.
"""

from __future__ import annotations

import pytest

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.availability import ResourceAvailability, free_per_numa
from nri_plrm.engine.cpu_options import CPUManagerConfig
from nri_plrm.engine.device_manager import DeviceManager
from nri_plrm.engine.explain import explain_rejection
from nri_plrm.engine.facade import Engine, EngineConfig
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.engine.spec import (
    TOPOLOGY_AFFINITY_ERROR,
    AdmissionError,
    ContainerSpec,
    Device,
    PodSpec,
    TopologyHint,
)
from nri_plrm.engine.spec_json import spec_from_dict, spec_to_dict
from nri_plrm.engine.topology_manager import TopologyManagerConfig
from nri_plrm.topology.synthetic import synthetic_topology

GI = 1024**3
TWO_NUMA = "sockets=2,numa_per_socket=1,cores_per_numa=4,threads_per_core=2,memory_per_numa=8Gi"
GPU = "nvidia.com/gpu"
ALIGNING = ("best-effort", "restricted", "single-numa-node")
SCOPES = ("container", "pod")
TWO_CPUS = {"cpu": 2000, "memory": GI}
HALF_CPU = {"cpu": 500, "memory": GI // 2}


N0, N1, BOTH = 0b01, 0b10, 0b11


def dev(name: str, *nodes: int) -> Device:
    return Device(name, tuple(nodes))


def manager(inventory: dict[str, list[tuple[int, ...]]] | None = None) -> DeviceManager:
    m = DeviceManager(synthetic_topology(TWO_NUMA))
    if inventory is not None:
        m.set_node_devices(inventory)
    return m


def hint_set(hints: list[TopologyHint] | None) -> set[tuple[int | None, bool]] | None:
    return None if hints is None else {(h.numa_affinity, h.preferred) for h in hints}


# -- the kubelet's rows -------------------------------------------------------------------------

HINT_ROWS = [
    # (row, node inventory, allocated devices, requested, expected (mask, preferred) or None)
    ("no alignment", [(), ()], [dev("Dev1")], 1, None),
    ("one with alignment, allocated", [(), (1,)], [dev("Dev2", 1)], 1, {(N1, True), (BOTH, False)}),
    (
        "all already allocated to container",
        [(0,), (0,)],
        [dev("Dev1", 0), dev("Dev2", 0)],
        2,
        {(N0, True), (BOTH, False)},
    ),
    (
        "optimal on 1 NUMA node, forced cross-NUMA",
        [(0,), (1,), (0,), (1,)],
        [dev("Dev3", 0), dev("Dev4", 1)],
        2,
        {(BOTH, False)},
    ),
    (
        "request for 2, one device per socket",
        [(0,), (1,)],
        [dev("Dev1", 0), dev("Dev2", 1)],
        2,
        {(BOTH, True)},
    ),
    (
        "less already allocated than requested",
        [(0,), (0,), (1,), (1,)],
        [dev("Dev1", 0), dev("Dev2", 0)],
        4,
        set(),
    ),
    (
        "more already allocated than requested",
        [(0,), (0,), (1,), (1,)],
        [dev("Dev1", 0), dev("Dev2", 0), dev("Dev3", 1), dev("Dev4", 1)],
        2,
        set(),
    ),
]


@pytest.mark.parametrize(
    ("inventory", "allocated", "requested", "expected"),
    [row[1:] for row in HINT_ROWS],
    ids=[row[0] for row in HINT_ROWS],
)
def test_regenerated_hints_match_the_kubelet_rows(
    inventory: list[tuple[int, ...]],
    allocated: list[Device],
    requested: int,
    expected: set[tuple[int, bool]] | None,
) -> None:
    m = manager({GPU: inventory})
    container = ContainerSpec("c", limits={GPU: requested}, devices={GPU: tuple(allocated)})
    pod = PodSpec(uid="p", containers=(container,))
    assert hint_set(m.get_topology_hints(pod, container)[GPU]) == expected
    # Pod scope regenerates from the pod's devices the same way (request = their count).
    if len(allocated) == requested:
        assert hint_set(m.get_pod_topology_hints(pod)[GPU]) == expected


def test_a_device_without_topology_among_aligned_ones_fits_no_mask() -> None:
    """``generateDeviceTopologyHints`` counts a device only where a mask holds one of its nodes:
    an allocated device with no topology, of a resource whose other devices have one, leaves
    no mask holding every allocated device."""
    m = manager({GPU: [(), (1,)]})
    container = ContainerSpec("c", devices={GPU: (dev("Dev1"),)})
    assert m.get_topology_hints(PodSpec(uid="p"), container) == {GPU: []}


def test_without_inventory_the_allocated_devices_stand_for_the_node() -> None:
    m = manager()
    pod = PodSpec(uid="p", devices={"c": {GPU: (dev("a", 1),)}})
    assert hint_set(m.get_topology_hints(pod, ContainerSpec("c"))[GPU]) == {
        (N1, True),
        (BOTH, False),
    }
    assert m.get_topology_hints(pod, ContainerSpec("other")) == {}


def test_pod_devices_are_counted_once_across_containers() -> None:
    shared = dev("gpu-0", 1)
    pod = PodSpec(
        uid="p",
        devices={"init": {GPU: (shared,)}, "app": {GPU: (shared, dev("gpu-1", 1))}},
    )
    hints = manager({GPU: [(0,), (0,), (1,), (1,)]}).get_pod_topology_hints(pod)
    assert hint_set(hints[GPU]) == {(N1, True), (BOTH, False)}


# -- merged with the CPU and memory managers -------------------------------------------------


def engine(policy: str, scope: str) -> Engine:
    config = EngineConfig(
        topology_manager=TopologyManagerConfig(policy, scope),
        cpu_manager=CPUManagerConfig(reserved_cpu_count=1),
        memory_manager=MemoryManagerConfig(reserved={0: {"memory": GI}}),
    )
    e = Engine(synthetic_topology(TWO_NUMA), config)
    e.device_manager.set_node_devices({GPU: [(0,), (1,)]})
    return e


def gpu_pod(*gpus: Device, pod_level: bool = False) -> PodSpec:
    container = ContainerSpec("train", requests=TWO_CPUS, limits=TWO_CPUS)
    mesh = ContainerSpec("mesh", requests=HALF_CPU, limits=HALF_CPU)
    return PodSpec(
        uid="gpu",
        name="trainer",
        containers=(container, mesh),
        devices={"train": {GPU: gpus}} if gpus else {},
        requests=TWO_CPUS if pod_level else None,
        limits=TWO_CPUS if pod_level else None,
    )


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("policy", ALIGNING)
def test_gpu_on_numa_1_brings_cpus_and_memory_to_numa_1(policy: str, scope: str) -> None:
    """Without the GPU the node's first fitting NUMA node (0) is chosen; with it, NUMA 1."""
    e = engine(policy, scope)
    numa1 = e.topology.cpus_in_numa(1)
    e.admit_pod(gpu_pod(dev("gpu-1", 1)))
    got = e.assignment("gpu", "train")
    assert got is not None and len(got.cpus) == 2 and got.cpus <= numa1
    assert got.mems == CPUSet([1])
    plain = engine(policy, scope)
    plain.admit_pod(gpu_pod())
    before = plain.assignment("gpu", "train")
    assert before is not None and before.cpus <= plain.topology.cpus_in_numa(0)


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("policy", ALIGNING)
def test_gpu_on_numa_1_over_nri_increments(policy: str, scope: str) -> None:
    """The incremental path (sandbox, then containers) aligns the same way, for a classic
    pod (the devices come with the sandbox) and a pod-level one (its budget)."""
    for pod_level in (False, True):
        e = engine(policy, scope)
        pod = gpu_pod(dev("gpu-1", 1), pod_level=pod_level)
        aggregate = None if pod_level else TWO_CPUS
        e.admit_sandbox(
            PodSpec(uid=pod.uid, devices=pod.devices, requests=pod.requests, limits=pod.limits),
            aggregate,
        )
        sandbox = e.pod_so_far(pod.uid)
        assert sandbox is not None
        got, _ = e.add_container(sandbox, pod.containers[0])
        assert got.cpus <= e.topology.cpus_in_numa(1), (pod_level, got)
        assert got.mems == CPUSet([1])


@pytest.mark.parametrize("scope", SCOPES)
def test_gpus_on_both_nodes_are_refused_under_single_numa_node(scope: str) -> None:
    e = engine("single-numa-node", scope)
    pod = gpu_pod(dev("gpu-0", 0), dev("gpu-1", 1))
    with pytest.raises(AdmissionError) as err:
        e.admit_pod(pod)
    assert err.value.reason == TOPOLOGY_AFFINITY_ERROR
    assert err.value.message == "Resources cannot be allocated with Topology locality"
    assert e.assignments() == {} and e.verify() == []
    cause = explain_rejection(e, pod, err.value)
    assert "gpu-0 (NUMA 0)" in cause and "gpu-1 (NUMA 1)" in cause and GPU in cause
    assert "single-numa-node" in cause


def test_gpus_on_both_nodes_restricted_and_best_effort() -> None:
    """Two GPUs, one per node, on a node with one GPU per node: {0,1} is the only (and
    preferred) device hint, while 2 CPUs prefer one node: no merged hint is preferred, so
    restricted refuses as the kubelet does, and best-effort admits on {0,1}."""
    pod = gpu_pod(dev("gpu-0", 0), dev("gpu-1", 1))
    e = engine("restricted", "container")
    with pytest.raises(AdmissionError) as err:
        e.admit_pod(pod)
    assert err.value.reason == TOPOLOGY_AFFINITY_ERROR
    assert "gpu-0 (NUMA 0), gpu-1 (NUMA 1)" in explain_rejection(e, pod, err.value)
    e = engine("best-effort", "container")
    e.admit_pod(pod)
    got = e.assignment("gpu", "train")
    assert got is not None and len(got.cpus) == 2
    assert e.topology_manager.get_affinity("gpu", "train") == TopologyHint(BOTH, False)


def test_restricted_refuses_gpus_split_when_one_node_holds_enough() -> None:
    e = engine("restricted", "pod")
    e.device_manager.set_node_devices({GPU: [(0,), (0,), (1,), (1,)]})
    pod = gpu_pod(dev("gpu-0", 0), dev("gpu-2", 1))
    with pytest.raises(AdmissionError) as err:
        e.admit_pod(pod)
    assert err.value.reason == TOPOLOGY_AFFINITY_ERROR
    assert "restricted" in explain_rejection(e, pod, err.value)
    best = engine("best-effort", "pod")
    best.device_manager.set_node_devices({GPU: [(0,), (0,), (1,), (1,)]})
    best.admit_pod(pod)  # best-effort admits the non-preferred hint


def test_policy_none_ignores_devices() -> None:
    e = engine("none", "container")
    e.admit_pod(gpu_pod(dev("gpu-0", 0), dev("gpu-1", 1)))
    assert e.assignment("gpu", "train") is not None


def test_a_device_pod_shared_container_keeps_the_node_pool() -> None:
    """A BestEffort container holding a GPU takes no CPUs (it is merged, then allocates
    nothing); under single-numa-node its split GPUs still refuse it, as the kubelet does."""
    e = engine("single-numa-node", "container")
    pod = PodSpec(uid="be", containers=(ContainerSpec("c"),), devices={"c": {GPU: (dev("g", 1),)}})
    e.admit_pod(pod)
    got = e.assignment("be", "c")
    assert got is not None and got.cpus == e.node_shared_pool()
    split = PodSpec(
        uid="be2",
        containers=(ContainerSpec("c"),),
        devices={"c": {GPU: (dev("g0", 0), dev("g1", 1))}},
    )
    with pytest.raises(AdmissionError):
        e.admit_pod(split)


def test_devices_survive_the_spec_json_and_absent_ones_add_nothing() -> None:
    pod = gpu_pod(dev("gpu-1", 1))
    assert spec_from_dict(spec_to_dict(pod)).devices == pod.devices
    assert "devices" not in spec_to_dict(gpu_pod())
    container = ContainerSpec("c", devices={GPU: (dev("x", 0, 1),)})
    assert spec_from_dict(spec_to_dict(PodSpec(uid="u", containers=(container,)))).containers[
        0
    ].devices == {GPU: (dev("x", 0, 1),)}


def test_the_kubelets_devices_win_over_the_containers_own() -> None:
    """A container's own device nodes (NRI) stand for its devices only when the kubelet
    listed none for it; the pod's devices count each container once."""
    m = manager()
    own = {"linux/drm": (dev("/dev/dri/renderD128", 0),)}
    listed = ContainerSpec("c", devices=own)
    alone = ContainerSpec("d", devices=own)
    pod = PodSpec(uid="p", containers=(listed, alone), devices={"c": {GPU: (dev("gpu-1", 1),)}})
    assert set(m.get_topology_hints(pod, listed)) == {GPU}
    assert set(m.get_topology_hints(pod, alone)) == {"linux/drm"}
    assert set(m.get_pod_topology_hints(pod)) == {GPU, "linux/drm"}


def test_free_per_numa_counts_devices_per_zone_as_nfd_does() -> None:
    """Device resources of the node's inventory appear per NUMA node (capacity = allocatable =
    the devices there, available = those no admitted pod holds); nothing without inventory."""
    e = engine("single-numa-node", "pod")
    e.device_manager.set_node_devices({GPU: [(0,), (1,), (1,)], "example.com/nic": [()]})
    before = {n.node: n.resource(GPU) for n in free_per_numa(e)}
    assert before[0] == ResourceAvailability(GPU, 1, 1, 1)
    assert before[1] == ResourceAvailability(GPU, 2, 2, 2)
    assert all(n.resource("example.com/nic") is None for n in free_per_numa(e))
    e.admit_pod(gpu_pod(dev("gpu-1", 1)))
    after = {n.node: n.resource(GPU) for n in free_per_numa(e)}
    assert after[0] == ResourceAvailability(GPU, 1, 1, 1)
    assert after[1] == ResourceAvailability(GPU, 2, 2, 1)
    e.remove_pod("gpu")
    assert {n.node: n.resource(GPU) for n in free_per_numa(e)} == before
    plain = engine("single-numa-node", "pod")
    plain.device_manager.set_node_devices({})
    assert all(len(n.resources) == 2 for n in free_per_numa(plain))
