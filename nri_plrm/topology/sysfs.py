"""Machine topology discovery from sysfs, with the kubelet's (cadvisor's) interpretation.

What is read, under the sysfs root (``/sys`` by default):

- ``devices/system/cpu/online``: the online CPUs (offline CPUs are left out). Without it, the
  ``cpuN`` directories whose ``cpuN/online`` is not ``0``.
- ``devices/system/cpu/cpuN/topology/{core_id,physical_package_id,die_id}``. CPUs of one NUMA
  node with the same (package, ``core_id``) form a core, as cadvisor groups them; the core id
  is the lowest CPU id of its threads (the kubelet's platform-unique id). Without ``core_id``
  the core is taken from ``thread_siblings_list``, and without that each CPU is its own core.
  A ``core_id`` of ``-1`` counts as missing. Without ``physical_package_id`` (or with ``-1``,
  as some VMs and ARM machines report) the socket is 0; without ``die_id`` the die is 0.
- ``devices/system/cpu/cpuN/cache/index*/{level,id,shared_cpu_list}`` of the lowest CPU of each
  core: the first cache above level 2 that is *not* shared by all the CPUs of the NUMA node
  gives the uncore (L3) id; a cache that spans the whole node is a node cache (cadvisor's rule)
  and then, as when there is no cache information, the uncore id is the socket id. An uncore
  cache without an ``id`` file (kernels before 4.11) also gives the socket id: cadvisor drops
  the cache information of a node whose caches have no id.
- ``devices/system/node/online`` (or the ``nodeN`` directories) and per node ``cpulist``,
  ``distance`` (one value per node in ascending id order), ``meminfo`` (``MemTotal``) and
  ``hugepages/hugepages-<kB>kB/nr_hugepages`` (resource ``hugepages-2Mi``, ``hugepages-1Gi``...,
  in bytes: pages x page size). Nodes without memory information get no ``memory`` entry.
- A machine without ``devices/system/node`` is one NUMA node 0 holding every CPU, with
  ``MemTotal`` from ``meminfo`` under the proc root and hugepages from
  ``kernel/mm/hugepages`` under the sysfs root.

Missing optional files degrade as described; a file whose content breaks its format raises
:class:`TopologyError` naming the file, the value and the rule.
"""

from __future__ import annotations

import logging
import os
import re

from nri_plrm.base.cpuset import MAX_CPU_ID, CPUSet, CPUSetError
from nri_plrm.base.quantity import format_bytes
from nri_plrm.topology.model import MAX_NUMA_NODES, CPUInfo, Topology, TopologyError

log = logging.getLogger(__name__)

_CPU_DIR = re.compile(r"^cpu([0-9]+)$")
_NODE_DIR = re.compile(r"^node([0-9]+)$")
_INDEX_DIR = re.compile(r"^index([0-9]+)$")
_HUGEPAGES_DIR = re.compile(r"^hugepages-([0-9]+)kB$")
_MEMTOTAL = re.compile(r"^(?:Node\s+[0-9]+\s+)?MemTotal:\s+([0-9]+)\s+kB\s*$", re.MULTILINE)
_MAX_ID = 1 << 20


def default_proc_root(root: str) -> str:
    """The proc root that goes with a sysfs root: ``/host/sys`` -> ``/host/proc``, else
    ``<root>/proc`` (where the fake-sysfs writer puts it)."""
    stripped = root.rstrip("/") or "/"
    if os.path.basename(stripped) == "sys":
        return os.path.join(os.path.dirname(stripped), "proc")
    return os.path.join(root, "proc")


def read_text(path: str) -> str | None:
    """A sysfs file's content without the trailing newline, or None when it does not exist."""
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().rstrip("\n")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnicodeDecodeError as exc:
        raise TopologyError(
            f"{path}: not ASCII text ({exc.reason}); sysfs files are ASCII"
        ) from exc
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def parse_cpulist(path: str, text: str) -> CPUSet:
    """A kernel cpu list (``0-3,8``); TopologyError on anything else."""
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise TopologyError(f"{path}: {exc}") from exc


def parse_id(path: str, text: str, *, allow_unknown: bool = False) -> int:
    """A non-negative id; ``-1`` (unknown) becomes 0 when ``allow_unknown``."""
    value = text.strip()
    if allow_unknown and value == "-1":
        return 0
    if not (value.isascii() and value.isdigit()) or int(value) >= _MAX_ID:
        raise TopologyError(f"{path}: {text!r} is not an id (a whole number 0..{_MAX_ID - 1})")
    return int(value)


def parse_count(path: str, text: str) -> int:
    """A non-negative count (``nr_hugepages``)."""
    value = text.strip()
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise TopologyError(f"{path}: {text!r} is not a count (a whole number >= 0)")
    return int(value)


def parse_memtotal(path: str, text: str) -> int:
    """Bytes of the ``MemTotal`` line of a (node) meminfo file."""
    match = _MEMTOTAL.search(text)
    if match is None or len(match.group(1)) > 15:
        raise TopologyError(f"{path}: no 'MemTotal: <n> kB' line with a plausible size")
    return int(match.group(1)) * 1024


