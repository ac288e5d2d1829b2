"""Device NUMA nodes from sysfs: a tree laid out like the kernel's (``/sys/dev`` links into
``/sys/devices``, PCI functions with ``numa_node``, VFIO groups through ``iommu_groups``, network
interfaces through ``class/net``), and this machine's real ``/sys``, where devices without a
NUMA node give no hint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nri_plrm.engine.spec import Device
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.device_numa import DeviceNUMA
from nri_plrm.translate.nri_devices import nri_devices

GPU_FN = "devices/pci0000:00/0000:00:01.0/0000:3b:00.0"
RDMA_FN = "devices/pci0000:80/0000:80:02.0/0000:86:00.0"
NIC_FN = "devices/pci0000:80/0000:80:02.0/0000:86:00.1"
NVME_FN = "devices/pci0000:00/0000:00:03.0/0000:5e:00.0"
VIRTIO_FN = "devices/pci0000:00/0000:00:02.0"
VFIO_FN = "devices/pci0000:ae/0000:ae:00.0/0000:af:00.1"


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def link(root: Path, relative: str, target: str) -> None:
    """A relative symlink at ``relative`` to ``target`` (both under ``root``), as the kernel's."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    (root / target).mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(root / target, path.parent), path)


def kernel_tree(root: Path) -> Path:
    """GPU render node and NVMe disk on NUMA 1, RDMA verbs and a NIC on NUMA 0, a virtio disk
    without NUMA (-1), /dev/null (virtual), a VFIO group of a NUMA 1 function."""
    write(root, f"{GPU_FN}/numa_node", "1")
    link(root, "dev/char/226:128", f"{GPU_FN}/drm/renderD128")
    write(root, f"{RDMA_FN}/numa_node", "0")
    link(root, "dev/char/231:192", f"{RDMA_FN}/infiniband_verbs/uverbs0")
    write(root, f"{NVME_FN}/numa_node", "1")
    link(root, "dev/block/259:0", f"{NVME_FN}/nvme/nvme0/nvme0n1")
    write(root, f"{VIRTIO_FN}/numa_node", "-1")
    link(root, "dev/block/254:0", f"{VIRTIO_FN}/virtio1/block/vda")
    link(root, "dev/char/1:3", "devices/virtual/mem/null")
    write(root, f"{VFIO_FN}/numa_node", "1")
    link(root, "dev/char/243:0", "devices/virtual/vfio/42")
    link(root, "kernel/iommu_groups/42/devices/0000:af:00.1", VFIO_FN)
    write(root, f"{NIC_FN}/numa_node", "0")
    link(root, f"{NIC_FN}/net/ens1f0/device", NIC_FN)
    link(root, "class/net/ens1f0", f"{NIC_FN}/net/ens1f0")
    return root


@pytest.mark.parametrize(
    ("kind", "major", "minor", "expected"),
    [
        ("c", 226, 128, ("drm", (1,))),
        ("c", 231, 192, ("infiniband_verbs", (0,))),
        ("b", 259, 0, ("block", (1,))),
        ("b", 254, 0, ("block", ())),
        ("c", 1, 3, ("mem", ())),
        ("c", 243, 0, ("vfio", (1,))),
        ("c", 999, 1, ("", ())),
        ("p", 226, 128, ("", ())),
    ],
)
def test_devices_on_a_kernel_like_tree(
    tmp_path: Path, kind: str, major: int, minor: int, expected: tuple[str, tuple[int, ...]]
) -> None:
    numa = DeviceNUMA(str(kernel_tree(tmp_path)))
    assert numa.device(kind, major, minor) == expected
    assert numa.device(kind, major, minor) == expected  # cached


def test_network_interfaces(tmp_path: Path) -> None:
    numa = DeviceNUMA(str(kernel_tree(tmp_path)))
    assert numa.net("ens1f0") == ("net", (0,))
    assert numa.net("absent0") == ("net", ())
    assert numa.net("../../etc") == ("net", ())


def container(*devices: tuple[str, str, int, int], net: tuple[str, ...] = ()) -> api.Container:
    c = api.Container(name="train")
    for path, kind, major, minor in devices:
        c.linux.devices.add(path=path, type=kind, major=major, minor=minor)
    for interface in net:
        c.linux.net_devices[interface].name = "net1"
    return c


def test_a_containers_nri_devices_with_a_numa_node(tmp_path: Path) -> None:
    numa = DeviceNUMA(str(kernel_tree(tmp_path)))
    c = container(
        ("/dev/null", "c", 1, 3),
        ("/dev/dri/renderD128", "c", 226, 128),
        ("/dev/infiniband/uverbs0", "c", 231, 192),
        ("/dev/vfio/42", "c", 243, 0),
        ("/dev/vda", "b", 254, 0),
        net=("ens1f0",),
    )
    assert nri_devices(c, numa.device, numa.net) == {
        "linux/drm": (Device("/dev/dri/renderD128", (1,)),),
        "linux/infiniband_verbs": (Device("/dev/infiniband/uverbs0", (0,)),),
        "linux/vfio": (Device("/dev/vfio/42", (1,)),),
        "linux/net": (Device("ens1f0", (0,)),),
    }
    assert nri_devices(container(("/dev/null", "c", 1, 3)), numa.device, numa.net) == {}


def test_a_privileged_container_holds_no_allocation(tmp_path: Path) -> None:
    numa = DeviceNUMA(str(kernel_tree(tmp_path)))
    c = container(("/dev/dri/renderD128", "c", 226, 128))
    c.linux.resources.devices.add(allow=True, access="rwm")
    assert nri_devices(c, numa.device, numa.net) == {}
    one = container(("/dev/dri/renderD128", "c", 226, 128))
    rule = one.linux.resources.devices.add(allow=True, type="c", access="rw")
    rule.major.value, rule.minor.value = 226, 128
    assert nri_devices(one, numa.device, numa.net) == {
        "linux/drm": (Device("/dev/dri/renderD128", (1,)),)
    }


def _nearest_node(path: str) -> tuple[int, ...]:
    current = os.path.realpath(path)
    while current.startswith("/sys/devices/"):
        numa_file = os.path.join(current, "numa_node")
        if os.path.isfile(numa_file):
            node = int(Path(numa_file).read_text())
            return (node,) if node >= 0 else ()
        current = os.path.dirname(current)
    return ()


@pytest.mark.skipif(not os.path.isdir("/sys/dev/char"), reason="no /sys/dev on this machine")
def test_this_machines_sys() -> None:
    """Every device node of this machine's ``/sys``: no NUMA node (virtual, ``-1``) gives
    none, a real one gives exactly it; ``/dev/null`` has none."""
    numa = DeviceNUMA("/sys")
    kinds = {"char": "c", "block": "b"}
    seen = 0
    for directory, kind in kinds.items():
        for entry in sorted(os.listdir(f"/sys/dev/{directory}")):
            major, minor = (int(x) for x in entry.split(":"))
            expected = _nearest_node(f"/sys/dev/{directory}/{entry}")
            assert numa.device(kind, major, minor)[1] == expected, entry
            seen += 1
    assert seen > 0
    assert numa.device("c", 1, 3) == ("mem", ())
    for interface in os.listdir("/sys/class/net"):
        assert numa.net(interface)[1] == _nearest_node(f"/sys/class/net/{interface}/device")
