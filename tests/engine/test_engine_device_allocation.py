"""The simulated kubelet's device allocation (``simulate --devices``): devices handed out at
admission as the kubelet's Device Manager does under its own Topology Manager policy."""

from __future__ import annotations

import pytest

from nri_plrm.engine.device_allocation import KubeletDeviceAllocator
from nri_plrm.engine.spec import (
    TOPOLOGY_AFFINITY_ERROR,
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    ContainerKind,
    ContainerSpec,
    Device,
    PodSpec,
)
from nri_plrm.topology.machines import MACHINES

GPU = "nvidia.com/gpu"
TOPOLOGY = MACHINES["default"]  # 4 NUMA nodes


def gpus(*nodes: int) -> tuple[Device, ...]:
    return tuple(Device(f"gpu{i}", (n,)) for i, n in enumerate(nodes))


def asks(name: str, n: int, kind: ContainerKind = ContainerKind.APP) -> ContainerSpec:
    return ContainerSpec(name, kind=kind, limits={GPU: n}, requests={GPU: n})


def pod(uid: str, *containers: ContainerSpec) -> PodSpec:
    return PodSpec(uid=uid, name=uid, containers=containers)


def ids(allocation: dict[str, dict[str, tuple[Device, ...]]], name: str) -> list[str]:
    return [d.id for d in allocation[name][GPU]]


def test_policy_none_takes_devices_in_order_and_frees_them_with_the_pod() -> None:
    k = KubeletDeviceAllocator(TOPOLOGY, {GPU: gpus(2, 0, 1)}, "none", "container")
    first = k.admit(pod("a", asks("c", 2)))
    assert ids(first, "c") == ["gpu1", "gpu2"]  # NUMA order: node 0, then node 1
    assert [d.id for d in k.free(GPU)] == ["gpu0"]
    with pytest.raises(AdmissionError) as info:
        k.admit(pod("b", asks("c", 2)))
    assert info.value.reason == UNEXPECTED_ADMISSION_ERROR
    assert (
        "requested number of devices unavailable for nvidia.com/gpu. Requested: 2, Available: 1"
        in info.value.message
    )
    assert [d.id for d in k.free(GPU)] == ["gpu0"]  # a refusal holds nothing
    k.release("a")
    assert len(k.free(GPU)) == 3


@pytest.mark.parametrize("scope", ["container", "pod"])
def test_single_numa_node_keeps_a_pods_devices_on_one_node_or_refuses(scope: str) -> None:
    k = KubeletDeviceAllocator(TOPOLOGY, {GPU: gpus(0, 1, 1)}, "single-numa-node", scope)
    assert ids(k.admit(pod("a", asks("c", 2))), "c") == ["gpu1", "gpu2"]
    with pytest.raises(AdmissionError) as info:
        k.admit(pod("b", asks("c", 2)))  # one free GPU left
    assert info.value.reason == TOPOLOGY_AFFINITY_ERROR


def test_best_effort_prefers_one_node_then_spills() -> None:
    k = KubeletDeviceAllocator(TOPOLOGY, {GPU: gpus(0, 1, 1, 3)}, "best-effort", "container")
    assert ids(k.admit(pod("a", asks("c", 2))), "c") == ["gpu1", "gpu2"]
    assert ids(k.admit(pod("b", asks("c", 2))), "c") == ["gpu0", "gpu3"]


def test_app_containers_reuse_an_init_containers_devices() -> None:
    k = KubeletDeviceAllocator(TOPOLOGY, {GPU: gpus(0, 0)}, "none", "container")
    spec = PodSpec(
        uid="p",
        name="p",
        init_containers=(asks("prep", 1, ContainerKind.INIT),),
        containers=(asks("main", 2),),
    )
    allocation = k.admit(spec)
    assert ids(allocation, "prep") == ["gpu0"]
    assert sorted(ids(allocation, "main")) == ["gpu0", "gpu1"]
    assert k.free(GPU) == []


def test_pods_without_device_requests_get_nothing() -> None:
    k = KubeletDeviceAllocator(TOPOLOGY, {GPU: gpus(0)}, "single-numa-node", "pod")
    assert k.admit(pod("a", ContainerSpec("c", limits={"cpu": 1000}))) == {}
    assert len(k.free(GPU)) == 1