def parse_distances(path: str, text: str) -> list[int]:
    """A node ``distance`` row: whitespace-separated numbers 1..255."""
    values = text.split()
    if not values:
        raise TopologyError(f"{path}: empty; expected one distance per NUMA node")
    row: list[int] = []
    for value in values:
        if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= 255:
            raise TopologyError(f"{path}: distance {value!r} is not a number 1..255")
        row.append(int(value))
    return row


def hugepage_resource(path: str, name: str) -> tuple[str, int]:
    """``hugepages-2048kB`` -> (``hugepages-2Mi``, page size in bytes)."""
    match = _HUGEPAGES_DIR.match(name)
    if match is None or len(match.group(1)) > 12 or int(match.group(1)) == 0:
        raise TopologyError(f"{path}: {name!r} is not a 'hugepages-<size>kB' directory name")
    page = int(match.group(1)) * 1024
    return f"hugepages-{format_bytes(page)}", page


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise TopologyError(f"{path}: cannot list: {exc.strerror or exc}") from exc


MAX_CACHE_INDEX = 64
"""Highest ``cache/index<N>`` directory read (CPUs list a handful)."""


def _numbered(path: str, pattern: re.Pattern[str], limit: int) -> dict[int, str]:
    found: dict[int, str] = {}
    for name in _listdir(path):
        match = pattern.match(name)
        if match:
            number = int(match.group(1))
            if number >= limit:
                raise TopologyError(
                    f"{os.path.join(path, name)}: id {number} exceeds the maximum {limit - 1}"
                )
            found[number] = os.path.join(path, name)
    return found


def _online_cpus(cpu_root: str) -> CPUSet:
    online_path = os.path.join(cpu_root, "online")
    text = read_text(online_path)
    if text is not None:
        return parse_cpulist(online_path, text)
    online = []
    for cpu, path in _numbered(cpu_root, _CPU_DIR, MAX_CPU_ID).items():
        flag_path = os.path.join(path, "online")
        flag = read_text(flag_path)
        if flag is None or parse_count(flag_path, flag) != 0:
            online.append(cpu)
    return CPUSet(online)


def _hugepages(directory: str) -> dict[str, int]:
    pools: dict[str, int] = {}
    for name in sorted(_listdir(directory)):
        path = os.path.join(directory, name)
        resource, page = hugepage_resource(path, name)
        count_path = os.path.join(path, "nr_hugepages")
        text = read_text(count_path)
        if text is None:
            log.warning("%s missing; %s left out", count_path, resource)
            continue
        pools[resource] = parse_count(count_path, text) * page
    return pools


class _CPUFacts:
    __slots__ = ("core_id", "die", "siblings", "socket")

    def __init__(self, socket: int, die: int, core_id: int | None, siblings: CPUSet | None) -> None:
        self.socket = socket
        self.die = die
        self.core_id = core_id
        self.siblings = siblings


def _cpu_facts(cpu_root: str, cpu: int) -> _CPUFacts:
    base = os.path.join(cpu_root, f"cpu{cpu}", "topology")
    values: dict[str, int | None] = {}
    for name in ("physical_package_id", "die_id", "core_id"):
        path = os.path.join(base, name)
        text = read_text(path)
        if text is None or (name == "core_id" and text.strip() == "-1"):
            values[name] = None
        else:
            values[name] = parse_id(path, text, allow_unknown=True)
    siblings = None
    if values["core_id"] is None:
        path = os.path.join(base, "thread_siblings_list")
        text = read_text(path)
        siblings = None if text is None else parse_cpulist(path, text)
    return _CPUFacts(
        values["physical_package_id"] or 0, values["die_id"] or 0, values["core_id"], siblings
    )


def _uncore_id(cpu_root: str, first_cpu: int, node_threads: int) -> int | None:
    """The uncore cache id of a core (from its first CPU), None when it has none."""
    cache_root = os.path.join(cpu_root, f"cpu{first_cpu}", "cache")
    for _, path in sorted(_numbered(cache_root, _INDEX_DIR, MAX_CACHE_INDEX).items()):
        level_path = os.path.join(path, "level")
        level = read_text(level_path)
        if level is None or parse_id(level_path, level) <= 2:
            continue
        shared_path = os.path.join(path, "shared_cpu_list")
        shared_text = read_text(shared_path)
        if shared_text is None:
            continue
        shared = parse_cpulist(shared_path, shared_text)
        if len(shared) == node_threads:
            continue
        id_path = os.path.join(path, "id")
        id_text = read_text(id_path)
        return None if id_text is None else parse_id(id_path, id_text)
    return None


