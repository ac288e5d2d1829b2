"""The exact node state in a NodeResourceTopology object: written by the plugin, read back by the
scheduler extender to decide exactly like the node's engine.

The upstream CRD (``topology.node.k8s.io/v1alpha2``) only has name/value string ``attributes``,
top-level and per zone; this module encodes what the engine's admission reads into them and
decodes them again. docs/kubernetes-api.md documents the format; ``nriPlrmStateVersion`` says
which one an object carries (a reader refuses versions it does not know).

Top level:

- ``nriPlrmStateVersion``: ``1``.
- ``nriPlrmCPUTopology``: the machine's CPUs, one entry per (core, socket, NUMA node, L3, die)
  separated by spaces: ``<cpu list>/<core>/<socket>/<numa>/<l3>/<die>`` (``0,64/0/0/0/0/0``).
- ``nriPlrmReservedCPUs``: the CPU manager's reserved CPUs (a cpu list, may be empty).
- ``nriPlrmCPUManagerPolicyOptions``: the enabled static policy options, comma-separated.
- ``nriPlrmTopologyManagerPolicyOptions``: ``prefer-closest-numa-nodes=<bool>,``
  ``max-allowable-numa-nodes=<n>``.
- ``nriPlrmMemoryManagerPolicy``: ``Static`` or ``None``.
- ``nriPlrmPodLevelResourceManagers``: ``true`` or ``false``.
- ``nriPlrmPods``: the 16-hex-digit hash of every pod the numbers account for, sorted and
  space-separated; the XXH64 over them is ``nodeTopologyPodsFingerprint``, so a reader can
  check both agree and tell whether a given pod is accounted for.

Per zone (``node-<id>``; zone ``costs`` give the distance row):

- ``nriPlrmFreeCPUs``: the CPUs exclusive allocations can still take there (a cpu list).
- ``nriPlrmMemory``: per memory type, space-separated,
  ``<type>=<total>/<systemReserved>/<allocatable>/<reserved>/<free>`` in bytes (the memory
  manager's machine state).
- ``nriPlrmMemoryCells``: the NUMA nodes this node's memory is grouped with (``cells``).
- ``nriPlrmMemoryAssignments``: the memory manager's ``numberOfAssignments`` of this node.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

from nri_plrm.base.cpuset import CPUSet, CPUSetError
from nri_plrm.engine.cpu_options import CPUManagerConfig, StaticPolicyOptions
from nri_plrm.engine.facade import Engine, EngineConfig
from nri_plrm.engine.memory_state import (
    POLICY_NONE as MEMORY_POLICY_NONE,
)
from nri_plrm.engine.memory_state import (
    POLICY_STATIC as MEMORY_POLICY_STATIC,
)
from nri_plrm.engine.memory_state import (
    MemoryManagerConfig,
    MemoryTable,
    NodeState,
)
from nri_plrm.engine.topology_manager import (
    OPTION_MAX_ALLOWABLE,
    OPTION_PREFER_CLOSEST,
    TopologyManagerConfig,
)
from nri_plrm.podsource.fingerprint import PREFIX, VERSION, pod_hash
from nri_plrm.topology.model import CPUInfo, Topology, TopologyError

STATE_VERSION = "1"
ATTR_VERSION = "nriPlrmStateVersion"
ATTR_CPU_TOPOLOGY = "nriPlrmCPUTopology"
ATTR_RESERVED_CPUS = "nriPlrmReservedCPUs"
ATTR_CPU_OPTIONS = "nriPlrmCPUManagerPolicyOptions"
ATTR_TM_OPTIONS = "nriPlrmTopologyManagerPolicyOptions"
ATTR_MEMORY_POLICY = "nriPlrmMemoryManagerPolicy"
ATTR_POD_LEVEL = "nriPlrmPodLevelResourceManagers"
ATTR_PODS = "nriPlrmPods"
ZONE_FREE_CPUS = "nriPlrmFreeCPUs"
ZONE_MEMORY = "nriPlrmMemory"
ZONE_CELLS = "nriPlrmMemoryCells"
ZONE_ASSIGNMENTS = "nriPlrmMemoryAssignments"
ATTR_POLICY = "topologyManagerPolicy"
ATTR_SCOPE = "topologyManagerScope"
ATTR_FINGERPRINT = "nodeTopologyPodsFingerprint"
ZONE_PREFIX = "node-"


_NO = NodeState({}, [])
MAX_TOPOLOGIES = 256
_TOPOLOGIES: dict[str, Topology] = {}
"""Machines already built, by their published description: the nodes of one type share one
(immutable) topology."""


class PublishedStateError(ValueError):
    """An object whose exact state cannot be used: which attribute, the value and the rule."""


@dataclass(frozen=True)
class ExactAttributes:
    """What the plugin adds to its object: top-level attributes and attributes per NUMA node."""

    top: tuple[dict[str, str], ...]
    zones: Mapping[int, tuple[dict[str, str], ...]]


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _attr(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


def pods_attribute(pods: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The ``nriPlrmPods`` attribute of (namespace, name) pods."""
    return _attr(ATTR_PODS, " ".join(pod_hashes(pods)))


