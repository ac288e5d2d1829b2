"""Synthetic machines: the compact spec string, the CPU-table JSON file and a JSON description.

Both input formats are fixed (scripts outside the repository rely on them).

**Compact spec** (``sockets=2,numa_per_socket=2,cores_per_numa=8,threads_per_core=2,
memory_per_numa=16Gi``, optional ``hugepages_2Mi_per_numa=N`` and ``hugepages_1Gi_per_numa=N``
with N a number of pages). Keys left out take their value from :data:`DEFAULT_SPEC` (no
hugepages). The machine is laid out as Linux numbers x86 servers:

- CPU ids: the first thread of every core in (socket, NUMA node, core) order, then the second
  threads in the same order, and so on; with 32 cores and 2 threads, CPU 0 and CPU 32 are
  siblings.
- core id: platform-unique, the lowest CPU id of the core's threads (the kubelet's rule).
- NUMA node ids are global: socket ``s`` holds nodes ``s*numa_per_socket ...``.
- L3: one per NUMA node, shared by all of the node's CPUs. The kubelet (through cadvisor)
  files a cache that spans its whole NUMA node as a node cache, not an uncore cache, and then
  uses the socket id as the CPU's uncore id; so ``l3`` is the socket id, exactly what
  discovery reports on such a machine (and what the fake-sysfs round trip preserves).
- distances: 10 local, 11 to another node of the same socket, 21 to a node on another socket.
- memory: ``memory_per_numa`` is the node's ``MemTotal`` as the kernel reports it; hugepage
  pools are carved out of it, so they must fit inside it.

**CPU table** (JSON): ``{"cpus": [{"cpu": 0, "core": 0, "socket": 0, "numa": 0, "l3": 0}, ...],
"memory": {"0": "16Gi", ...}, "distances": {"0": [10, 21], ...}}``. ``l3`` defaults to the
socket id (the kubelet's rule when no L3 is reported), ``die`` may be given and defaults to 0.
``memory`` values are a quantity (the node's ``memory``) or a per-type map
``{"memory": "16Gi", "hugepages-2Mi": "1Gi"}``. A ``distances`` row lists the distance to every
NUMA node in ascending node-id order (a ``{"1": 21}`` map is accepted too); missing rows
default to 10 local and 20 remote. Core ids are used as given (the kubelet's test machines
use ids that are not the lowest CPU id).

The one lookup of a machine by file, name or spec is
:func:`nri_plrm.topology.machines.load_topology`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nri_plrm.base.cpuset import MAX_CPU_ID, CPUSet
from nri_plrm.base.quantity import QuantityError, format_bytes, memory_bytes
from nri_plrm.topology.model import CPUInfo, NUMANode, Topology, TopologyError

DEFAULT_SPEC = (
    "sockets=2,numa_per_socket=2,cores_per_numa=8,threads_per_core=2,memory_per_numa=16Gi"
)
"""The bundled default machine: 2 sockets, 4 NUMA nodes, 32 cores, SMT2, 16Gi per node."""

DISTANCE_LOCAL = 10
"""Distance of a NUMA node to itself."""
DISTANCE_SAME_SOCKET = 11
"""Synthetic distance between two NUMA nodes of one socket."""
DISTANCE_OTHER_SOCKET = 21
"""Synthetic distance between NUMA nodes of different sockets."""

HUGEPAGES_2MI = "hugepages-2Mi"
HUGEPAGES_1GI = "hugepages-1Gi"
MEMORY = "memory"

MAX_SYNTHETIC_CPUS = 8192
"""Largest machine the compact spec may describe (the kernel's largest NR_CPUS)."""

_PAGE_2MI = 2 << 20
_PAGE_1GI = 1 << 30
_COUNT_KEYS = ("sockets", "numa_per_socket", "cores_per_numa", "threads_per_core")
_PAGE_KEYS = {"hugepages_2Mi_per_numa": _PAGE_2MI, "hugepages_1Gi_per_numa": _PAGE_1GI}
_SPEC_KEYS = (*_COUNT_KEYS, "memory_per_numa", *_PAGE_KEYS)
_RESOURCE_NAME = re.compile(r"^hugepages-[1-9][0-9]*(Ki|Mi|Gi|Ti)$")
_CPU_KEYS = ("cpu", "core", "socket", "numa", "l3", "die")
_TABLE_KEYS = ("cpus", "memory", "distances")


@dataclass(frozen=True)
class MachineSpec:
    """A parsed compact spec (see the module documentation for the layout it produces)."""

    sockets: int
    numa_per_socket: int
    cores_per_numa: int
    threads_per_core: int
    memory_per_numa: int
    hugepages_2mi_per_numa: int | None = None
    hugepages_1gi_per_numa: int | None = None

    @property
    def num_cpus(self) -> int:
        """Logical CPUs of the machine."""
        return self.sockets * self.numa_per_socket * self.cores_per_numa * self.threads_per_core

    def build(self) -> Topology:
        """The machine as a :class:`Topology`."""
        numa_nodes = self.sockets * self.numa_per_socket
        num_cores = numa_nodes * self.cores_per_numa
        cpus: list[CPUInfo] = []
        for thread in range(self.threads_per_core):
            for core in range(num_cores):
                numa = core // self.cores_per_numa
                socket = numa // self.numa_per_socket
                cpus.append(CPUInfo(thread * num_cores + core, core, socket, numa, socket))
        node_memory: dict[str, int] = {MEMORY: self.memory_per_numa}
        if self.hugepages_2mi_per_numa is not None:
            node_memory[HUGEPAGES_2MI] = self.hugepages_2mi_per_numa * _PAGE_2MI
        if self.hugepages_1gi_per_numa is not None:
            node_memory[HUGEPAGES_1GI] = self.hugepages_1gi_per_numa * _PAGE_1GI
        memory = {node: dict(node_memory) for node in range(numa_nodes)}
        distances = {
            a: {b: _synthetic_distance(self.numa_per_socket, a, b) for b in range(numa_nodes)}
            for a in range(numa_nodes)
        }
        return Topology.build(cpus, memory, distances)

    def __str__(self) -> str:
        parts = [
            f"sockets={self.sockets}",
            f"numa_per_socket={self.numa_per_socket}",
            f"cores_per_numa={self.cores_per_numa}",
            f"threads_per_core={self.threads_per_core}",
            f"memory_per_numa={format_bytes(self.memory_per_numa)}",
        ]
        if self.hugepages_2mi_per_numa is not None:
            parts.append(f"hugepages_2Mi_per_numa={self.hugepages_2mi_per_numa}")
        if self.hugepages_1gi_per_numa is not None:
            parts.append(f"hugepages_1Gi_per_numa={self.hugepages_1gi_per_numa}")
        return ",".join(parts)


def _synthetic_distance(numa_per_socket: int, a: int, b: int) -> int:
    if a == b:
        return DISTANCE_LOCAL
    if a // numa_per_socket == b // numa_per_socket:
        return DISTANCE_SAME_SOCKET
    return DISTANCE_OTHER_SOCKET


def parse_spec(text: str) -> MachineSpec:
    """Parse a compact spec string; keys left out take their :data:`DEFAULT_SPEC` value.

    Raises TopologyError naming the key, the value and the rule broken.
    """
    given = _split_spec(text)
    values = _split_spec(DEFAULT_SPEC)
    values.update(given)
    counts: dict[str, int] = {}
    for key in _COUNT_KEYS:
        counts[key] = _spec_int(key, values[key], minimum=1)
    try:
        memory = memory_bytes(values["memory_per_numa"])
    except QuantityError as exc:
        raise TopologyError(f"topology spec: memory_per_numa: {exc}") from exc
    if memory <= 0:
        raise TopologyError(
            f"topology spec: memory_per_numa={values['memory_per_numa']!r} must be more than 0"
        )
    pages: dict[str, int | None] = {}
    for key in _PAGE_KEYS:
        pages[key] = _spec_int(key, values[key], minimum=0) if key in values else None
    carved = sum((pages[key] or 0) * size for key, size in _PAGE_KEYS.items())
    if carved > memory:
        raise TopologyError(
            f"topology spec: hugepages per NUMA node ({format_bytes(carved)}) exceed "
            f"memory_per_numa={values['memory_per_numa']}; hugepages are part of a node's memory"
        )
    spec = MachineSpec(
        counts["sockets"],
        counts["numa_per_socket"],
        counts["cores_per_numa"],
        counts["threads_per_core"],
        memory,
        pages["hugepages_2Mi_per_numa"],
        pages["hugepages_1Gi_per_numa"],
    )
    if spec.num_cpus > MAX_SYNTHETIC_CPUS:
        raise TopologyError(
            f"topology spec {text!r}: {spec.num_cpus} cpus exceed the maximum of "
            f"{MAX_SYNTHETIC_CPUS}"
        )
    return spec


def _split_spec(text: str) -> dict[str, str]:
    if not isinstance(text, str) or not text.strip():
        raise TopologyError(
            f"topology spec {text!r}: empty; expected key=value items such as {DEFAULT_SPEC!r}"
        )
    values: dict[str, str] = {}
    for raw in text.split(","):
        item = raw.strip()
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise TopologyError(
                f"topology spec {text!r}: item {item!r} is not key=value "
                f"(allowed keys: {', '.join(_SPEC_KEYS)})"
            )
        if key not in _SPEC_KEYS:
            raise TopologyError(
                f"topology spec {text!r}: unknown key {key!r} (allowed keys: "
                f"{', '.join(_SPEC_KEYS)})"
            )
        if key in values:
            raise TopologyError(f"topology spec {text!r}: key {key!r} given twice")
        values[key] = value
    return values


def _spec_int(key: str, value: str, *, minimum: int) -> int:
    if not (value.isascii() and value.isdigit()) or len(value) > 6:
        raise TopologyError(
            f"topology spec: {key}={value!r} must be a whole number >= {minimum} (at most 6 digits)"
        )
    number = int(value)
    if number < minimum:
        raise TopologyError(f"topology spec: {key}={value!r} must be >= {minimum}")
    return number


def synthetic_topology(spec: str | MachineSpec) -> Topology:
    """The machine a compact spec describes."""
    return (parse_spec(spec) if isinstance(spec, str) else spec).build()


def load_cpu_table(data: object, source: str = "cpu table") -> Topology:
    """Build a topology from a parsed CPU-table JSON document (see the module documentation).

    ``source`` names the document in error messages (usually the file path).
    """
    if not isinstance(data, dict):
        raise TopologyError(f"{source}: the document must be a JSON object with a 'cpus' list")
    for key in data:
        if key not in _TABLE_KEYS:
            raise TopologyError(
                f"{source}: unknown key {key!r} (allowed: {', '.join(_TABLE_KEYS)})"
            )
    rows = data.get("cpus")
    if not isinstance(rows, list) or not rows:
        raise TopologyError(f"{source}: 'cpus' must be a non-empty list of cpu objects")
    cpus = [_table_cpu(source, index, row) for index, row in enumerate(rows)]
    memory = _table_memory(source, data.get("memory", {}))
    node_ids = sorted({c.numa for c in cpus} | set(memory))
    distances = _table_distances(source, data.get("distances", {}), node_ids)
    try:
        return Topology.build(cpus, memory, distances)
    except TopologyError as exc:
        raise TopologyError(f"{source}: {exc}") from exc


def _table_cpu(source: str, index: int, row: object) -> CPUInfo:
    where = f"{source}: cpus[{index}]"
    if not isinstance(row, dict):
        raise TopologyError(f"{where}: {row!r} must be an object with cpu, core, socket, numa")
    values: dict[str, int] = {}
    for key, value in row.items():
        if key not in _CPU_KEYS:
            raise TopologyError(f"{where}: unknown key {key!r} (allowed: {', '.join(_CPU_KEYS)})")
        if not _is_int(value) or not 0 <= value < MAX_CPU_ID:
            raise TopologyError(f"{where}: {key} {value!r} must be an integer 0..{MAX_CPU_ID - 1}")
        values[key] = value
    for key in ("cpu", "core", "socket", "numa"):
        if key not in values:
            raise TopologyError(f"{where}: missing required key {key!r}")
    return CPUInfo(
        values["cpu"],
        values["core"],
        values["socket"],
        values["numa"],
        values.get("l3", values["socket"]),
        values.get("die", 0),
    )


def _table_memory(source: str, raw: object) -> dict[int, dict[str, int]]:
    if not isinstance(raw, dict):
        raise TopologyError(f"{source}: 'memory' must be an object keyed by NUMA node id")
    memory: dict[int, dict[str, int]] = {}
    for key, value in raw.items():
        node = _node_key(source, "memory", key)
        entries = value if isinstance(value, dict) else {MEMORY: value}
        node_memory: dict[str, int] = {}
        for name, quantity in entries.items():
            where = f"{source}: memory[{key!r}][{name!r}]"
            if name != MEMORY and not (isinstance(name, str) and _RESOURCE_NAME.match(name)):
                raise TopologyError(
                    f"{where}: unknown memory type; use 'memory' or 'hugepages-<size>' "
                    "such as 'hugepages-2Mi'"
                )
            if isinstance(quantity, bool) or not isinstance(quantity, (str, int)):
                raise TopologyError(f"{where}: {quantity!r} must be a quantity such as '16Gi'")
            try:
                size = memory_bytes(quantity)
            except QuantityError as exc:
                raise TopologyError(f"{where}: {exc}") from exc
            if size < 0:
                raise TopologyError(f"{where}: {quantity!r} must not be negative")
            canonical = _canonical_resource(name)
            if canonical in node_memory:
                raise TopologyError(f"{where}: the same memory type as {canonical!r}, given twice")
            node_memory[canonical] = size
        memory[node] = node_memory
    return memory


def _canonical_resource(name: str) -> str:
    """``hugepages-2048Ki`` -> ``hugepages-2Mi`` (the kubelet's resource name)."""
    if name == MEMORY:
        return name
    return f"hugepages-{format_bytes(memory_bytes(name.partition('-')[2]))}"


def _table_distances(source: str, raw: object, node_ids: list[int]) -> dict[int, dict[int, int]]:
    if not isinstance(raw, dict):
        raise TopologyError(f"{source}: 'distances' must be an object keyed by NUMA node id")
    known = set(node_ids)
    distances: dict[int, dict[int, int]] = {}
    for key, row in raw.items():
        node = _node_key(source, "distances", key)
        where = f"{source}: distances[{key!r}]"
        if node not in known:
            raise TopologyError(f"{where}: node {node} has no cpus and no memory entry")
        if isinstance(row, list):
            if len(row) != len(node_ids):
                raise TopologyError(
                    f"{where}: {len(row)} values; the row needs one per NUMA node "
                    f"({len(node_ids)}: {node_ids}) in ascending id order"
                )
            pairs: list[tuple[int, object]] = list(zip(node_ids, row, strict=True))
        elif isinstance(row, dict):
            pairs = [(_node_key(source, f"distances[{key!r}]", k), v) for k, v in row.items()]
        else:
            raise TopologyError(f"{where}: {row!r} must be a list of distances")
        out: dict[int, int] = {}
        for other, value in pairs:
            if other not in known:
                raise TopologyError(f"{where}: node {other} is not a NUMA node of the table")
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 255:
                raise TopologyError(f"{where}: distance {value!r} must be an integer 1..255")
            out[other] = value
        distances[node] = out
    return distances


def _node_key(source: str, field: str, key: object) -> int:
    text = key if isinstance(key, str) else ""
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        raise TopologyError(f'{source}: {field} key {key!r} must be a NUMA node id like "0"')
    return int(text)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def cpu_table(topology: Topology) -> dict[str, Any]:
    """The CPU-table JSON document of a topology (what :func:`load_cpu_table` reads)."""
    rows: list[dict[str, int]] = []
    for info in topology.cpu_info.values():
        row = {
            "cpu": info.cpu,
            "core": info.core,
            "socket": info.socket,
            "numa": info.numa,
            "l3": info.l3,
        }
        if info.die:
            row["die"] = info.die
        rows.append(row)
    ids = topology.numa_ids
    return {
        "cpus": rows,
        "memory": {
            str(n): {name: format_bytes(size) for name, size in _memory_items(topology, n)}
            for n in ids
        },
        "distances": {str(a): [topology.distance(a, b) for b in ids] for a in ids},
    }


def _memory_items(topology: Topology, node: int) -> list[tuple[str, int]]:
    memory = topology.numa_nodes[node].memory
    return [(name, memory[name]) for name in topology.memory_resources if name in memory]


def with_memory(topology: Topology, per_numa: Mapping[str, int]) -> Topology:
    """A copy of ``topology`` whose every NUMA node has the memory ``per_numa`` (bytes by type)."""
    memory = {node: dict(per_numa) for node in topology.numa_ids}
    distances = {n: dict(node.distances) for n, node in topology.numa_nodes.items()}
    return Topology.build(topology.cpu_info.values(), memory, distances)


def describe(topology: Topology) -> dict[str, Any]:
    """A JSON-able description: counts, sockets, NUMA nodes with cpus, cores, memory, distances.

    Memory appears twice per node: ``memory`` in bytes and ``memory_quantity`` as the largest
    exact binary quantity (``16Gi``). ``distances`` rows follow ``numa_ids`` order.
    """
    infos = topology.cpu_info.values()
    ids = topology.numa_ids
    sockets = sorted({i.socket for i in infos})
    totals: dict[str, int] = {}
    for node in topology.numa_nodes.values():
        for name, size in node.memory.items():
            totals[name] = totals.get(name, 0) + size
    return {
        "num_cpus": topology.num_cpus,
        "num_cores": topology.num_cores,
        "num_sockets": topology.num_sockets,
        "num_numa_nodes": topology.num_numa_nodes,
        "num_uncore_caches": topology.num_uncore_caches,
        "threads_per_core": topology.cpus_per_core,
        "cpus": str(topology.all_cpus),
        "numa_ids": list(ids),
        "memory_total": _ordered_memory(topology, totals),
        "sockets": [
            {
                "id": s,
                "cpus": str(CPUSet(i.cpu for i in infos if i.socket == s)),
                "cores": len({i.core for i in infos if i.socket == s}),
                "numa_nodes": sorted({i.numa for i in infos if i.socket == s}),
            }
            for s in sockets
        ],
        "numa_nodes": [_describe_node(topology, topology.numa_nodes[n]) for n in ids],
    }


def _describe_node(topology: Topology, node: NUMANode) -> dict[str, Any]:
    infos = [topology.cpu_info[c] for c in node.cpus]
    memory = _ordered_memory(topology, node.memory)
    return {
        "id": node.id,
        "cpus": str(node.cpus),
        "cores": len({i.core for i in infos}),
        "sockets": sorted({i.socket for i in infos}),
        "uncore_caches": sorted({i.l3 for i in infos}),
        "memory": memory,
        "memory_quantity": {name: format_bytes(size) for name, size in memory.items()},
        "distances": [node.distances[other] for other in topology.numa_ids],
    }


def _ordered_memory(topology: Topology, memory: Mapping[str, int]) -> dict[str, int]:
    return {name: memory[name] for name in topology.memory_resources if name in memory}