def _node_layout(node_root: str, online: CPUSet) -> tuple[list[int], dict[int, CPUSet]] | None:
    if not os.path.isdir(node_root):
        return None
    online_path = os.path.join(node_root, "online")
    text = read_text(online_path)
    dirs = _numbered(node_root, _NODE_DIR, MAX_NUMA_NODES)
    ids = parse_cpulist(online_path, text).sorted() if text is not None else sorted(dirs)
    if not ids:
        return None
    cpus_of: dict[int, CPUSet] = {}
    seen = CPUSet()
    for node in ids:
        path = os.path.join(node_root, f"node{node}", "cpulist")
        cpulist = read_text(path)
        node_cpus = (parse_cpulist(path, cpulist) if cpulist is not None else CPUSet()) & online
        if not node_cpus.is_disjoint(seen):
            raise TopologyError(
                f"{path}: cpus {node_cpus & seen} are listed by another node too; "
                "a cpu belongs to one NUMA node"
            )
        seen |= node_cpus
        cpus_of[node] = node_cpus
    orphans = online - seen
    if orphans:
        log.warning(
            "online cpus %s are in no node*/cpulist under %s; placing them on node %d",
            orphans,
            node_root,
            ids[0],
        )
        cpus_of[ids[0]] |= orphans
    return ids, cpus_of


def _node_memory(node_root: str, node: int) -> dict[str, int]:
    base = os.path.join(node_root, f"node{node}")
    memory: dict[str, int] = {}
    meminfo_path = os.path.join(base, "meminfo")
    text = read_text(meminfo_path)
    if text is None:
        log.warning("%s missing; NUMA node %d has no memory information", meminfo_path, node)
    else:
        memory["memory"] = parse_memtotal(meminfo_path, text)
    memory.update(_hugepages(os.path.join(base, "hugepages")))
    return memory


def _node_distances(node_root: str, ids: list[int]) -> dict[int, dict[int, int]]:
    distances: dict[int, dict[int, int]] = {}
    for node in ids:
        path = os.path.join(node_root, f"node{node}", "distance")
        text = read_text(path)
        if text is None:
            continue
        row = parse_distances(path, text)
        if len(row) != len(ids):
            raise TopologyError(
                f"{path}: {len(row)} distances for {len(ids)} NUMA nodes {ids}; "
                "the row needs one per online node"
            )
        distances[node] = dict(zip(ids, row, strict=True))
    return distances


def _group_cores(node_cpus: CPUSet, facts: dict[int, _CPUFacts]) -> list[tuple[CPUSet, _CPUFacts]]:
    groups: dict[tuple[object, ...], list[int]] = {}
    for cpu in node_cpus:
        fact = facts[cpu]
        if fact.core_id is not None:
            key: tuple[object, ...] = ("core", fact.socket, fact.core_id)
        elif fact.siblings is not None:
            key = ("siblings", (fact.siblings & node_cpus).mask or 1 << cpu)
        else:
            key = ("cpu", cpu)
        groups.setdefault(key, []).append(cpu)
    return [(CPUSet(threads), facts[min(threads)]) for threads in groups.values()]


def discover(root: str = "/sys", proc_root: str | None = None) -> Topology:
    """Read the machine's topology from a sysfs tree (and ``meminfo`` under ``proc_root``).

    ``proc_root`` defaults to :func:`default_proc_root` of ``root``. Raises TopologyError when
    a file breaks its format or no online CPU is found.
    """
    cpu_root = os.path.join(root, "devices", "system", "cpu")
    node_root = os.path.join(root, "devices", "system", "node")
    online = _online_cpus(cpu_root)
    if not online:
        raise TopologyError(f"{cpu_root}: no online cpus found (online file or cpuN directories)")
    facts = {cpu: _cpu_facts(cpu_root, cpu) for cpu in online}
    layout = _node_layout(node_root, online)
    if layout is None:
        ids, cpus_of = [0], {0: online}
        memory: dict[int, dict[str, int]] = {0: _machine_memory(root, proc_root)}
        distances: dict[int, dict[int, int]] = {}
    else:
        ids, cpus_of = layout
        memory = {node: _node_memory(node_root, node) for node in ids}
        distances = _node_distances(node_root, ids)
    infos: list[CPUInfo] = []
    for node in ids:
        cores = _group_cores(cpus_of[node], facts)
        for threads, fact in cores:
            first = threads.first()
            node_threads = len(cores) * len(threads)
            uncore = _uncore_id(cpu_root, first, node_threads)
            l3 = fact.socket if uncore is None else uncore
            infos.extend(CPUInfo(cpu, first, fact.socket, node, l3, fact.die) for cpu in threads)
    return Topology.build(infos, memory, distances)


def _machine_memory(root: str, proc_root: str | None) -> dict[str, int]:
    memory: dict[str, int] = {}
    meminfo_path = os.path.join(proc_root or default_proc_root(root), "meminfo")
    text = read_text(meminfo_path)
    if text is None:
        log.warning("%s missing; the machine's memory is unknown", meminfo_path)
    else:
        memory["memory"] = parse_memtotal(meminfo_path, text)
    memory.update(_hugepages(os.path.join(root, "kernel", "mm", "hugepages")))
    return memory


def online_cpus(root: str = "/sys") -> CPUSet:
    """Just the online CPUs (cheap; for hotplug checks between full discoveries)."""
    return _online_cpus(os.path.join(root, "devices", "system", "cpu"))
