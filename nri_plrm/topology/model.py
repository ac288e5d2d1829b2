"""The machine model every other part reads: CPUs with their core/socket/NUMA/L3 ids, NUMA nodes
with memory per resource type and distances.

Ids follow the kubelet's ``CPUTopology``: ``core`` is platform-unique (the lowest CPU id among the
core's threads), ``l3`` is the uncore-cache id (the socket id when the machine reports no L3).
Memory is keyed by kubelet resource names: ``"memory"`` and ``"hugepages-<size>"`` (``2Mi``,
``1Gi``), values in bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from nri_plrm.base.cpuset import CPUSet

MAX_NUMA_NODES = 1024
"""NUMA node ids must be below this (the kernel's largest ``MAX_NUMNODES``)."""


class TopologyError(ValueError):
    """A topology description that is inconsistent (names the thing, the value and the rule)."""


@dataclass(frozen=True, slots=True)
class CPUInfo:
    """One logical CPU and where it sits."""

    cpu: int
    core: int
    socket: int
    numa: int
    l3: int
    die: int = 0


@dataclass(frozen=True)
class NUMANode:
    """One NUMA node: its CPUs, memory per resource type (bytes) and distance row."""

    id: int
    cpus: CPUSet
    memory: Mapping[str, int] = field(default_factory=dict)
    distances: Mapping[int, int] = field(default_factory=dict)
    """Distance from this node to each node id (10 = local), as in ``node*/distance``."""


@dataclass(frozen=True, eq=False)
class Topology:
    """A whole machine. Build with :meth:`build`, which validates and derives the indexes."""

    cpu_info: Mapping[int, CPUInfo]
    numa_nodes: Mapping[int, NUMANode]

    @classmethod
    def build(
        cls,
        cpus: Iterable[CPUInfo],
        memory: Mapping[int, Mapping[str, int]] | None = None,
        distances: Mapping[int, Mapping[int, int]] | None = None,
    ) -> Topology:
        """Validate a CPU table plus per-NUMA memory and distances and return the topology.

        NUMA nodes are those named by CPUs plus those named in ``memory`` (memory-only nodes).
        Missing distances default to 10 for the node itself and 20 (remote) otherwise, as the
        kernel reports on machines without an SLIT table.
        """
        table: dict[int, CPUInfo] = {}
        for info in cpus:
            if info.cpu in table:
                raise TopologyError(f"cpu {info.cpu}: listed twice; cpu ids must be unique")
            for name in ("cpu", "core", "socket", "numa", "l3", "die"):
                value = getattr(info, name)
                if not isinstance(value, int) or value < 0:
                    raise TopologyError(f"cpu {info.cpu}: {name} {value!r} must be an integer >= 0")
            table[info.cpu] = info
        if not table:
            raise TopologyError("topology: no cpus provided")
        memory = memory or {}
        distances = distances or {}
        node_ids = sorted({i.numa for i in table.values()} | set(memory))
        if node_ids and node_ids[-1] >= MAX_NUMA_NODES:
            raise TopologyError(
                f"numa node {node_ids[-1]}: node ids must be below {MAX_NUMA_NODES}"
            )
        core_socket: dict[int, int] = {}
        for info in table.values():
            if core_socket.setdefault(info.core, info.socket) != info.socket:
                raise TopologyError(
                    f"cpu {info.cpu}: core {info.core} is in socket {core_socket[info.core]} "
                    f"and socket {info.socket}; a core belongs to one socket"
                )
        nodes: dict[int, NUMANode] = {}
        for node_id in node_ids:
            node_cpus = CPUSet(c for c, i in table.items() if i.numa == node_id)
            mem = dict(memory.get(node_id, {}))
            for name, value in mem.items():
                if not isinstance(value, int) or value < 0:
                    raise TopologyError(f"numa node {node_id}: {name} {value!r} must be bytes >= 0")
            row = dict(distances.get(node_id, {}))
            for other in node_ids:
                row.setdefault(other, 10 if other == node_id else 20)
            nodes[node_id] = NUMANode(node_id, node_cpus, mem, row)
        return cls(dict(sorted(table.items())), nodes)

    @cached_property
    def all_cpus(self) -> CPUSet:
        """Every online CPU."""
        return CPUSet(self.cpu_info)

    @property
    def num_cpus(self) -> int:
        """Logical CPUs."""
        return len(self.cpu_info)

    @cached_property
    def num_cores(self) -> int:
        """Physical cores."""
        return len({i.core for i in self.cpu_info.values()})

    @cached_property
    def num_sockets(self) -> int:
        """Sockets."""
        return len({i.socket for i in self.cpu_info.values()})

    @property
    def num_numa_nodes(self) -> int:
        """NUMA nodes, memory-only nodes included."""
        return len(self.numa_nodes)

    @cached_property
    def num_uncore_caches(self) -> int:
        """Distinct L3 (uncore) caches."""
        return len({i.l3 for i in self.cpu_info.values()})

    @property
    def cpus_per_core(self) -> int:
        """Threads per core (integer division, 0 without cores), as the kubelet computes it."""
        return self.num_cpus // self.num_cores if self.num_cores else 0

    @property
    def cpus_per_socket(self) -> int:
        """CPUs per socket (integer division)."""
        return self.num_cpus // self.num_sockets if self.num_sockets else 0

    @property
    def cpus_per_uncore(self) -> int:
        """CPUs per L3 cache (integer division)."""
        return self.num_cpus // self.num_uncore_caches if self.num_uncore_caches else 0

    @cached_property
    def numa_ids(self) -> tuple[int, ...]:
        """NUMA node ids in ascending order."""
        return tuple(sorted(self.numa_nodes))

    def cpus_in_numa(self, *nodes: int) -> CPUSet:
        """CPUs of the given NUMA nodes."""
        return CPUSet().union(*(self.numa_nodes[n].cpus for n in nodes if n in self.numa_nodes))

    def memory_of(self, node: int, resource: str) -> int:
        """Bytes of ``resource`` (``memory``, ``hugepages-2Mi`` ...) on a NUMA node."""
        return self.numa_nodes[node].memory.get(resource, 0)

    def distance(self, a: int, b: int) -> int:
        """NUMA distance from node a to node b."""
        return self.numa_nodes[a].distances[b]

    @cached_property
    def memory_resources(self) -> tuple[str, ...]:
        """Memory resource names present on any node, ``memory`` first then hugepages sorted."""
        names = {n for node in self.numa_nodes.values() for n in node.memory}
        return tuple(sorted(names, key=lambda n: (n != "memory", n)))
