"""The Memory Manager's configuration and state (the kubelet's ``memorymanager/state``), with
their kubelet-format (de)serialization. :class:`MemoryState` is the reader and writer the
``Static`` policy (:mod:`.memory_manager`) changes it through.

Machine state per NUMA node and memory type (``memory`` and every ``hugepages-<size>``):
total, system reserved, allocatable (total - reserved, and for ``memory`` also minus the node's
hugepages, which the kernel counts in MemTotal), reserved and free, plus the node's group
(``cells``) and assignment count. The kubelet iterates requested types as a Go map (random
order); here ``memory`` comes first, then hugepages sorted by name (:func:`ordered`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from nri_plrm.engine.spec import MEMORY, MemoryBlock, is_memory_resource
from nri_plrm.topology.model import Topology

POLICY_NONE = "None"
POLICY_STATIC = "Static"
STATE_FORMAT = 1
"""Version of :meth:`MemoryManager.snapshot`'s layout."""


T = TypeVar("T")


class MemoryManagerConfigError(ValueError):
    """A memory manager setting the kubelet would refuse."""


_NO_ENTRIES: Mapping[str, list[Block]] = MappingProxyType({})
"""The container entries of a pod without any (read only)."""


class MemoryStateError(ValueError):
    """A saved state that does not match this machine and configuration."""


def type_order(name: str) -> tuple[bool, str]:
    """Sort key: ``memory`` first, then hugepages by name."""
    return (name != MEMORY, name)


def ordered(resources: Mapping[str, int]) -> dict[str, int]:
    """The request with ``memory`` first and hugepages sorted (the documented iteration order)."""
    return {k: resources[k] for k in sorted(resources, key=type_order)}


def memory_requests(resources: Mapping[str, int]) -> dict[str, int]:
    """The memory and hugepages entries of ``resources``, :func:`ordered`."""
    return ordered({k: v for k, v in resources.items() if is_memory_resource(k)})


