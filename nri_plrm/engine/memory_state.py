"""The Memory Manager's configuration and state, with their kubelet-format (de)serialization.

Machine state per NUMA node and memory type (``memory`` and every ``hugepages-<size>``):
total, system reserved, allocatable (total - reserved, and for ``memory`` also minus the node's
hugepages, which the kernel counts in MemTotal), reserved and free, plus the node's group
(``cells``) and assignment count. The kubelet iterates requested types as a Go map (random
order); here ``memory`` comes first, then hugepages sorted by name (:func:`ordered`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_plrm.engine.spec import MEMORY, MemoryBlock, is_memory_resource
from nri_plrm.topology.model import Topology

POLICY_NONE = "None"
POLICY_STATIC = "Static"
STATE_FORMAT = 1
"""Version of :meth:`MemoryManager.snapshot`'s layout."""


class MemoryManagerConfigError(ValueError):
    """A memory manager setting the kubelet would refuse."""


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
