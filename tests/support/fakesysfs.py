"""Write a fake sysfs tree (and ``proc/meminfo``) describing a topology.

:func:`nri_plrm.topology.sysfs.discover` reads the tree back to the same topology whenever
the topology is one the kubelet's discovery can produce: core ids are the lowest CPU id of
their threads, a NUMA node whose CPUs all share one ``l3`` has it equal to their socket id
(see :mod:`nri_plrm.topology.synthetic`), and memory sizes are whole KiB. Every synthetic
machine qualifies. Used by tests, benchmarks and ``simulate --sysfs``.

Layout written under ``root``: ``devices/system/cpu/{online,possible,present}``, per CPU
``cpuN/online``, ``cpuN/topology/{core_id,physical_package_id,die_id,thread_siblings_list}``
and ``cpuN/cache/index3/{level,type,id,shared_cpu_list}`` (only the L3, the one cache discovery
reads: shared by the CPUs with the same ``l3`` in the same NUMA node, ``id`` = ``l3``; the L1
and L2 caches are left out to keep trees of 1,024 CPUs quick to write);
``devices/system/node/online``
and per node ``cpulist``, ``distance``, ``meminfo`` and ``hugepages/hugepages-<kB>kB/
nr_hugepages``; ``meminfo`` with the machine's ``MemTotal`` under the proc root. With
``numa=False`` the ``node`` directory is left out (a machine without NUMA information) and
hugepages go to ``kernel/mm/hugepages``.
"""

from __future__ import annotations

import os

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.base.quantity import memory_bytes
from nri_plrm.topology.model import Topology, TopologyError
from nri_plrm.topology.sysfs import default_proc_root


def _write(path: str, text: str) -> None:
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text + "\n")


def _kib(node: int, name: str, size: int) -> int:
    if size % 1024:
        raise TopologyError(
            f"numa node {node}: {name} {size} bytes is not a whole number of KiB; "
            "sysfs reports memory in kB"
        )
    return size // 1024


def _page_bytes(name: str) -> int:
    prefix, _, size = name.partition("-")
    page = memory_bytes(size) if prefix == "hugepages" and size else 0
    if page <= 0 or page % 1024:
        raise TopologyError(f"memory type {name!r}: not 'hugepages-<size>' with a KiB page size")
    return page


def _write_hugepages(directory: str, node: int, memory: dict[str, int]) -> None:
    for name, size in memory.items():
        if name == "memory":
            continue
        page = _page_bytes(name)
        if size % page:
            raise TopologyError(
                f"numa node {node}: {name} {size} bytes is not a whole number of pages"
            )
        _write(
            os.path.join(directory, f"hugepages-{page // 1024}kB", "nr_hugepages"),
            str(size // page),
        )


def write_sysfs(
    topology: Topology, root: str, *, proc_root: str | None = None, numa: bool = True
) -> None:
    """Write the tree for ``topology`` under ``root`` (created as needed).

    ``proc_root`` defaults to :func:`nri_plrm.topology.sysfs.default_proc_root` of ``root``.
    Raises TopologyError when a memory size cannot be expressed in sysfs units.
    """
    cpu_root = os.path.join(root, "devices", "system", "cpu")
    cpus = topology.all_cpus
    for name in ("online", "possible", "present"):
        _write(os.path.join(cpu_root, name), str(cpus))
    core_cpus: dict[int, list[int]] = {}
    l3_cpus: dict[tuple[int, int], list[int]] = {}
    for info in topology.cpu_info.values():
        core_cpus.setdefault(info.core, []).append(info.cpu)
        l3_cpus.setdefault((info.l3, info.numa), []).append(info.cpu)
    for info in topology.cpu_info.values():
        base = os.path.join(cpu_root, f"cpu{info.cpu}")
        siblings = str(CPUSet(core_cpus[info.core]))
        l3_shared = str(CPUSet(l3_cpus[(info.l3, info.numa)]))
        _write(os.path.join(base, "online"), "1")
        topo = os.path.join(base, "topology")
        _write(os.path.join(topo, "core_id"), str(info.core))
        _write(os.path.join(topo, "physical_package_id"), str(info.socket))
        _write(os.path.join(topo, "die_id"), str(info.die))
        _write(os.path.join(topo, "thread_siblings_list"), siblings)
        cache = os.path.join(base, "cache", "index3")
        _write(os.path.join(cache, "level"), "3")
        _write(os.path.join(cache, "type"), "Unified")
        _write(os.path.join(cache, "id"), str(info.l3))
        _write(os.path.join(cache, "shared_cpu_list"), l3_shared)
    sized = [
        node.memory["memory"] for node in topology.numa_nodes.values() if "memory" in node.memory
    ]
    if numa:
        _write_nodes(topology, os.path.join(root, "devices", "system", "node"))
    else:
        merged: dict[str, int] = {}
        for node in topology.numa_nodes.values():
            for name, size in node.memory.items():
                merged[name] = merged.get(name, 0) + size
        _write_hugepages(os.path.join(root, "kernel", "mm", "hugepages"), 0, merged)
    if sized:
        meminfo = os.path.join(proc_root or default_proc_root(root), "meminfo")
        kib = _kib(0, "memory", sum(sized))
        _write(meminfo, f"MemTotal:       {kib} kB\nMemFree:        0 kB")


def _write_nodes(topology: Topology, node_root: str) -> None:
    ids = topology.numa_ids
    _write(os.path.join(node_root, "online"), str(CPUSet(ids)))
    _write(os.path.join(node_root, "possible"), str(CPUSet(ids)))
    for node_id in ids:
        node = topology.numa_nodes[node_id]
        base = os.path.join(node_root, f"node{node_id}")
        _write(os.path.join(base, "cpulist"), str(node.cpus))
        _write(os.path.join(base, "distance"), " ".join(str(node.distances[o]) for o in ids))
        memory = dict(node.memory)
        if "memory" in memory:
            kib = _kib(node_id, "memory", memory["memory"])
            _write(
                os.path.join(base, "meminfo"),
                f"Node {node_id} MemTotal:       {kib} kB\nNode {node_id} MemFree:        0 kB",
            )
        _write_hugepages(os.path.join(base, "hugepages"), node_id, memory)