@dataclass(frozen=True)
class MemoryManagerConfig:
    """``memoryManagerPolicy`` and ``reservedMemory`` (bytes per NUMA node and resource type)."""

    policy: str = POLICY_STATIC
    reserved: Mapping[int, Mapping[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.policy not in (POLICY_NONE, POLICY_STATIC):
            raise MemoryManagerConfigError(
                f'memory manager policy "{self.policy}": must be "None" or "Static"'
            )
        for node, table in self.reserved.items():
            for name, size in table.items():
                if not is_memory_resource(name):
                    raise MemoryManagerConfigError(
                        f"reserved memory on numa node {node}: resource {name!r} is not memory "
                        "or hugepages-<size>"
                    )
                if size < 0:
                    raise MemoryManagerConfigError(
                        f"reserved memory on numa node {node}: {name} {size} must be >= 0"
                    )
        if self.policy == POLICY_STATIC and (
            sum(t.get(MEMORY, 0) for t in self.reserved.values()) <= 0
        ):
            raise MemoryManagerConfigError(
                "[memorymanager] you should specify the system reserved memory"
            )


@dataclass
class MemoryTable:
    """One (NUMA node, type) row of the machine state, in bytes."""

    total: int
    system_reserved: int
    allocatable: int
    reserved: int
    free: int

    def to_dict(self) -> dict[str, int]:
        """The kubelet's JSON field names."""
        return {
            "total": self.total,
            "systemReserved": self.system_reserved,
            "allocatable": self.allocatable,
            "reserved": self.reserved,
            "free": self.free,
        }


@dataclass
class NodeState:
    """One NUMA node: its memory tables, assignment count and group (``cells``)."""

    memory_map: dict[str, MemoryTable]
    cells: list[int]
    number_of_assignments: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The kubelet's JSON field names."""
        return {
            "numberOfAssignments": self.number_of_assignments,
            "memoryMap": {k: v.to_dict() for k, v in self.memory_map.items()},
            "cells": list(self.cells),
        }


MachineState = dict[int, NodeState]
"""Node states by NUMA node id."""


def free_of(state: MachineState, node: int, name: str) -> int:
    """Free bytes of type ``name`` on ``node`` (0 for a type the node lacks)."""
    table = state[node].memory_map.get(name)
    return table.free if table is not None else 0


def allocatable_of(state: MachineState, node: int, name: str) -> int:
    """Allocatable bytes of type ``name`` on ``node`` (0 for a type the node lacks)."""
    table = state[node].memory_map.get(name)
    return table.allocatable if table is not None else 0


@dataclass
class Block:
    """A container's or pod's memory on a set of NUMA nodes."""

    numa: tuple[int, ...]
    type: str
    size: int

    def frozen(self) -> MemoryBlock:
        """The immutable form the engine reports."""
        return MemoryBlock(self.numa, self.type, self.size)

    def to_dict(self) -> dict[str, Any]:
        """The kubelet's JSON field names."""
        return {"numaAffinity": list(self.numa), "type": self.type, "size": self.size}


def block_from_dict(data: Mapping[str, Any]) -> Block:
    """Inverse of :meth:`Block.to_dict`; raises MemoryStateError."""
    numa = tuple(int(n) for n in data["numaAffinity"])
    size = int(data["size"])
    kind = str(data["type"])
    if size < 0 or not numa:
        raise MemoryStateError(f"memory block {dict(data)!r}: needs numa nodes and a size >= 0")
    return Block(numa, kind, size)


class MemoryState:
    """The kubelet's memory manager ``State`` (``GetMachineState``/``SetMachineState``,
    ``GetMemoryBlocks``/``SetMemoryBlocks``, ``Delete``) with the pod-level additions: pod
    entries (the blocks of a pod-level pod's budget) and the containers of such a pod that sit
    on its shared pool.

    It records what it is told; the policy decides, and charges the machine state (whose
    tables it updates in place, as the kubelet's policy does on the copy it then stores).
    Blocks handed out are the state's own: the policy shrinks an init container's blocks in
    place when a later container reuses them (``updateInitContainersMemoryBlocks``).
    """

    def __init__(self, machine_state: MachineState) -> None:
        self.machine_state = machine_state
        """``GetMachineState``: node states by NUMA node id. Read it (the policy updates its
        tables in place); replace it with :meth:`set_machine_state`."""
        self._entries: dict[str, dict[str, list[Block]]] = {}
        self._pod_entries: dict[str, list[Block]] = {}
        self._shared: dict[str, set[str]] = {}

    # -- reader ------------------------------------------------------------------------------
    def get_blocks(self, pod_uid: str, name: str) -> list[Block] | None:
        """``GetMemoryBlocks``: the container's blocks, or None when it has no entry."""
        entries = self._entries.get(pod_uid)
        return None if entries is None else entries.get(name)

    def pod_containers(self, pod_uid: str) -> Mapping[str, list[Block]]:
        """The container entries of one pod (read only; empty when none)."""
        return self._entries.get(pod_uid, _NO_ENTRIES)

    def pod_blocks(self, pod_uid: str) -> list[Block] | None:
        """A pod-level pod's budget blocks, or None."""
        return self._pod_entries.get(pod_uid)

    def shared(self, pod_uid: str) -> Set[str]:
        """The containers of a pod-level pod on its shared pool (read only)."""
        return self._shared.get(pod_uid, frozenset())

    def pods(self) -> Iterator[str]:
        """Pods with a container entry or a pod entry (each once, unordered)."""
        return iter(set(self._entries) | set(self._pod_entries))

    def to_dict(self, state_format: int, policy_name: str) -> dict[str, Any]:
        """The saved form: the kubelet's field names plus ``podEntries`` and ``podShared``."""
        machine = self.machine_state
        return {
            "format": state_format,
            "policyName": policy_name,
            "machineState": {str(n): s.to_dict() for n, s in sorted(machine.items())},
            "entries": {
                uid: {name: [b.to_dict() for b in blocks] for name, blocks in entries.items()}
                for uid, entries in self._entries.items()
            },
            "podEntries": {
                uid: [b.to_dict() for b in blocks] for uid, blocks in self._pod_entries.items()
            },
            "podShared": {uid: sorted(names) for uid, names in self._shared.items() if names},
        }

    # -- one pod saved and put back (Engine.readmit) -------------------------------------------
    def save_pod(self, pod_uid: str) -> SavedPodMemory:
        """The pod's blocks and the machine state now, for :meth:`restore_pod`."""
        entries = self._entries.get(pod_uid)
        pod_entry = self._pod_entries.get(pod_uid)
        shared = self._shared.get(pod_uid)
        return SavedPodMemory(
            pod_uid,
            copy_machine_state(self.machine_state),
            None if entries is None else {name: _copied(b) for name, b in entries.items()},
            None if pod_entry is None else _copied(pod_entry),
            None if shared is None else set(shared),
        )

    def restore_pod(self, saved: SavedPodMemory) -> None:
        """Back to ``saved``: valid when only that pod changed since :meth:`save_pod`."""
        uid = saved.pod_uid
        entries, pod_entry = saved.entries, saved.pod_entry
        self.machine_state = copy_machine_state(saved.machine_state)
        if entries is not None:
            entries = {name: _copied(blocks) for name, blocks in entries.items()}
        _put(self._entries, uid, entries)
        _put(self._pod_entries, uid, None if pod_entry is None else _copied(pod_entry))
        _put(self._shared, uid, None if saved.shared is None else set(saved.shared))

    # -- writer ------------------------------------------------------------------------------
    def set_machine_state(self, machine_state: MachineState) -> None:
        """``SetMachineState``."""
        self.machine_state = machine_state

    def set_blocks(self, pod_uid: str, name: str, blocks: list[Block]) -> None:
        """``SetMemoryBlocks``: record (or replace) the container's blocks."""
        self._entries.setdefault(pod_uid, {})[name] = blocks

    def delete(self, pod_uid: str, name: str) -> list[Block] | None:
        """``Delete``: drop the container's blocks and its place on the pod shared pool; the
        blocks it held, or None. A pod's map of containers goes with its last one unless the
        pod has a pod entry (it then stays, maybe empty, until :meth:`remove_pod`)."""
        self.unmark_shared(pod_uid, name)
        entries = self._entries.get(pod_uid)
        if entries is None:
            return None
        blocks = entries.pop(name, None)
        if not entries and pod_uid not in self._pod_entries:
            del self._entries[pod_uid]
        return blocks

    def set_pod_blocks(self, pod_uid: str, blocks: list[Block]) -> None:
        """Record a pod-level pod's budget blocks."""
        self._pod_entries[pod_uid] = blocks

    def mark_shared(self, pod_uid: str, name: str) -> None:
        """Record the container as sitting on its pod's shared pool."""
        self._shared.setdefault(pod_uid, set()).add(name)

    def unmark_shared(self, pod_uid: str, name: str) -> None:
        """The container no longer sits on its pod's shared pool."""
        names = self._shared.get(pod_uid)
        if names is not None:
            names.discard(name)

    def remove_pod(self, pod_uid: str) -> tuple[dict[str, list[Block]], list[Block] | None]:
        """Forget everything recorded for the pod; its container entries and pod entry."""
        self._shared.pop(pod_uid, None)
        return self._entries.pop(pod_uid, {}), self._pod_entries.pop(pod_uid, None)

    def replace(
        self,
        entries: dict[str, dict[str, list[Block]]],
        pod_entries: dict[str, list[Block]],
        shared: dict[str, set[str]],
    ) -> None:
        """Replace every entry (``SetMemoryAssignments``); the machine state stays."""
        self._entries = entries
        self._pod_entries = pod_entries
        self._shared = shared


def default_machine_state(topology: Topology, config: MemoryManagerConfig) -> dict[int, NodeState]:
    """The machine state before any assignment: per node and type, total minus reserved (and
    for ``memory`` minus the node's hugepages). Raises MemoryManagerConfigError."""
    out: dict[int, NodeState] = {}
    for node_id in topology.numa_ids:
        node = topology.numa_nodes[node_id]
        reserved = config.reserved.get(node_id, {})
        tables: dict[str, MemoryTable] = {}
        huge_total = 0
        for name in sorted(node.memory, key=type_order):
            if name == MEMORY:
                continue
            total = node.memory[name]
            res = reserved.get(name, 0)
            tables[name] = MemoryTable(total, res, total - res, 0, total - res)
            huge_total += total
        total = node.memory.get(MEMORY, 0)
        res = reserved.get(MEMORY, 0)
        alloc = total - res - huge_total
        tables = {MEMORY: MemoryTable(total, res, alloc, 0, alloc), **tables}
        for name, table in tables.items():
            if table.allocatable < 0:
                raise MemoryManagerConfigError(
                    f"numa node {node_id}: reserved {name} {table.system_reserved} exceeds "
                    f"what the node has ({table.total} bytes, hugepages excluded)"
                )
        out[node_id] = NodeState(tables, [node_id])
    return out


def machine_state_from_dict(data: Any) -> dict[int, NodeState]:
    """A saved ``machineState`` (the layout of :meth:`NodeState.to_dict`)."""
    try:
        out: dict[int, NodeState] = {}
        for node, row in dict(data).items():
            tables = {
                str(name): MemoryTable(
                    int(t["total"]),
                    int(t["systemReserved"]),
                    int(t["allocatable"]),
                    int(t["reserved"]),
                    int(t["free"]),
                )
                for name, t in dict(row["memoryMap"]).items()
            }
            cells = [int(c) for c in row["cells"]]
            out[int(node)] = NodeState(tables, cells, int(row["numberOfAssignments"]))
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise MemoryStateError(f"memory manager state: malformed machineState ({err})") from err
    return out


def machine_states_equal(saved: dict[int, NodeState], expected: dict[int, NodeState]) -> bool:
    """``areMachineStatesEqual``: the same nodes, assignment counts, groups, memory types and
    total/system-reserved/allocatable per node; free and reserved compared as sums over each
    node's group, since a cross-NUMA release gives memory back in node order and so leaves a
    different (equally valid) per-node split than charging the remaining blocks afresh."""
    if saved.keys() != expected.keys():
        return False
    for node, s in saved.items():
        e = expected[node]
        if s.number_of_assignments != e.number_of_assignments:
            return False
        if sorted(s.cells) != sorted(e.cells):
            return False
        if s.memory_map.keys() != e.memory_map.keys():
            return False
        for name, st in s.memory_map.items():
            et = e.memory_map[name]
            if (st.total, st.system_reserved, st.allocatable) != (
                et.total,
                et.system_reserved,
                et.allocatable,
            ):
                return False
            group = [c for c in s.cells if c in saved and c in expected]
            if len(group) != len(s.cells):
                return False
            if _group_sum(saved, group, name) != _group_sum(expected, group, name):
                return False
    return True


def _group_sum(state: dict[int, NodeState], group: list[int], name: str) -> tuple[int, int]:
    free = reserved = 0
    for n in group:
        t = state[n].memory_map.get(name)
        if t is not None:
            free += t.free
            reserved += t.reserved
    return free, reserved


@dataclass(frozen=True)
class SavedPodMemory:
    """One pod's memory blocks and the machine state, as :meth:`MemoryState.save_pod` read
    them."""

    pod_uid: str
    machine_state: MachineState
    entries: dict[str, list[Block]] | None
    pod_entry: list[Block] | None
    shared: set[str] | None


def _put(table: dict[str, T], key: str, value: T | None) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


def _copied(blocks: list[Block]) -> list[Block]:
    return [Block(b.numa, b.type, b.size) for b in blocks]


def copy_machine_state(state: Mapping[int, NodeState]) -> MachineState:
    """A copy of ``state`` sharing nothing mutable (a deep copy, written out: ``deepcopy`` made
    saving one pod cost more than placing it)."""
    return {
        node: NodeState(
            {
                name: MemoryTable(t.total, t.system_reserved, t.allocatable, t.reserved, t.free)
                for name, t in ns.memory_map.items()
            },
            list(ns.cells),
            ns.number_of_assignments,
        )
        for node, ns in state.items()
    }
