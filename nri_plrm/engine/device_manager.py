"""The Device Manager's hint provider for devices the kubelet already allocated.

The kubelet allocates devices (GPUs, SR-IOV NICs, any device plugin's resources) at admission,
before the sandbox exists; the plugin cannot choose them, it learns them (PodResources ``Get``,
or the container's own device nodes) and aligns CPUs and memory with them. So only the
Device Manager's path for containers whose devices are already allocated applies: the hints
are regenerated from the allocated devices (``GetTopologyHints`` and ``GetPodTopologyHints``
when ``podDevices`` holds the resource), and allocation does nothing.

For each resource, as the kubelet's ``generateDeviceTopologyHints(resource, allocated, {},
requested)``: a NUMA mask is a hint when every allocated device has a node in it (a device
without topology is in no mask); it is preferred when its width is the narrowest one holding
``requested`` devices of the node's whole inventory of that resource. A resource none of whose
devices reports a NUMA node has no preference (``nil``). A count that differs from the request
gives an empty list (the resource cannot be satisfied), as in the kubelet.

The inventory (every device of a resource on the node, :meth:`DeviceManager.set_node_devices`)
comes from PodResources ``GetAllocatableResources``; a resource missing from it is judged on
the allocated devices alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from nri_plrm.engine.bitmask import iterate_bitmasks, mask_of
from nri_plrm.engine.spec import (
    ContainerSpec,
    Device,
    DeviceMap,
    HintMap,
    PodSpec,
    TopologyHint,
)
from nri_plrm.topology.model import Topology

NodeDevices = Mapping[str, "tuple[tuple[int, ...], ...]"]
"""The node's devices per resource name: the NUMA nodes of each device (empty: no topology)."""


def container_devices(pod: PodSpec, container: ContainerSpec) -> DeviceMap:
    """The devices a container holds: the pod's entry for its name (the kubelet's), else the
    container's own (its device nodes)."""
    return pod.devices.get(container.name) or container.devices


def pod_devices(pod: PodSpec) -> dict[str, tuple[Device, ...]]:
    """Every device the pod holds per resource (``podDevices``: each device once), from the
    pod's entries and the own devices of containers without one, in the order first seen."""
    out: dict[str, dict[str, Device]] = {}
    maps: list[DeviceMap] = list(pod.devices.values())
    maps += [c.devices for c in pod.all_containers() if c.name not in pod.devices]
    for devices in maps:
        for resource, listed in devices.items():
            known = out.setdefault(resource, {})
            for device in listed:
                known.setdefault(device.id, device)
    return {resource: tuple(d.values()) for resource, d in out.items() if d}


@lru_cache(maxsize=256)
def regenerate_hints(
    numa_ids: tuple[int, ...],
    node_devices: tuple[tuple[int, ...], ...],
    allocated: tuple[tuple[int, ...], ...],
    requested: int,
) -> tuple[TopologyHint, ...]:
    """``generateDeviceTopologyHints`` with the allocated devices as the available ones and no
    reusable ones: the NUMA nodes of the node's devices, of the allocated ones, the request."""
    inventory = [mask_of(nodes) for nodes in node_devices]
    held = [mask_of(nodes) for nodes in allocated]
    narrowest = len(numa_ids)
    found: list[int] = []
    for mask in iterate_bitmasks(numa_ids):
        width = mask.bit_count()
        if width < narrowest and sum(1 for m in inventory if m & mask) >= requested:
            narrowest = width
        if sum(1 for m in held if m & mask) >= requested:
            found.append(mask)
    return tuple(TopologyHint(m, m.bit_count() == narrowest) for m in found)


class DeviceManager:
    """Topology hints of already allocated devices (see the module docstring); it holds no
    allocation state, only the node's device inventory."""

    def __init__(self, topology: Topology) -> None:
        self.numa_ids = tuple(topology.numa_ids)
        self.node_devices: dict[str, tuple[tuple[int, ...], ...]] = {}

    def set_node_devices(self, inventory: NodeDevices) -> None:
        """Replace the node's device inventory (resource -> NUMA nodes of each device)."""
        self.node_devices = {r: tuple(tuple(n) for n in d) for r, d in inventory.items()}

    def resource_hints(
        self, resource: str, allocated: Iterable[Device], requested: int | None = None
    ) -> list[TopologyHint] | None:
        """The hints of one resource's allocated devices (``requested`` defaults to their
        count); None for a resource without topology."""
        devices = tuple(allocated)
        node = self.node_devices.get(resource)
        if node is None:
            node = tuple(d.numa_nodes for d in devices)
        if not any(node):
            return None
        count = len(devices) if requested is None else requested
        if len(devices) != count:
            return []
        return list(
            regenerate_hints(self.numa_ids, node, tuple(d.numa_nodes for d in devices), count)
        )

    def get_topology_hints(self, pod: PodSpec, container: ContainerSpec) -> HintMap:
        """Container scope: one hint list per device resource the container holds; the
        request is the container's limit for it when the spec has one."""
        return {
            resource: self.resource_hints(resource, devices, container.limits.get(resource))
            for resource, devices in container_devices(pod, container).items()
            if devices
        }

    def get_pod_topology_hints(self, pod: PodSpec) -> HintMap:
        """Pod scope: one hint list per device resource the pod holds (each device once)."""
        return {
            resource: self.resource_hints(resource, devices)
            for resource, devices in pod_devices(pod).items()
        }

    def allocate(self, pod: PodSpec, container: ContainerSpec, hint: TopologyHint | None) -> None:
        """Nothing: the kubelet allocated the devices at admission."""

    def allocate_pod(self, pod: PodSpec, hint: TopologyHint | None) -> None:
        """Nothing: the kubelet allocated the devices at admission."""
