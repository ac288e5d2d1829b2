"""Free resources per NUMA node: what the engine would still hand out, node by node.

:func:`free_per_numa` is a pure function of the engine's state. It is what ``simulate`` prints
after its table (``free_per_numa`` in its JSON) and what the NodeResourceTopology export
publishes, so the two always agree. Per NUMA node and resource:

- ``cpu``: ``capacity`` the node's online CPUs; ``allocatable`` minus the reserved CPUs;
  ``available`` the CPUs exclusive allocations can still take there (the CPU manager's shared
  pool minus the reserved CPUs: exclusive containers' CPUs and pod budgets are carved out).
- ``memory`` and each ``hugepages-<size>``: the memory manager's machine state in bytes:
  ``capacity`` the node's total, ``allocatable`` minus the system reservation (for ``memory``
  also minus the hugepages, as the kubelet's memory manager counts it), ``available`` its
  ``free`` (minus exclusive containers' and pod budgets' memory).
- each device resource of the node's inventory (``nvidia.com/gpu``, an SR-IOV pool; the
  kubelet's ``GetAllocatableResources``, when the plugin reads its PodResources socket), as
  NFD's topology-updater publishes them: ``capacity`` and ``allocatable`` the devices on the
  node, ``available`` those no admitted pod holds. A device without topology is in no zone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nri_plrm.engine.device_manager import pod_devices
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import CPU


@dataclass(frozen=True)
class ResourceAvailability:
    """One resource on one NUMA node; CPUs as a count, memory in bytes."""

    name: str
    capacity: int
    allocatable: int
    available: int

    def to_dict(self) -> dict[str, Any]:
        """``{"capacity": ..., "allocatable": ..., "available": ...}``."""
        return {
            "capacity": self.capacity,
            "allocatable": self.allocatable,
            "available": self.available,
        }


@dataclass(frozen=True)
class NumaAvailability:
    """The resources of one NUMA node: ``cpu`` first, then ``memory``, then hugepages, then
    devices by resource name."""

    node: int
    resources: tuple[ResourceAvailability, ...]

    def resource(self, name: str) -> ResourceAvailability | None:
        """The entry for ``name``, or None."""
        return next((r for r in self.resources if r.name == name), None)


def free_per_numa(engine: Engine) -> tuple[NumaAvailability, ...]:
    """Capacity, allocatable and available resources of every NUMA node, in node order."""
    topology = engine.topology
    cpu = engine.cpu_manager
    allocatable_cpus = cpu.allocatable_cpus()
    available_cpus = cpu.available_cpus()
    machine_state = engine.memory_manager.machine_state
    inventory = sorted(engine.device_manager.node_devices.items())
    taken = _devices_taken(engine) if inventory else {}
    out = []
    for node_id in topology.numa_ids:
        cpus = topology.numa_nodes[node_id].cpus
        resources = [
            ResourceAvailability(
                CPU, len(cpus), len(cpus & allocatable_cpus), len(cpus & available_cpus)
            )
        ]
        state = machine_state.get(node_id)
        if state is not None:
            resources.extend(
                ResourceAvailability(name, table.total, table.allocatable, table.free)
                for name, table in state.memory_map.items()
            )
        for name, nodes in inventory:
            count = sum(1 for device in nodes if node_id in device)
            if count:
                held = taken.get((name, node_id), 0)
                resources.append(ResourceAvailability(name, count, count, max(0, count - held)))
        out.append(NumaAvailability(node_id, tuple(resources)))
    return tuple(out)


def _devices_taken(engine: Engine) -> dict[tuple[str, int], int]:
    """Devices the admitted pods hold, per (resource, NUMA node)."""
    taken: dict[tuple[str, int], int] = {}
    for uid in engine.pods():
        pod = engine.pod_so_far(uid)
        if pod is None:
            continue
        for name, devices in pod_devices(pod).items():
            for device in devices:
                for node in device.numa_nodes:
                    taken[(name, node)] = taken.get((name, node), 0) + 1
    return taken


def free_per_numa_to_dict(
    free: Sequence[NumaAvailability],
) -> dict[str, dict[str, dict[str, Any]]]:
    """JSON form: ``{"<node>": {"<resource>": {"capacity", "allocatable", "available"}}}``."""
    return {str(n.node): {r.name: r.to_dict() for r in n.resources} for n in free}