def pod_hashes(pods: Iterable[tuple[str, str]]) -> list[str]:
    """The sorted hex hashes of (namespace, name) pods, as ``nriPlrmPods`` lists them."""
    return [f"{h:016x}" for h in sorted({pod_hash(ns, name) for ns, name in pods})]


def fingerprint_of_hashes(hashes: Sequence[str]) -> str:
    """``nodeTopologyPodsFingerprint`` of the pods whose hex hashes are given."""
    digest = xxhash.xxh64()
    for value in sorted(int(h, 16) for h in hashes):
        digest.update(struct.pack("<Q", value))
    return PREFIX + VERSION + digest.hexdigest()


def cpu_layout(topology: Topology) -> str:
    """``nriPlrmCPUTopology`` of a machine."""
    groups: dict[tuple[int, int, int, int, int], list[int]] = {}
    for info in topology.cpu_info.values():
        key = (info.core, info.socket, info.numa, info.l3, info.die)
        groups.setdefault(key, []).append(info.cpu)
    entries = sorted(groups.items(), key=lambda kv: min(kv[1]))
    return " ".join(f"{CPUSet(cpus)}/{'/'.join(map(str, key))}" for key, cpus in entries)


def exact_attributes(engine: Engine) -> ExactAttributes:
    """The attributes that let a reader rebuild ``engine``'s admission state (pure; the
    ``nriPlrmPods`` list is added with the pods by the object's writer)."""
    config = engine.config
    cpu = engine.cpu_manager
    tm = config.topology_manager
    enabled = sorted(name for name, value in config.cpu_manager.options.items() if value)
    top = (
        _attr(ATTR_VERSION, STATE_VERSION),
        _attr(ATTR_CPU_TOPOLOGY, cpu_layout(engine.topology)),
        _attr(ATTR_RESERVED_CPUS, str(cpu.reserved_cpus)),
        _attr(ATTR_CPU_OPTIONS, ",".join(enabled)),
        _attr(
            ATTR_TM_OPTIONS,
            f"{OPTION_PREFER_CLOSEST}={_bool(tm.prefer_closest_numa_nodes)},"
            f"{OPTION_MAX_ALLOWABLE}={tm.max_allowable_numa_nodes}",
        ),
        _attr(ATTR_MEMORY_POLICY, config.memory_manager.policy),
        _attr(
            ATTR_POD_LEVEL, "true" if config.cpu_manager.pod_level_resource_managers else "false"
        ),
    )
    free = cpu.available_cpus()
    machine = engine.memory_manager.machine_state
    zones: dict[int, tuple[dict[str, str], ...]] = {}
    for node in engine.topology.numa_ids:
        state = machine.get(node)
        rows: list[dict[str, str]] = [
            _attr(ZONE_FREE_CPUS, str(free & engine.topology.numa_nodes[node].cpus))
        ]
        if state is not None:
            memory = " ".join(
                f"{name}={t.total}/{t.system_reserved}/{t.allocatable}/{t.reserved}/{t.free}"
                for name, t in state.memory_map.items()
            )
            rows.append(_attr(ZONE_MEMORY, memory))
            rows.append(_attr(ZONE_CELLS, ",".join(map(str, state.cells))))
            rows.append(_attr(ZONE_ASSIGNMENTS, str(state.number_of_assignments)))
        zones[node] = tuple(rows)
    return ExactAttributes(top, zones)


# -- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedNode:
    """A node's admission state as its object publishes it."""

    name: str
    topology: Topology
    config: EngineConfig
    free_cpus: CPUSet
    """CPUs exclusive allocations can take (the CPU manager's default set minus reserved)."""
    machine_state: Mapping[int, NodeState]
    pods: frozenset[str]
    """Hex hashes of the pods the numbers account for."""
    fingerprint: str
    state_key: str
    """Every decision-relevant attribute in one string: equal keys decide alike."""
    type_key: str
    """The machine and configuration without the allocations: equal keys are one node type."""

    def shows(self, namespace: str, name: str) -> bool:
        """True when the numbers account for this pod."""
        return f"{pod_hash(namespace, name):016x}" in self.pods


