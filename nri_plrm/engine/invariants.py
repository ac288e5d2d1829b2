"""Invariants of the managers' accounting, checked after a restore (``Engine.verify``)."""

from __future__ import annotations

from collections.abc import Mapping

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.admitted import AdmittedPod
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.memory_manager import MemoryManager
from nri_plrm.engine.memory_state import MemoryManagerConfig
from nri_plrm.topology.model import Topology


def accounting_problems(
    topology: Topology, memory_config: MemoryManagerConfig, cpu: CPUManager, mem: MemoryManager
) -> list[str]:
    """Every CPU held once (pods, containers inside their pod's cpuset, the node shared pool)
    and every byte of memory accounted; the violations found (empty when consistent)."""
    problems: list[str] = []
    default = cpu.default_cpuset
    owned: dict[str, CPUSet] = {}
    for uid, names in cpu.entries().items():
        bubble = cpu.pod_cpus(uid)
        held = EMPTY.union(*names.values())
        if bubble is not None:
            if not held <= bubble:
                problems.append(
                    f"pod {uid}: container cpus {held - bubble} outside its pod cpuset {bubble}"
                )
            held = bubble
        owned[uid] = held
    for uid, bubble in cpu.pod_entries().items():
        owned.setdefault(uid, bubble)
    uids = sorted(owned)
    for i, a in enumerate(uids):
        if owned[a] & default:
            problems.append(f"pod {a}: cpus {owned[a] & default} also in the node shared pool")
        for b in uids[i + 1 :]:
            both = owned[a] & owned[b]
            if both:
                problems.append(f"pods {a} and {b}: both hold cpus {both}")
    union = default.union(*owned.values())
    expected = topology.all_cpus
    if cpu.options.strict_cpu_reservation:
        expected = expected - cpu.reserved_cpus
    if union != expected:
        problems.append(f"cpus accounted {union} differ from the machine's {expected}")
    for node, state in mem.machine_state.items():
        for resource, table in state.memory_map.items():
            if table.free + table.reserved != table.allocatable or table.free < 0:
                problems.append(
                    f"numa node {node} {resource}: free {table.free} + reserved "
                    f"{table.reserved} != allocatable {table.allocatable}"
                )
    try:
        MemoryManager.restore(topology, memory_config, mem.snapshot())
    except ValueError as err:
        problems.append(f"memory accounting: {err}")
    return problems


def placement_problems(
    cpu: CPUManager, pods: Mapping[str, AdmittedPod], node_shared: set[tuple[str, str]]
) -> list[str]:
    """Every live shared container of a pod budget on its pod's pool, and no container tracked
    as node-shared holding CPUs; the violations found (empty when consistent)."""
    problems: list[str] = []
    for uid, record in pods.items():
        pool = cpu.pod_shared_pool(uid) if cpu.pod_cpus(uid) is not None else None
        for name in record.shared - record.stopped if pool is not None else ():
            got = cpu.assignment(uid, name)
            if got is not None and got != pool:
                problems.append(f"pod {uid}: shared container {name} has {got}, pod pool is {pool}")
    for key in node_shared:
        if cpu.assignment(*key) is not None:
            problems.append(f"container {key}: tracked as node-shared but holds cpus")
    return problems
