"""What changed between two discoveries of the same machine (after a hotplug event)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nri_plrm.cpuset import CPUSet
from nri_plrm.topology.model import Topology
from nri_plrm.topology.sysfs import discover


@dataclass(frozen=True)
class TopologyDiff:
    """CPUs and NUMA nodes that came or went, CPUs whose placement changed, memory changes.

    ``memory_changed`` maps a NUMA node present in both to ``{resource: (old, new)}`` bytes.
    """

    cpus_online: CPUSet = field(default_factory=CPUSet)
    cpus_offline: CPUSet = field(default_factory=CPUSet)
    cpus_moved: CPUSet = field(default_factory=CPUSet)
    numa_added: tuple[int, ...] = ()
    numa_removed: tuple[int, ...] = ()
    memory_changed: Mapping[int, Mapping[str, tuple[int, int]]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """True when anything differs."""
        return bool(
            self.cpus_online
            or self.cpus_offline
            or self.cpus_moved
            or self.numa_added
            or self.numa_removed
            or self.memory_changed
        )

    def summary(self) -> str:
        """One line for logs, e.g. ``cpus offline 4-7; node 1 memory 16Gi -> 8Gi``."""
        parts: list[str] = []
        for label, cpus in (
            ("cpus online", self.cpus_online),
            ("cpus offline", self.cpus_offline),
            ("cpus moved", self.cpus_moved),
        ):
            if cpus:
                parts.append(f"{label} {cpus}")
        if self.numa_added:
            parts.append(f"numa nodes added {list(self.numa_added)}")
        if self.numa_removed:
            parts.append(f"numa nodes removed {list(self.numa_removed)}")
        for node, changes in sorted(self.memory_changed.items()):
            for name, (old, new) in sorted(changes.items()):
                parts.append(f"node {node} {name} {old} -> {new} bytes")
        return "; ".join(parts) or "no change"


def diff(old: Topology, new: Topology) -> TopologyDiff:
    """Compare two topologies of one machine."""
    old_cpus, new_cpus = old.all_cpus, new.all_cpus
    moved = CPUSet(c for c in old_cpus & new_cpus if old.cpu_info[c] != new.cpu_info[c])
    old_nodes, new_nodes = set(old.numa_ids), set(new.numa_ids)
    memory: dict[int, dict[str, tuple[int, int]]] = {}
    for node in sorted(old_nodes & new_nodes):
        before, after = old.numa_nodes[node].memory, new.numa_nodes[node].memory
        changes = {
            name: (before.get(name, 0), after.get(name, 0))
            for name in set(before) | set(after)
            if before.get(name, 0) != after.get(name, 0)
        }
        if changes:
            memory[node] = changes
    return TopologyDiff(
        cpus_online=new_cpus - old_cpus,
        cpus_offline=old_cpus - new_cpus,
        cpus_moved=moved,
        numa_added=tuple(sorted(new_nodes - old_nodes)),
        numa_removed=tuple(sorted(old_nodes - new_nodes)),
        memory_changed=memory,
    )


def rediscover(
    current: Topology, root: str = "/sys", proc_root: str | None = None
) -> tuple[Topology, TopologyDiff]:
    """Discover the machine again and say what changed since ``current``."""
    fresh = discover(root, proc_root)
    return fresh, diff(current, fresh)