def _attributes(items: Any, where: str) -> dict[str, str]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise PublishedStateError(f"{where}: {items!r}: must be a list of name/value pairs")
    out: dict[str, str] = {}
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise PublishedStateError(f"{where}: {item!r}: an attribute has a name and a value")
        value = item.get("value")
        if not isinstance(value, str):
            raise PublishedStateError(f"{where}.{item['name']}: {value!r}: must be a string")
        out[item["name"]] = value
    return out


def _need(attrs: Mapping[str, str], name: str, where: str) -> str:
    value = attrs.get(name)
    if value is None:
        raise PublishedStateError(f"{where}: attribute {name} missing")
    return value


def _int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise PublishedStateError(f"{what}: {text!r}: must be an integer") from None
    if value < 0:
        raise PublishedStateError(f"{what}: {text!r}: must be >= 0")
    return value


def _cpus(text: str, what: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise PublishedStateError(f"{what}: {text!r}: {exc}") from None


def _layout(text: str, where: str) -> list[CPUInfo]:
    what = f"{where}.{ATTR_CPU_TOPOLOGY}"
    out: list[CPUInfo] = []
    for entry in text.split():
        parts = entry.split("/")
        if len(parts) != 6:
            raise PublishedStateError(
                f"{what}: {entry!r}: must be <cpus>/<core>/<socket>/<numa>/<l3>/<die>"
            )
        core, socket, numa, l3, die = (_int(p, what) for p in parts[1:])
        out.extend(CPUInfo(c, core, socket, numa, l3, die) for c in _cpus(parts[0], what))
    return out


def _memory(text: str, what: str) -> dict[str, MemoryTable]:
    tables: dict[str, MemoryTable] = {}
    for entry in text.split():
        name, sep, numbers = entry.partition("=")
        values = numbers.split("/")
        if not sep or len(values) != 5:
            raise PublishedStateError(
                f"{what}: {entry!r}: must be <type>=<total>/<systemReserved>/<allocatable>/"
                "<reserved>/<free>"
            )
        total, system, allocatable, reserved, free = (_int(v, what) for v in values)
        tables[name] = MemoryTable(total, system, allocatable, reserved, free)
    return tables


def _tm_options(text: str, what: str) -> tuple[bool, int]:
    values = dict(part.partition("=")[::2] for part in text.split(",") if part)
    prefer = values.get(OPTION_PREFER_CLOSEST, "false")
    if prefer not in ("true", "false"):
        raise PublishedStateError(f"{what}: {text!r}: {OPTION_PREFER_CLOSEST} must be true/false")
    return prefer == "true", _int(values.get(OPTION_MAX_ALLOWABLE, "8"), what)


def read_published(obj: Mapping[str, Any]) -> PublishedNode:
    """The node state of a NodeResourceTopology object written by this plugin; raises
    :class:`PublishedStateError` naming the attribute for anything missing or malformed (and
    only that, whatever the object holds)."""
    if not isinstance(obj, Mapping):
        raise PublishedStateError(f"NodeResourceTopology: {type(obj).__name__}: not an object")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    name = str((meta or {}).get("name", "?"))
    where = f"NodeResourceTopology {name}"
    try:
        return _read(obj, name, where)
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        if isinstance(exc, PublishedStateError):
            raise
        raise PublishedStateError(f"{where}: malformed object ({exc})") from None


def _read(obj: Mapping[str, Any], name: str, where: str) -> PublishedNode:
    top = _attributes(obj.get("attributes"), f"{where}.attributes")
    version = top.get(ATTR_VERSION)
    if version != STATE_VERSION:
        raise PublishedStateError(
            f"{where}.attributes.{ATTR_VERSION}: {version!r}: this reader knows version "
            f"{STATE_VERSION} (an object without it is not written by nri-plrm with the exact "
            "state)"
        )
    cpus = _layout(_need(top, ATTR_CPU_TOPOLOGY, where), where)
    memory: dict[int, dict[str, int]] = {}
    distances: dict[int, dict[int, int]] = {}
    machine: dict[int, NodeState] = {}
    free = CPUSet()
    zone_keys: list[str] = []
    type_keys: list[str] = []
    zones = obj.get("zones") or []
    if not isinstance(zones, list):
        raise PublishedStateError(f"{where}.zones: must be a list")
    for zone in zones:
        zname = str(zone.get("name", "")) if isinstance(zone, Mapping) else ""
        if not zname.startswith(ZONE_PREFIX):
            raise PublishedStateError(f"{where}.zones: {zname!r}: zone names are node-<id>")
        zwhere = f"{where}.zones.{zname}"
        node = _int(zname[len(ZONE_PREFIX) :], zwhere)
        attrs = _attributes(zone.get("attributes"), f"{zwhere}.attributes")
        free |= _cpus(_need(attrs, ZONE_FREE_CPUS, zwhere), f"{zwhere}.{ZONE_FREE_CPUS}")
        row = {}
        for cost in zone.get("costs") or []:
            other = str(cost.get("name", ""))
            value = cost.get("value")
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PublishedStateError(f"{zwhere}.costs: {cost!r}: a cost has an integer value")
            if other.startswith(ZONE_PREFIX):
                row[_int(other[len(ZONE_PREFIX) :], f"{zwhere}.costs")] = value
        distances[node] = row
        if ZONE_MEMORY in attrs:
            tables = _memory(attrs[ZONE_MEMORY], f"{zwhere}.{ZONE_MEMORY}")
            cells = _cpus(_need(attrs, ZONE_CELLS, zwhere), f"{zwhere}.{ZONE_CELLS}").sorted()
            count = _int(_need(attrs, ZONE_ASSIGNMENTS, zwhere), f"{zwhere}.{ZONE_ASSIGNMENTS}")
            machine[node] = NodeState(tables, list(cells), count)
            memory[node] = {t: table.total for t, table in tables.items()}
        zone_keys.append(f"{node}:{sorted(attrs.items())}:{sorted(row.items())}")
        capacity = sorted(
            (t, v.total, v.system_reserved) for t, v in machine.get(node, _NO).memory_map.items()
        )
        type_keys.append(f"{node}:{capacity}:{sorted(row.items())}")
    shape = repr((top.get(ATTR_CPU_TOPOLOGY), sorted(memory.items()), sorted(distances.items())))
    topology = _TOPOLOGIES.get(shape)
    if topology is None:
        try:
            topology = Topology.build(cpus, memory, distances)
        except TopologyError as exc:
            raise PublishedStateError(f"{where}.attributes.{ATTR_CPU_TOPOLOGY}: {exc}") from None
        if len(_TOPOLOGIES) >= MAX_TOPOLOGIES:
            _TOPOLOGIES.clear()
        _TOPOLOGIES[shape] = topology
    config = _engine_config(top, topology, machine, where)
    hashes = _need(top, ATTR_PODS, where).split()
    fp = top.get(ATTR_FINGERPRINT, "")
    if fp and fingerprint_of_hashes(hashes) != fp:
        raise PublishedStateError(
            f"{where}.attributes.{ATTR_PODS}: the pods listed do not give {ATTR_FINGERPRINT} {fp!r}"
        )
    skipped = (ATTR_PODS, ATTR_FINGERPRINT)
    settings = sorted((k, v) for k, v in top.items() if k not in skipped)
    key = repr((settings, zone_keys))
    type_key = repr((settings, type_keys))
    return PublishedNode(
        name, topology, config, free, machine, frozenset(hashes), fp, key, type_key
    )


def _engine_config(
    top: Mapping[str, str], topology: Topology, machine: Mapping[int, NodeState], where: str
) -> EngineConfig:
    reserved = _cpus(_need(top, ATTR_RESERVED_CPUS, where), f"{where}.{ATTR_RESERVED_CPUS}")
    options = [o for o in _need(top, ATTR_CPU_OPTIONS, where).split(",") if o]
    prefer, max_numa = _tm_options(_need(top, ATTR_TM_OPTIONS, where), f"{where}.{ATTR_TM_OPTIONS}")
    memory_policy = _need(top, ATTR_MEMORY_POLICY, where)
    if memory_policy not in (MEMORY_POLICY_STATIC, MEMORY_POLICY_NONE):
        raise PublishedStateError(
            f"{where}.{ATTR_MEMORY_POLICY}: {memory_policy!r}: must be Static or None"
        )
    pod_level = _need(top, ATTR_POD_LEVEL, where)
    if pod_level not in ("true", "false"):
        raise PublishedStateError(f"{where}.{ATTR_POD_LEVEL}: {pod_level!r}: must be true/false")
    reserved_memory = {
        node: {t: table.system_reserved for t, table in state.memory_map.items()}
        for node, state in machine.items()
    }
    try:
        StaticPolicyOptions.parse({o: True for o in options})
        return EngineConfig(
            topology_manager=TopologyManagerConfig(
                _need(top, ATTR_POLICY, where), _need(top, ATTR_SCOPE, where), prefer, max_numa
            ),
            cpu_manager=CPUManagerConfig(
                reserved_cpus=reserved if reserved else None,
                reserved_cpu_count=None if reserved else 0,
                options={o: True for o in options},
                pod_level_resource_managers=pod_level == "true",
            ),
            memory_manager=MemoryManagerConfig(memory_policy, reserved_memory),
        )
    except ValueError as exc:
        raise PublishedStateError(f"{where}: the published configuration: {exc}") from None
