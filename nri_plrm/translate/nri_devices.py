"""A container's own devices from its NRI ``CreateContainer`` request (``linux.devices``, CDI
devices already resolved there, and ``linux.net_devices``) as allocated devices for the engine's
device hints, given where each device sits (:class:`nri_plrm.topology.device_numa.DeviceNUMA`).

Only devices with a NUMA node count (a device without one gives no hint, as in the kubelet's
Device Manager a resource without topology has no preference). Their resource name is
``linux/<class>`` (the sysfs class: ``linux/drm``, ``linux/infiniband_verbs``, ``linux/vfio``,
``linux/block``, ``linux/net``). A privileged container (its device cgroup allows every device)
holds the host's devices, not an allocation: it gets none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from nri_plrm.engine.spec import ContainerSpec, Device, DeviceMap
from nri_plrm.proto import nri_api_pb2 as api

Located = tuple[str, tuple[int, ...]]
"""A device's class and NUMA nodes."""
RESOURCE_PREFIX = "linux/"


def allows_every_device(container: api.Container) -> bool:
    """True when the container's device cgroup allows every device (``a *:* rwm``)."""
    return any(
        rule.allow
        and rule.type in ("", "a")
        and not rule.HasField("major")
        and not rule.HasField("minor")
        for rule in container.linux.resources.devices
    )


def nri_devices(
    container: api.Container,
    device: Callable[[str, int, int], Located],
    net: Callable[[str], Located],
) -> DeviceMap:
    """The container's devices with a NUMA node, per ``linux/<class>`` resource."""
    linux = container.linux
    if allows_every_device(container):
        return {}
    out: dict[str, list[Device]] = {}
    for d in linux.devices:
        cls, nodes = device(d.type, d.major, d.minor)
        if nodes:
            out.setdefault(RESOURCE_PREFIX + cls, []).append(Device(d.path, nodes))
    for interface in sorted(linux.net_devices):
        cls, nodes = net(interface)
        if nodes:
            out.setdefault(RESOURCE_PREFIX + cls, []).append(Device(interface, nodes))
    return {resource: tuple(listed) for resource, listed in out.items()}


class DeviceLocator(Protocol):
    """Where devices sit (:class:`nri_plrm.topology.device_numa.DeviceNUMA`)."""

    def device(self, kind: str, major: int, minor: int) -> Located:
        """A device node's class and NUMA nodes."""
        ...

    def net(self, interface: str) -> Located:
        """A network interface's class and NUMA nodes."""
        ...


def with_nri_devices(
    spec: ContainerSpec, container: api.Container, locator: DeviceLocator | None
) -> ContainerSpec:
    """``spec`` holding the container's NRI devices (the same spec when it has none, or
    without a ``locator``)."""
    if locator is None:
        return spec
    found = nri_devices(container, locator.device, locator.net)
    if not found:
        return spec
    return ContainerSpec(spec.name, spec.kind, spec.requests, spec.limits, found)
