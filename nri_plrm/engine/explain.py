"""Why a pod or container was rejected, in an operator's terms, from the engine's own numbers.

The kubelet's reason and message say *that* admission failed (``TopologyAffinityError: Pod
Scope pod with pod-level resources failed admission ...``); :func:`explain_rejection` adds one
line saying *why*: which resource, how much was asked, how much is free per NUMA node, and the
rule that failed. It is a pure function of the engine's state after the rejection (the engine
rolls a rejected request back, so the state is the one the request was decided against) and the
rejected request; it reads the engine and changes nothing. Free resources are those of
:func:`nri_plrm.engine.availability.free_per_numa` (``simulate``'s ``free_per_numa``).

The first rule that explains the request wins, in this order: full-pcpus-only SMT alignment, the
split of a pod budget between exclusive and shared containers, an exclusive slice of a budget
already reserved (one container at a time over NRI), not enough free on the whole node, no
single NUMA node that fits (``single-numa-node``), the narrowest NUMA set (``restricted``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from nri_plrm.base.quantity import format_bytes_human
from nri_plrm.engine.availability import free_per_numa
from nri_plrm.engine.device_explain import device_cause, with_devices
from nri_plrm.engine.device_manager import container_devices, pod_devices
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import (
    CPU,
    MEMORY,
    SMT_ALIGNMENT_ERROR,
    TOPOLOGY_AFFINITY_ERROR,
    AdmissionError,
    ContainerSpec,
    HintMap,
    PodSpec,
    ResourceList,
)
from nri_plrm.engine.topology_manager import POLICY_NONE, SCOPE_POD

POLICY_SINGLE_NUMA_NODE = "single-numa-node"
POLICY_RESTRICTED = "restricted"


def explain_rejection(
    engine: Engine,
    pod: PodSpec,
    error: AdmissionError,
    container: ContainerSpec | None = None,
    aggregate: ResourceList | None = None,
) -> str:
    """One line: the cause of ``error`` for ``pod`` (or its ``container``, when the rejection
    came at container creation), from ``engine``'s numbers. Never empty.

    ``aggregate`` is what :meth:`Engine.admit_sandbox` was given for a classic pod known only
    by its sandbox (the containers' aggregate requests): it stands for the containers."""
    facts = _Facts.of(engine)
    if aggregate and not pod.all_containers():
        probe = ContainerSpec("", requests=aggregate, limits=aggregate)
        pod = dataclasses.replace(pod, containers=(probe,))
    tm, dm = engine.topology_manager, engine.device_manager
    affinity = error.reason == TOPOLOGY_AFFINITY_ERROR
    if container is not None:
        devices = container_devices(pod, container)
        who = f"container {container.name}"
        hints = dm.get_topology_hints(pod, container) if affinity else {}
        others = _container_hints(engine, pod, container) if devices else []
        return device_cause(tm, who, devices, hints, others) or with_devices(
            _explain_container(engine, facts, pod, container, error), who, devices
        )
    if facts.pod_scope:
        cpus = engine.cpu_manager.pod_guaranteed_cpus(pod)
        memory = engine.memory_manager.pod_requests(pod) if facts.memory_pinned else {}
        who = "pod budget" if pod.has_pod_level_resources else "pod (all containers)"
        held = pod_devices(pod)
        hints = dm.get_pod_topology_hints(pod) if affinity else {}
        others = []
        if held:
            others = [engine.cpu_manager.get_pod_topology_hints(pod)]
            others.append(engine.memory_manager.get_pod_topology_hints(pod))
        return device_cause(tm, "pod", held, hints, others) or with_devices(
            _smt(facts, cpus, error)
            or _budget_split(engine, pod)
            or _placement(facts, who, cpus, memory),
            "pod",
            held,
        )
    for c in pod.all_containers():
        cpus = engine.cpu_manager.guaranteed_cpus(pod, c)
        memory = _container_memory(engine, pod, c)
        who = f"container {c.name}"
        devices = container_devices(pod, c)
        hints = dm.get_topology_hints(pod, c) if affinity else {}
        others = _container_hints(engine, pod, c) if devices else []
        found = device_cause(tm, who, devices, hints, others) or with_devices(
            _smt(facts, cpus, error)
            or _never_on_one_node(facts, who, cpus, memory)
            or _shortage(facts, who, cpus, memory)
            or _alignment(facts, who, cpus, memory),
            who,
            devices,
        )
        if found:
            return found
    return _fallback(facts, "pod", engine.cpu_manager.pod_guaranteed_cpus(pod), {})


def rejection_text(error: AdmissionError, cause: str) -> str:
    """The kubelet's message followed by the cause, as logs, Events and NRI errors carry it."""
    return f"{error.message}; cause: {cause}"


# -- what the engine holds ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Facts:
    """Free resources per NUMA node and the policy, read from the engine."""

    policy: str
    pod_scope: bool
    memory_pinned: bool
    threads_per_core: int
    full_pcpus_only: bool
    free_cpus: Mapping[int, int]
    """CPUs exclusive allocations can still take, per NUMA node."""
    free_memory: Mapping[int, Mapping[str, int]]
    """Free bytes per NUMA node and memory type."""
    whole_core_cpus: int
    """Free CPUs on cores none of whose threads is reserved (``full-pcpus-only``'s count)."""
    allocatable_cpus: Mapping[int, int] = field(default_factory=dict)
    """CPUs per NUMA node once nothing is allocated (online minus reserved)."""
    allocatable_memory: Mapping[int, Mapping[str, int]] = field(default_factory=dict)
    """Bytes per NUMA node and memory type once nothing is allocated."""

    @classmethod
    def of(cls, engine: Engine) -> _Facts:
        topo = engine.topology
        cpu, mem, tm = engine.cpu_manager, engine.memory_manager, engine.topology_manager
        nodes = free_per_numa(engine)
        free_cpus = {n.node: r.available for n in nodes for r in n.resources if r.name == CPU}
        free_memory = {
            n.node: {r.name: r.available for r in n.resources if r.name != CPU} for n in nodes
        }
        allocatable_cpus = {
            n.node: r.allocatable for n in nodes for r in n.resources if r.name == CPU
        }
        allocatable_memory = {
            n.node: {r.name: r.allocatable for r in n.resources if r.name != CPU} for n in nodes
        }
        reserved_cores = {topo.cpu_info[c].core for c in cpu.reserved_cpus}
        whole = sum(1 for c in cpu.default_cpuset if topo.cpu_info[c].core not in reserved_cores)
        return cls(
            policy=tm.policy,
            pod_scope=tm.policy != POLICY_NONE and tm.scope == SCOPE_POD,
            memory_pinned=mem.static,
            threads_per_core=topo.cpus_per_core,
            full_pcpus_only=cpu.options.full_pcpus_only,
            free_cpus=free_cpus,
            free_memory=free_memory,
            whole_core_cpus=whole,
            allocatable_cpus=allocatable_cpus,
            allocatable_memory=allocatable_memory,
        )

    def cpu_total(self) -> int:
        return sum(self.free_cpus.values())

    def memory_total(self, name: str) -> int:
        return sum(m.get(name, 0) for m in self.free_memory.values())

    def cpus_by_node(self) -> str:
        return ", ".join(f"NUMA {n}: {c}" for n, c in self.free_cpus.items())

    def memory_by_node(self, name: str) -> str:
        return ", ".join(
            f"NUMA {n}: {format_bytes_human(m.get(name, 0))}" for n, m in self.free_memory.items()
        )

    def nodes_with_cpus(self, n: int) -> list[int]:
        return [node for node, cpus in self.free_cpus.items() if cpus >= n]

    def nodes_with_memory(self, memory: Mapping[str, int]) -> list[int]:
        return [
            node
            for node, free in self.free_memory.items()
            if all(free.get(name, 0) >= size for name, size in memory.items())
        ]


def _container_hints(engine: Engine, pod: PodSpec, c: ContainerSpec) -> list[HintMap | None]:
    """The CPU and memory managers' hints for a container (in the state after a rollback)."""
    return [
        engine.cpu_manager.get_topology_hints(pod, c),
        engine.memory_manager.get_topology_hints(pod, c),
    ]


def _container_memory(engine: Engine, pod: PodSpec, c: ContainerSpec) -> dict[str, int]:
    if not engine.memory_manager.static:
        return {}
    return engine.memory_manager.container_requests(pod, c)


def _cpus(n: int) -> str:
    return f"{n} CPU" if n == 1 else f"{n} CPUs"


def _exclusive(n: int) -> str:
    return f"{n} exclusive CPU" if n == 1 else f"{n} exclusive CPUs"


def _exclusively(fmt: Callable[[int], str], n: int) -> str:
    """``4 exclusive CPUs`` or ``2Gi memory exclusively``."""
    return _exclusive(n) if fmt is _cpus else f"{fmt(n)} exclusively"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _amount(name: str, size: int) -> str:
    return f"{format_bytes_human(size)} {name}"


def _memory_fmt(name: str) -> Callable[[int], str]:
    return lambda size: _amount(name, size)


def _memory_demand(engine: Engine, pod: PodSpec, name: str) -> Callable[[ContainerSpec], int]:
    return lambda c: engine.memory_manager.container_requests(pod, c).get(name, 0)


def _nodes(nodes: Sequence[int]) -> str:
    return ",".join(map(str, nodes))


# -- rules ---------------------------------------------------------------------------------


def _smt(facts: _Facts, n: int, error: AdmissionError) -> str:
    """``full-pcpus-only``: whole cores only, never a core shared with reserved CPUs."""
    if n == 0 or not facts.full_pcpus_only:
        return ""
    t = facts.threads_per_core
    if n % t:
        low, high = n - n % t, n - n % t + t
        options = f"{low} or {high}" if low else str(high)
        return (
            f"full-pcpus-only: {_cpus(n)} asked is not a multiple of the {t} threads per core; "
            f"ask for whole cores ({options} CPUs)"
        )
    if error.reason == SMT_ALIGNMENT_ERROR or n > facts.whole_core_cpus:
        return (
            f"full-pcpus-only: {_cpus(n)} asked, only {facts.whole_core_cpus} free CPUs sit on "
            "whole cores without a reserved thread"
        )
    return ""


def _budget_split(engine: Engine, pod: PodSpec) -> str:
    """A pod-level budget that exclusive containers use up while a shared one needs some."""
    cpu, mem = engine.cpu_manager, engine.memory_manager
    if not pod.has_pod_level_resources:
        return ""
    if cpu.validate_pod_scope_resources(pod) is not None:
        return _split(
            pod, cpu.pod_guaranteed_cpus(pod), lambda c: cpu.guaranteed_cpus(pod, c), _cpus
        )
    if mem.static and mem.validate_pod_scope_resources(pod) is not None:
        for name, total in mem.pod_requests(pod).items():
            found = _split(pod, total, _memory_demand(engine, pod, name), _memory_fmt(name))
            if found:
                return found
    return ""


def _split(
    pod: PodSpec, total: int, demand: Callable[[ContainerSpec], int], fmt: Callable[[int], str]
) -> str:
    held = 0
    shared: list[str] = []
    for c in pod.init_containers:
        asked = demand(c)
        if c.restartable:
            if asked:
                held += asked
            else:
                shared.append(c.name)
            continue
        if asked > total - held:
            return (
                f"init container {c.name} asks {_exclusively(fmt, asked)}, but exclusive "
                f"sidecars hold {fmt(held)} of the pod budget {fmt(total)}: "
                f"{fmt(total - held)} left"
            )
        if not asked and held >= total:
            return (
                f"shared init container {c.name} needs the pod shared pool, but exclusive "
                f"sidecars hold the whole pod budget {fmt(total)}"
            )
    for c in pod.containers:
        asked = demand(c)
        if asked:
            held += asked
        else:
            shared.append(c.name)
    if not shared or held < total:
        return ""
    relation = "=" if held == total else ">"
    return (
        f"exclusive containers request {fmt(held)} {relation} pod budget {fmt(total)}, nothing "
        f"left for the {_plural(len(shared), 'shared container')} ({', '.join(shared)})"
    )


def _explain_container(
    engine: Engine, facts: _Facts, pod: PodSpec, c: ContainerSpec, error: AdmissionError
) -> str:
    """A container rejected at creation: a slice of its pod's reserved budget, or the node."""
    cpu, mem = engine.cpu_manager, engine.memory_manager
    cpus = cpu.guaranteed_cpus(pod, c)
    memory = _container_memory(engine, pod, c)
    found = _smt(facts, cpus, error)
    if found:
        return found
    bubble = cpu.pod_cpus(pod.uid)
    if bubble is not None:
        left = len(cpu.pod_shared_pool(pod.uid))
        found = _slice(c.name, cpus, left, len(bubble), _cpus)
        if found:
            return found
    if mem.pod_blocks(pod.uid) is not None:
        pool = mem.pod_pool(pod.uid)
        budget = {b.resource: 0 for b in mem.pod_blocks(pod.uid) or ()}
        for b in mem.pod_blocks(pod.uid) or ():
            budget[b.resource] += b.size
        for name, left in pool.items():
            asked = memory.get(name, 0)
            found = _slice(c.name, asked, left, budget.get(name, left), _memory_fmt(name))
            if found:
                return found
    if bubble is not None:
        return _fallback(facts, f"container {c.name}", cpus, memory)
    return _placement(facts, f"container {c.name}", cpus, memory)


def _slice(name: str, asked: int, left: int, budget: int, fmt: Callable[[int], str]) -> str:
    if asked > left:
        return (
            f"container {name} asks {_exclusively(fmt, asked)}, only {fmt(left)} of the pod budget "
            f"{fmt(budget)} are left (exclusive containers hold {fmt(budget - left)})"
        )
    if asked and asked == left:
        return (
            f"container {name} asks {_exclusively(fmt, asked)} = all that is left of the pod "
            f"budget {fmt(budget)}, nothing left for the pod's shared containers"
        )
    if not asked and left == 0:
        return (
            f"shared container {name} needs the pod shared pool, but exclusive containers hold "
            f"the whole pod budget {fmt(budget)}"
        )
    return ""


def _placement(facts: _Facts, who: str, cpus: int, memory: Mapping[str, int]) -> str:
    return (
        _never_on_one_node(facts, who, cpus, memory)
        or _shortage(facts, who, cpus, memory)
        or _alignment(facts, who, cpus, memory)
        or _fallback(facts, who, cpus, memory)
    )


def _never_on_one_node(facts: _Facts, who: str, cpus: int, memory: Mapping[str, int]) -> str:
    """single-numa-node, and more than any NUMA node of the machine has even with nothing
    allocated: freeing resources cannot help."""
    if facts.policy != POLICY_SINGLE_NUMA_NODE:
        return ""
    rule = "topology manager policy single-numa-node needs one node for all of it"
    largest_cpus = max(facts.allocatable_cpus.values(), default=0)
    if facts.allocatable_cpus and cpus > largest_cpus:
        return (
            f"{who} asks {_exclusive(cpus)}, no NUMA node of this machine has {_cpus(cpus)} "
            f"(largest: {largest_cpus} allocatable), so it can never be admitted here; {rule}"
        )
    for name, size in memory.items():
        largest = max((m.get(name, 0) for m in facts.allocatable_memory.values()), default=0)
        if facts.allocatable_memory and size > largest:
            return (
                f"{who} asks {_amount(name, size)}, no NUMA node of this machine has that much "
                f"(largest: {format_bytes_human(largest)} allocatable), so it can never be "
                f"admitted here; {rule}"
            )
    return ""


def _shortage(facts: _Facts, who: str, cpus: int, memory: Mapping[str, int]) -> str:
    """More than the whole node has free."""
    if cpus > facts.cpu_total():
        return (
            f"{who} asks {_exclusive(cpus)}, the node has {facts.cpu_total()} free "
            f"({facts.cpus_by_node()})"
        )
    for name, size in memory.items():
        total = facts.memory_total(name)
        if size > total:
            return (
                f"{who} asks {_amount(name, size)}, the node has {format_bytes_human(total)} "
                f"free ({facts.memory_by_node(name)})"
            )
    return ""


def _alignment(facts: _Facts, who: str, cpus: int, memory: Mapping[str, int]) -> str:
    """Enough on the node, but not where the topology manager policy requires it."""
    if facts.policy == POLICY_SINGLE_NUMA_NODE:
        rule = "topology manager policy single-numa-node needs one node for all of it"
        cpu_nodes = facts.nodes_with_cpus(cpus) if cpus else list(facts.free_cpus)
        mem_nodes = facts.nodes_with_memory(memory) if memory else list(facts.free_memory)
        if not cpu_nodes:
            return (
                f"{who} asks {_exclusive(cpus)}, no single NUMA node has that many free "
                f"({facts.cpus_by_node()}); {rule}"
            )
        if not mem_nodes:
            name, size = _largest_shortfall(facts, memory)
            return (
                f"{who} asks {_amount(name, size)}, no single NUMA node has that much free "
                f"({facts.memory_by_node(name)}); {rule}"
            )
        if not set(cpu_nodes) & set(mem_nodes):
            asked = ", ".join(_amount(n, s) for n, s in memory.items())
            return (
                f"{who}: {_cpus(cpus)} fit on NUMA {_nodes(cpu_nodes)} only and {asked} on NUMA "
                f"{_nodes(mem_nodes)} only, no single NUMA node has both; {rule}"
            )
    if facts.policy == POLICY_RESTRICTED:
        return (
            f"{who} asks {_exclusive(cpus)}"
            + "".join(f" and {_amount(n, s)}" for n, s in memory.items())
            + " but the narrowest NUMA node set that could hold it has not enough free "
            + f"(CPUs {facts.cpus_by_node()}"
            + "".join(f"; {n} {facts.memory_by_node(n)}" for n in memory)
            + "); topology manager policy restricted admits only that preferred set"
        )
    return ""


def _largest_shortfall(facts: _Facts, memory: Mapping[str, int]) -> tuple[str, int]:
    """The memory type no single NUMA node can hold (the first in the request's order)."""
    for name, size in memory.items():
        if not any(free.get(name, 0) >= size for free in facts.free_memory.values()):
            return name, size
    name = next(iter(memory), MEMORY)
    return name, memory.get(name, 0)


def _fallback(facts: _Facts, who: str, cpus: int, memory: Mapping[str, int]) -> str:
    asked = [f"{_exclusive(cpus)}"] if cpus else []
    asked += [_amount(n, s) for n, s in memory.items()]
    names = list(memory) or ([MEMORY] if facts.memory_pinned else [])
    free = f"free CPUs per NUMA node: {facts.cpus_by_node()}" + "".join(
        f"; free {n}: {facts.memory_by_node(n)}" for n in names
    )
    return f"{who} asks {' and '.join(asked) or 'no exclusive resources'}; {free}"
