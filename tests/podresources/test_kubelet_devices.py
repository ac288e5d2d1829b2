"""Reading a pod's devices from the kubelet's PodResources replies, and the lookup's bounds:
inventory refreshed after its TTL only, a missing kubelet counted as failed and warned."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from fake_kubelet import FakeKubelet

from nri_plrm.engine.device_manager import DeviceManager
from nri_plrm.engine.spec import Device
from nri_plrm.podresources.devices import (
    INVENTORY_TTL,
    KubeletDevices,
    containers_devices,
    node_devices,
)
from nri_plrm.proto import podresources_api_pb2 as pb
from nri_plrm.topology.machines import MACHINES

GPU = "nvidia.com/gpu"
NIC = "intel.com/sriov"


def entry(resource: str, ids: list[str], nodes: list[int] | None) -> pb.ContainerDevices:
    topology = None if nodes is None else pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in nodes])
    return pb.ContainerDevices(resource_name=resource, device_ids=ids, topology=topology)


def test_get_reply_gives_each_containers_devices_with_their_numa_nodes() -> None:
    train = pb.ContainerResources(
        name="train",
        devices=[
            entry(GPU, ["gpu-0", "gpu-1"], [1]),
            entry(GPU, ["gpu-2"], [0, 1]),
            entry(NIC, ["vf-3"], None),
        ],
    )
    mesh = pb.ContainerResources(name="mesh", cpu_ids=[3])
    reply = pb.GetPodResourcesResponse(pod_resources=pb.PodResources(containers=[train, mesh]))
    assert containers_devices(reply) == {
        "train": {
            GPU: (Device("gpu-0", (1,)), Device("gpu-1", (1,)), Device("gpu-2", (0, 1))),
            NIC: (Device("vf-3", ()),),
        }
    }
    inventory = pb.AllocatableResourcesResponse(
        devices=[entry(GPU, ["gpu-0", "gpu-1"], [0]), entry(GPU, ["gpu-2"], [1])]
    )
    assert node_devices(inventory) == {GPU: ((0,), (0,), (1,))}


def test_inventory_is_asked_again_only_after_its_ttl(tmp_path: Path) -> None:
    sock = str(tmp_path / "kubelet.sock")
    kubelet = FakeKubelet(
        sock,
        {("ns", "p"): {"c": [(GPU, "gpu-1", (1,))]}},
        [(GPU, "gpu-0", (0,)), (GPU, "gpu-1", (1,))],
    )
    now = [100.0]
    source = KubeletDevices(sock, 1.0, clock=lambda: now[0])
    manager = DeviceManager(MACHINES["default"])

    async def main() -> None:
        assert await source.lookup("ns", "p") == {"c": {GPU: (Device("gpu-1", (1,)),)}}
        source.feed(manager)
        assert manager.node_devices == {GPU: ((0,), (1,))}
        now[0] += INVENTORY_TTL - 1
        assert await source.lookup("ns", "other") == {}
        now[0] += 1
        await source.lookup("ns", "p")
        await source.close()

    try:
        asyncio.run(main())
    finally:
        kubelet.stop()
    assert kubelet.calls.count("GetAllocatableResources") == 2
    assert kubelet.calls.count("Get") == 3


def test_missing_kubelet_is_counted_failed_and_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    results: list[str] = []
    source = KubeletDevices(str(tmp_path / "absent.sock"), 0.1, count=results.append)
    caplog.set_level(logging.WARNING)
    assert asyncio.run(source.lookup("ns", "p")) is None
    assert results == ["failed"]
    (line,) = [r.getMessage() for r in caplog.records if "without device hints" in r.getMessage()]
    assert "pod ns/p" in line and "absent.sock failed (UNAVAILABLE)" in line
