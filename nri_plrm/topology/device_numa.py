"""The NUMA node of a device node or a network interface, read from sysfs as the kernel lays it
out.

``/sys/dev/{char,block}/MAJ:MIN`` links to the device's directory under ``/sys/devices``; its
closest ancestor with a ``numa_node`` file (the PCI function: a GPU's DRM node, an RDMA verbs
device, an NVMe disk) gives the node, ``-1`` meaning "no NUMA affinity". A VFIO group node
(``/dev/vfio/N``, a virtual device) stands for the PCI devices of IOMMU group ``N``
(``/sys/kernel/iommu_groups/N/devices``). A network interface: ``/sys/class/net/IF/device``.
Devices without a NUMA node (virtual devices, ``-1``, missing entries) have none: ``()``.

Answers are kept (a device's node does not change while it exists) in a bounded cache.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict

KINDS = {"c": "char", "b": "block"}
"""NRI/OCI device types with a ``/sys/dev`` directory."""
CACHED = 4096
"""Answers kept, the oldest dropped first."""

Located = tuple[str, tuple[int, ...]]
"""The device's class (``block`` for block devices, else the sysfs directory a character
device is listed in: ``drm``, ``infiniband_verbs``, ``vfio``; ``net`` for an interface) and its
NUMA nodes (empty: none)."""


PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
"""A PCI bus address in extended BDF notation (domain:bus:device.function), lower case."""


class DeviceNUMA:
    """Reads device NUMA nodes under a sysfs root (``[topology] sysfs_root``)."""

    def __init__(self, sysfs_root: str) -> None:
        self.root = os.path.realpath(sysfs_root)
        self._devices = os.path.join(self.root, "devices")
        self._cache: OrderedDict[tuple[str, int, int] | str, Located] = OrderedDict()

    def device(self, kind: str, major: int, minor: int) -> Located:
        """A device node's class and NUMA nodes (``kind``: ``c`` or ``b``)."""
        key = (kind, major, minor)
        found = self._cache.get(key)
        if found is None:
            found = self._keep(key, self._device(kind, major, minor))
        return found

    def net(self, interface: str) -> Located:
        """A host network interface's class (``net``) and NUMA nodes."""
        found = self._cache.get(interface)
        if found is None:
            if "/" in interface or interface in ("", ".", ".."):
                return ("net", ())
            link = os.path.join(self.root, "class", "net", interface, "device")
            found = self._keep(interface, ("net", self._nodes_up(link)))
        return found

    def pci(self, bus_id: str) -> tuple[int, ...]:
        """A PCI device's NUMA nodes by its bus address (``0000:3b:00.0``; empty: none, or
        not a PCI address of this machine)."""
        key = f"pci:{bus_id}"
        found = self._cache.get(key)
        if found is None:
            nodes: tuple[int, ...] = ()
            if PCI_ADDRESS.fullmatch(bus_id):
                nodes = self._nodes_up(os.path.join(self.root, "bus", "pci", "devices", bus_id))
            found = self._keep(key, ("pci", nodes))
        return found[1]

    def _keep(self, key: tuple[str, int, int] | str, found: Located) -> Located:
        if len(self._cache) >= CACHED:
            self._cache.popitem(last=False)
        self._cache[key] = found
        return found

    def _device(self, kind: str, major: int, minor: int) -> Located:
        directory = KINDS.get(kind)
        if directory is None or major < 0 or minor < 0:
            return ("", ())
        path = os.path.realpath(os.path.join(self.root, "dev", directory, f"{major}:{minor}"))
        if not path.startswith(self._devices + os.sep) or not os.path.isdir(path):
            return ("", ())
        parent, name = os.path.split(path)
        cls = directory if kind == "b" else os.path.basename(parent)
        if cls == "vfio" and name.isdigit():
            return (cls, self._iommu_group(name))
        return (cls, self._nodes_up(path))

    def _iommu_group(self, group: str) -> tuple[int, ...]:
        members = os.path.join(self.root, "kernel", "iommu_groups", group, "devices")
        try:
            names = sorted(os.listdir(members))
        except OSError:
            return ()
        nodes = {n for name in names for n in self._nodes_up(os.path.join(members, name))}
        return tuple(sorted(nodes))

    def _nodes_up(self, path: str) -> tuple[int, ...]:
        """The node in the ``numa_node`` file of ``path`` or its closest ancestor that has
        one, below ``/sys/devices``."""
        current = os.path.realpath(path)
        while current.startswith(self._devices + os.sep):
            try:
                with open(os.path.join(current, "numa_node")) as f:
                    text = f.read().strip()
            except FileNotFoundError:
                current = os.path.dirname(current)
                continue
            except OSError:
                return ()
            try:
                node = int(text)
            except ValueError:
                return ()
            return (node,) if node >= 0 else ()
        return ()
