"""Memory Manager ``Static`` policy, kubelet-exact, with pod-level resources (KEP-5526).

Machine state per NUMA node and memory type (``memory`` and every ``hugepages-<size>``):
total, system reserved, allocatable (total - reserved, and for ``memory`` also minus the node's
hugepages, which the kernel counts in MemTotal), reserved and free, plus the node's group
(``cells``) and assignment count. Containers get blocks (NUMA nodes, type, size); pod-level pods
in pod scope get pod blocks charged once, and their containers' blocks are views of them.

Determinism: the kubelet iterates the requested types as a Go map (random order). Here a
request is always iterated ``memory`` first, then hugepages sorted by name; block lists, hint
maps and the type named in validation messages follow that order.

Init-container reuse (the kubelet's ``initContainersReusableMemory``) is derived from the blocks:
see :meth:`MemoryManager.reusable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from nri_plrm.engine.bitmask import bits, is_narrower_than, iterate_bitmasks, mask_of
from nri_plrm.engine.cpu_requests import (
    QOS_GUARANTEED,
    effective_requests,
    is_container_equivalent_guaranteed,
    pod_qos,
)
from nri_plrm.engine.spec import (
    EMPTY_POD_SHARED_POOL_ERROR,
    MEMORY,
    AdmissionError,
    ContainerKind,
    ContainerSpec,
    HintMap,
    MemoryBlock,
    PodSpec,
    TopologyHint,
    is_memory_resource,
    unexpected,
)
from nri_plrm.engine.topology_manager import HintList
from nri_plrm.topology.model import Topology

POLICY_NONE = "None"
POLICY_STATIC = "Static"
_SHAPE_CACHE_SIZE = 256
"""Hint lists kept per machine-state shape (see :meth:`MemoryManager.calculate_hints`)."""
STATE_FORMAT = 1
"""Version of :meth:`MemoryManager.to_dict`'s layout."""


class MemoryManagerConfigError(ValueError):
    """A memory manager setting the kubelet would refuse."""


class MemoryStateError(ValueError):
    """A saved state that does not match this machine and configuration."""


def _type_order(name: str) -> tuple[bool, str]:
    return (name != MEMORY, name)


def ordered(resources: Mapping[str, int]) -> dict[str, int]:
    """The request with ``memory`` first and hugepages sorted (the documented iteration order)."""
    return {k: resources[k] for k in sorted(resources, key=_type_order)}


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


@dataclass
class _Block:
    numa: tuple[int, ...]
    type: str
    size: int

    def frozen(self) -> MemoryBlock:
        return MemoryBlock(self.numa, self.type, self.size)

    def to_dict(self) -> dict[str, Any]:
        return {"numaAffinity": list(self.numa), "type": self.type, "size": self.size}


def _block_from_dict(data: Mapping[str, Any]) -> _Block:
    numa = tuple(int(n) for n in data["numaAffinity"])
    size = int(data["size"])
    kind = str(data["type"])
    if size < 0 or not numa:
        raise MemoryStateError(f"memory block {dict(data)!r}: needs numa nodes and a size >= 0")
    return _Block(numa, kind, size)


def _pod_guaranteed(pod: PodSpec) -> bool:
    return pod_qos(pod) == QOS_GUARANTEED


def _memory_requests(resources: Mapping[str, int]) -> dict[str, int]:
    return ordered({k: v for k, v in resources.items() if is_memory_resource(k)})


class MemoryManager:
    """Machine state, container and pod blocks, hints and allocation of the Static policy."""

    def __init__(self, topology: Topology, config: MemoryManagerConfig) -> None:
        for node in config.reserved:
            if node not in topology.numa_nodes:
                raise MemoryManagerConfigError(
                    f"reserved memory names numa node {node}, which this machine does not have "
                    f"(nodes {list(topology.numa_ids)})"
                )
        self.topology = topology
        self.config = config
        self.machine_state: dict[int, NodeState] = self._default_machine_state()
        self._entries: dict[str, dict[str, list[_Block]]] = {}
        self._pod_entries: dict[str, list[_Block]] = {}
        self._shared: dict[str, set[str]] = {}
        """Containers of pod-level pods that sit on the pod shared pool (incremental mode)."""
        self._numa_ids = topology.numa_ids
        self._masks = [(m, bits(m)) for m in iterate_bitmasks(self._numa_ids)]
        self._min_affinity_cache: dict[tuple[tuple[str, int], ...], int] = {}
        self._hint_cache: dict[tuple[int, bool], TopologyHint] = {}
        self._shape_cache: dict[Any, HintList] = {}
        self._all_masks_cache: dict[
            tuple[tuple[tuple[str, int], ...], int], list[TopologyHint]
        ] = {}

    @property
    def static(self) -> bool:
        """True for the Static policy (``None`` pins nothing)."""
        return self.config.policy == POLICY_STATIC

    # machine state ----------------------------------------------------------------------------

    def _default_machine_state(self) -> dict[int, NodeState]:
        out: dict[int, NodeState] = {}
        for node_id in self.topology.numa_ids:
            node = self.topology.numa_nodes[node_id]
            reserved = self.config.reserved.get(node_id, {})
            tables: dict[str, MemoryTable] = {}
            huge_total = 0
            for name in sorted(node.memory, key=_type_order):
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

    def _table(self, node: int, name: str) -> MemoryTable | None:
        return self.machine_state[node].memory_map.get(name)

    def _free(self, node: int, name: str) -> int:
        t = self._table(node, name)
        return t.free if t is not None else 0

    def _allocatable(self, node: int, name: str) -> int:
        t = self._table(node, name)
        return t.allocatable if t is not None else 0

    def _charge(self, numa: tuple[int, ...], name: str, size: int) -> None:
        """``updateMachineState``: count the assignment on every node, take memory in order."""
        for node in numa:
            state = self.machine_state[node]
            state.number_of_assignments += 1
            state.cells = list(numa)
            if size == 0:
                continue
            t = state.memory_map.get(name)
            if t is None or t.free <= 0:
                continue
            take = min(t.free, size)
            t.reserved += take
            t.free -= take
            size -= take

    def _release(self, blocks: Iterable[_Block]) -> None:
        """``releaseMemory``: uncount the assignment, give memory back in node order."""
        for b in blocks:
            size = b.size
            for node in b.numa:
                state = self.machine_state[node]
                state.number_of_assignments -= 1
                if state.number_of_assignments == 0:
                    state.cells = [node]
                if size == 0:
                    continue
                t = state.memory_map.get(b.type)
                if t is None or t.reserved == 0:
                    continue
                give = min(t.reserved, size)
                t.free += give
                t.reserved -= give
                size -= give

    # requests ---------------------------------------------------------------------------------

    def container_requests(self, pod: PodSpec, container: ContainerSpec) -> dict[str, int]:
        """``getContainerRequestedResources``: {} for non-equivalent-Guaranteed containers of
        pod-level pods; otherwise the container's memory and hugepages requests."""
        if pod.has_pod_level_resources and not is_container_equivalent_guaranteed(container):
            return {}
        return _memory_requests(effective_requests(container.requests, container.limits))

    def pod_requests(self, pod: PodSpec) -> dict[str, int]:
        """``getPodRequestedResources``: pod-level memory/hugepages (> 0), or the classic
        aggregate ``max(largest init, apps + sidecars)`` for types the app containers request."""
        if pod.has_pod_level_resources:
            req = effective_requests(pod.requests, pod.limits)
            return _memory_requests({k: v for k, v in req.items() if v > 0})
        by_init: dict[str, int] = {}
        by_sidecars: dict[str, int] = {}
        for c in pod.init_containers:
            for name, qty in self.container_requests(pod, c).items():
                by_init.setdefault(name, 0)
                if c.restartable:
                    by_sidecars[name] = by_sidecars.get(name, 0) + qty
                elif by_sidecars.get(name, 0) + qty > by_init[name]:
                    by_init[name] = by_sidecars.get(name, 0) + qty
        by_apps: dict[str, int] = {}
        for c in pod.containers:
            for name, qty in self.container_requests(pod, c).items():
                by_apps[name] = by_apps.get(name, 0) + qty
        out: dict[str, int] = {}
        for name, qty in by_apps.items():
            out[name] = max(qty + by_sidecars.get(name, 0), by_init.get(name, 0))
        return ordered(out)

    # hints ------------------------------------------------------------------------------------

    def reusable(self, pod: PodSpec, name: str | None = None) -> dict[int, dict[str, int]]:
        """Init-container memory the pod's next allocation may reuse, per NUMA mask and type:
        what is left of the blocks of the pod's regular init containers listed before ``name``
        (all of them when ``name`` is not an init container).

        The kubelet keeps this in memory (``initContainersReusableMemory``: the largest init
        block, less what later containers took, dropped whenever another pod allocates) and
        shrinks the init blocks by exactly what a container reuses
        (``updateInitContainersMemoryBlocks``), so both agree when a pod's containers are
        allocated in spec order, as the kubelet does. Deriving it from the blocks keeps the
        machine state equal to the sum of the blocks (what ``validateState`` checks) also when
        NRI interleaves pods, when stopped containers had run side by side, and after a restore.
        """
        entries = self._entries.get(pod.uid)
        out: dict[int, dict[str, int]] = {}
        if not entries:
            return out
        for ic in pod.init_containers:
            if ic.name == name:
                break
            if ic.kind is not ContainerKind.INIT:
                continue
            for b in entries.get(ic.name, ()):
                if b.size:
                    row = out.setdefault(mask_of(b.numa), {})
                    row[b.type] = row.get(b.type, 0) + b.size
        return out

    def _min_affinity(self, requests: Mapping[str, int]) -> int:
        """The narrowest width of any mask whose allocatable memory fits every requested type
        (busy or not), as ``calculateHints`` computes it; cached (allocatable never changes)."""
        key = tuple(requests.items())
        cached = self._min_affinity_cache.get(key)
        if cached is not None:
            return cached
        ids = self._numa_ids
        result = len(ids)
        for width in range(1, len(ids) + 1):
            if any(
                all(sum(self._allocatable(n, name) for n in combo) >= size for name, size in key)
                for combo in combinations(ids, width)
            ):
                result = width
                break
        self._min_affinity_cache[key] = result
        return result

    def _hint(self, mask: int, preferred: bool) -> TopologyHint:
        key = (mask, preferred)
        hint = self._hint_cache.get(key)
        if hint is None:
            hint = self._hint_cache[key] = TopologyHint(mask, preferred)
        return hint

    def _fits(
        self, nodes: Iterable[int], requests: Mapping[str, int], reusable: Mapping[str, int]
    ) -> bool:
        nodes = tuple(nodes)
        for name, size in requests.items():
            if sum(self._allocatable(n, name) for n in nodes) < size:
                return False
            if sum(self._free(n, name) for n in nodes) + reusable.get(name, 0) < size:
                return False
        return True

    def calculate_hints(
        self, pod: PodSpec, requests: Mapping[str, int], container_name: str | None = None
    ) -> dict[str, list[TopologyHint]]:
        """``calculateHints``: every NUMA mask with enough allocatable, group-compatible and free
        memory for all requested types, in ``IterateBitMasks`` order; preferred = the narrowest
        width any mask's allocatable memory could hold. Free memory counts what container
        ``container_name`` may reuse (:meth:`reusable`).

        The group rules leave few masks to test: single nodes outside multi-NUMA groups, the
        existing groups, and sets of nodes without any assignment (where free equals
        allocatable, so when each of them fits alone every such set fits). Without
        init-container reuse the answer depends only on the request, the fitting single nodes
        and groups and the unused nodes with their free memory, so it is cached by that shape.
        The returned lists are shared between types and cached: callers must not mutate them.
        """
        ms = self.machine_state
        ids = self._numa_ids
        reusable = self.reusable(pod, container_name)
        min_affinity = self._min_affinity(requests)
        unused = [n for n in ids if ms[n].number_of_assignments == 0]
        no_reuse = not any(reusable.values())
        every_single_fits = all(self._fits((n,), requests, {}) for n in ids)
        if len(unused) == len(ids) and every_single_fits and no_reuse:
            key = (tuple(requests.items()), min_affinity)
            cached = self._all_masks_cache.get(key)
            if cached is None:
                cached = HintList(
                    self._hint(m, m.bit_count() == min_affinity) for m, _ in self._masks
                )
                self._all_masks_cache[key] = cached
            return {name: cached for name in requests} if cached else {}
        singles = tuple(
            n
            for n in ids
            if len(ms[n].cells) == 1 and self._fits((n,), requests, reusable.get(1 << n, {}))
        )
        groups = tuple(
            sorted(
                g
                for g in {mask_of(ms[n].cells) for n in ids if len(ms[n].cells) > 1}
                if all(
                    sorted(ms[n].cells) == list(bits(g))
                    for n in bits(g)
                    if ms[n].number_of_assignments
                )
                and self._fits(bits(g), requests, reusable.get(g, {}))
            )
        )
        unused_free = tuple(self._free(n, name) for n in unused for name in requests)
        shape = (tuple(requests.items()), min_affinity, singles, tuple(unused), unused_free, groups)
        if no_reuse:
            cached = self._shape_cache.get(shape)
            if cached is not None:
                return {name: cached for name in requests} if cached else {}
        by_width: dict[int, list[int]] = {}
        if singles:
            by_width[1] = [1 << n for n in singles]
        all_unused_fit = no_reuse and all(self._fits((n,), requests, {}) for n in unused)
        for width in range(2, len(unused) + 1):
            for combo in combinations(unused, width):
                mask = mask_of(combo)
                if all_unused_fit or self._fits(combo, requests, reusable.get(mask, {})):
                    by_width.setdefault(width, []).append(mask)
        for group in groups:
            row = by_width.setdefault(group.bit_count(), [])
            row.append(group)
            row.sort(key=bits)
        hints = HintList(
            self._hint(m, width == min_affinity)
            for width in sorted(by_width)
            for m in by_width[width]
        )
        if no_reuse:
            if len(self._shape_cache) >= _SHAPE_CACHE_SIZE:
                self._shape_cache.clear()
            self._shape_cache[shape] = hints
        if not hints:
            return {}
        return {name: hints for name in requests}

    @staticmethod
    def _regenerate(blocks: list[_Block], requests: Mapping[str, int]) -> HintMap | None:
        hints: dict[str, list[TopologyHint]] = {name: [] for name in requests}
        if len(blocks) != len(requests):
            return None
        for b in blocks:
            if b.type not in requests or b.size != requests[b.type]:
                return None
            hints[b.type].append(TopologyHint(mask_of(b.numa), True))
        return hints

    def get_topology_hints(self, pod: PodSpec, container: ContainerSpec) -> HintMap | None:
        """Container-scope hints; None (no preference) for non-Guaranteed pods and, as v1.37
        does, for containers that request no exclusive memory."""
        if not self.static or not _pod_guaranteed(pod):
            return None
        requests = self.container_requests(pod, container)
        if not requests:
            return None
        blocks = self._entries.get(pod.uid, {}).get(container.name)
        if blocks is not None:
            return self._regenerate(blocks, requests)
        return self.calculate_hints(pod, requests, container.name)

    def get_pod_topology_hints(self, pod: PodSpec) -> HintMap | None:
        """Pod-scope hints from the pod's requests; ``{type: []}`` when a pod-level pod fails
        ``validate_pod_scope_resources``; regenerated from existing blocks on re-admission."""
        if not self.static or not _pod_guaranteed(pod):
            return None
        requests = self.pod_requests(pod)
        if pod.has_pod_level_resources:
            if self.validate_pod_scope_resources(pod) is not None:
                return {name: [] for name in requests}
            pod_blocks = self._pod_entries.get(pod.uid)
            if pod_blocks is not None and requests:
                return self._regenerate(pod_blocks, requests)
        if not requests:
            return None
        for c in pod.all_containers():
            blocks = self._entries.get(pod.uid, {}).get(c.name)
            if blocks is not None:
                return self._regenerate(blocks, requests)
        return self.calculate_hints(pod, requests)

    # validation -------------------------------------------------------------------------------

    def validate_pod_scope_resources(self, pod: PodSpec) -> str | None:
        """The memory half of ``validatePodScopeResources``: the kubelet's message, or None."""
        total = self.pod_requests(pod)
        sidecar = dict.fromkeys(total, 0)
        shared_long_running = False
        for c in pod.init_containers:
            req = self.container_requests(pod, c)
            if not c.restartable:
                if req:
                    for name, size in total.items():
                        pool = size - sidecar[name]
                        if req.get(name, 0) > pool:
                            return (
                                "pod rejected, largest exclusive init container requests "
                                f"{req.get(name, 0)} of {name}, but only {pool} available"
                            )
                else:
                    for name, size in total.items():
                        if sidecar[name] >= size:
                            return (
                                "pod rejected, pod has shared init containers but no "
                                f"{name} available for them"
                            )
                continue
            if not req:
                shared_long_running = True
                continue
            for name, size in req.items():
                sidecar[name] = sidecar.get(name, 0) + size
        for c in pod.containers:
            req = self.container_requests(pod, c)
            if not req:
                shared_long_running = True
                continue
            for name, size in req.items():
                sidecar[name] = sidecar.get(name, 0) + size
        if shared_long_running:
            for name, size in total.items():
                if sidecar[name] >= size:
                    return (
                        f"pod rejected, sum of exclusive container {name} requests equals pod "
                        "budget, leaving no memory for shared containers"
                    )
        return None

    # allocation -------------------------------------------------------------------------------

    @staticmethod
    def _find_best_hint(hints: Iterable[TopologyHint]) -> TopologyHint:
        best = TopologyHint(None, False)
        for h in hints:
            if best.numa_affinity is None:
                best = h
                continue
            if h.preferred and not best.preferred:
                best = h
                continue
            if (
                h.preferred == best.preferred
                and h.numa_affinity is not None
                and best.numa_affinity is not None
                and is_narrower_than(h.numa_affinity, best.numa_affinity)
            ):
                best = h
        return best

    @staticmethod
    def _main_hints(hints: Mapping[str, list[TopologyHint]]) -> list[TopologyHint]:
        """The kubelet reads the ``memory`` list (all types' lists are equal)."""
        if MEMORY in hints:
            return hints[MEMORY]
        return next(iter(hints.values()), [])

    def _choose_affinity(
        self,
        pod: PodSpec,
        requests: Mapping[str, int],
        hint: TopologyHint | None,
        container_name: str | None = None,
    ) -> int:
        """Default hint, hint extension and the single/multi-NUMA rule of ``Allocate``
        (``container_name``: the container being allocated, for :meth:`reusable`)."""
        best = hint if hint is not None else TopologyHint(None, False)
        if best.numa_affinity is None:
            hints = self.calculate_hints(pod, requests, container_name)
            if not hints:
                raise unexpected(
                    "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes "
                    "with enough memory is available"
                )
            default = self._find_best_hint(self._main_hints(hints))
            if not default.preferred and best.preferred:
                raise unexpected("[memorymanager] failed to find the default preferred hint")
            best = default
        mask = best.numa_affinity or 0
        if not all(
            sum(self._free(n, name) for n in bits(mask)) >= size for name, size in requests.items()
        ):
            candidates = [
                h
                for h in self._main_hints(self.calculate_hints(pod, requests, container_name))
                if h.numa_affinity is not None and mask & h.numa_affinity == mask
            ]
            if not candidates:
                raise unexpected(
                    "[memorymanager] failed to find NUMA nodes to extend the current topology hint"
                )
            extended = self._find_best_hint(candidates)
            if not extended.preferred and best.preferred:
                raise unexpected("[memorymanager] failed to find the extended preferred hint")
            best = extended
        mask = best.numa_affinity or 0
        nodes = bits(mask)
        if len(nodes) > 1:
            for n in nodes:
                state = self.machine_state[n]
                if state.number_of_assignments == 0:
                    continue
                if len(state.cells) == 1 or sorted(state.cells) != list(nodes):
                    raise unexpected("[memorymanager] preferred hint violates NUMA node allocation")
        return mask

    def allocate(self, pod: PodSpec, container: ContainerSpec, hint: TopologyHint | None) -> None:
        """``Allocate`` (container path, §3.4); idempotent. Raises ``AdmissionError``."""
        if not self.static or not _pod_guaranteed(pod):
            return
        requests = self.container_requests(pod, container)
        if not requests:
            return
        if container.name in self._entries.get(pod.uid, {}):
            return
        mask = self._choose_affinity(pod, requests, hint, container.name)
        numa = bits(mask)
        reusable = self.reusable(pod, container.name).get(mask, {})
        blocks: list[_Block] = []
        for name, size in requests.items():
            blocks.append(_Block(numa, name, size))
            self._charge(numa, name, size - min(size, reusable.get(name, 0)))
        self._entries.setdefault(pod.uid, {})[container.name] = blocks
        self._shrink_init_blocks(pod, container, blocks)

    def _shrink_init_blocks(
        self, pod: PodSpec, container: ContainerSpec, blocks: list[_Block]
    ) -> None:
        entries = self._entries.get(pod.uid, {})
        for cb in blocks:
            left = cb.size
            for ic in pod.init_containers:
                if ic.name == container.name or left == 0:
                    break
                if ic.restartable:
                    continue
                for ib in entries.get(ic.name, []):
                    if ib.size == 0 or ib.type != cb.type or ib.numa != cb.numa:
                        continue
                    if ib.size > left:
                        ib.size -= left
                        left = 0
                    else:
                        left -= ib.size
                        ib.size = 0

    def allocate_pod(self, pod: PodSpec, hint: TopologyHint | None) -> None:
        """``AllocatePod`` (§4.6): charge the pod-level budget once, then give every container
        its exclusive blocks or the pod shared pool's. Idempotent: an existing pod entry is kept.
        Raises ``AdmissionError``."""
        if not self.static or not _pod_guaranteed(pod):
            return
        if pod.uid in self._pod_entries:
            return
        message = self.validate_pod_scope_resources(pod)
        if message is not None:
            raise AdmissionError(EMPTY_POD_SHARED_POOL_ERROR, message)
        total = self.pod_requests(pod)
        if not total:
            return
        mask = self._choose_affinity(pod, total, hint)
        numa = bits(mask)
        self._pod_entries[pod.uid] = [_Block(numa, name, size) for name, size in total.items()]
        for name, size in total.items():
            self._charge(numa, name, size)
        sidecar = dict.fromkeys(total, 0)
        exclusive: dict[str, list[_Block]] = {}
        for c in pod.init_containers:
            req = self.container_requests(pod, c)
            if not req:
                if c.restartable:
                    continue
                exclusive[c.name] = [
                    _Block(numa, name, size - sidecar[name])
                    for name, size in total.items()
                    if size - sidecar[name] > 0
                ]
                continue
            exclusive[c.name] = [_Block(numa, name, size) for name, size in req.items() if size > 0]
            if c.restartable:
                for name, size in req.items():
                    sidecar[name] = sidecar.get(name, 0) + size
        app = {name: size - sidecar[name] for name, size in total.items()}
        for c in pod.containers:
            req = self.container_requests(pod, c)
            if not req:
                continue
            exclusive[c.name] = [_Block(numa, name, size) for name, size in req.items() if size > 0]
            for name, size in req.items():
                app[name] = app.get(name, 0) - size
        entries = self._entries.setdefault(pod.uid, {})
        for c in pod.all_containers():
            if c.name in exclusive:
                entries[c.name] = exclusive[c.name]
            else:
                entries[c.name] = [
                    _Block(numa, name, size) for name, size in app.items() if size > 0
                ]

    # incremental primitives (NRI: containers one at a time) ------------------------------------

    def allocate_pod_budget(self, pod: PodSpec, hint: TopologyHint | None) -> tuple[int, ...]:
        """Charge a pod-level pod's memory budget at sandbox time (no containers known yet).

        Same placement as :meth:`allocate_pod`; idempotent. Returns the NUMA nodes (empty when
        the pod pins no memory)."""
        if not self.static or not _pod_guaranteed(pod):
            return ()
        existing = self._pod_entries.get(pod.uid)
        if existing is not None:
            return existing[0].numa if existing else ()
        total = self.pod_requests(pod)
        if not total:
            return ()
        numa = bits(self._choose_affinity(pod, total, hint))
        self._pod_entries[pod.uid] = [_Block(numa, name, size) for name, size in total.items()]
        for name, size in total.items():
            self._charge(numa, name, size)
        return numa

    def pod_pool(self, pod_uid: str) -> dict[str, int]:
        """What is left of a pod-level pod's memory budget: budget minus live exclusive blocks."""
        pod_blocks = self._pod_entries.get(pod_uid)
        if pod_blocks is None:
            return {}
        left = {b.type: b.size for b in pod_blocks}
        shared = self._shared.get(pod_uid, set())
        for name, blocks in self._entries.get(pod_uid, {}).items():
            if name in shared:
                continue
            for b in blocks:
                left[b.type] = left.get(b.type, 0) - b.size
        return left

    def take_from_pod(
        self, pod_uid: str, name: str, requests: Mapping[str, int]
    ) -> list[MemoryBlock]:
        """Record an exclusive slice of a pod-level pod's budget for a container."""
        pod_blocks = self._pod_entries[pod_uid]
        numa = pod_blocks[0].numa
        blocks = [_Block(numa, t, s) for t, s in _memory_requests(requests).items() if s > 0]
        self._entries.setdefault(pod_uid, {})[name] = blocks
        self._shared_of(pod_uid).discard(name)
        return [b.frozen() for b in blocks]

    def _shared_of(self, pod_uid: str) -> set[str]:
        return self._shared.setdefault(pod_uid, set())

    def share_pod_pool(self, pod_uid: str, name: str) -> list[MemoryBlock]:
        """Record a container on the pod shared pool (blocks = what the pool has left)."""
        pod_blocks = self._pod_entries[pod_uid]
        numa = pod_blocks[0].numa
        shared = self._shared_of(pod_uid)
        shared.add(name)
        blocks = [_Block(numa, t, s) for t, s in self.pod_pool(pod_uid).items() if s > 0]
        self._entries.setdefault(pod_uid, {})[name] = blocks
        return [b.frozen() for b in blocks]

    def release_container_slice(self, pod_uid: str, name: str) -> None:
        """Give an exited container's exclusive slice back to its pod-level pod's pool.

        The pod budget stays charged; the container's entry is dropped. Idempotent; a no-op
        for pods without a pod-level budget."""
        if pod_uid not in self._pod_entries:
            return
        self._entries.get(pod_uid, {}).pop(name, None)
        self._shared.get(pod_uid, set()).discard(name)

    def refresh_shared(self, pod_uid: str) -> None:
        """Recompute the blocks of a pod's shared containers after the pool changed."""
        pod_blocks = self._pod_entries.get(pod_uid)
        if not pod_blocks:
            return
        numa = pod_blocks[0].numa
        pool = [(t, s) for t, s in self.pod_pool(pod_uid).items() if s > 0]
        entries = self._entries.get(pod_uid, {})
        for name in self._shared_of(pod_uid):
            if name in entries:
                entries[name] = [_Block(numa, t, s) for t, s in pool]

    # release ----------------------------------------------------------------------------------

    def remove_container(self, pod_uid: str, name: str) -> None:
        """``RemoveContainer`` (§3.5): pod-level pods release their budget with the last entry."""
        entries = self._entries.get(pod_uid)
        if pod_uid in self._pod_entries:
            if entries is not None:
                entries.pop(name, None)
                self._shared.get(pod_uid, set()).discard(name)
            if not entries:
                self._entries.pop(pod_uid, None)
                self._release(self._pod_entries.pop(pod_uid))
                self._forget(pod_uid)
            return
        if entries is None or name not in entries:
            return
        blocks = entries.pop(name)
        if not entries:
            del self._entries[pod_uid]
        self._release(blocks)

    def remove_pod(self, pod_uid: str) -> None:
        """Release everything a pod holds."""
        entries = self._entries.pop(pod_uid, {})
        if pod_uid in self._pod_entries:
            self._release(self._pod_entries.pop(pod_uid))
        else:
            for blocks in entries.values():
                self._release(blocks)
        self._forget(pod_uid)

    def _forget(self, pod_uid: str) -> None:
        self._shared.pop(pod_uid, None)

    # queries ----------------------------------------------------------------------------------

    def container_blocks(self, pod_uid: str, name: str) -> tuple[MemoryBlock, ...] | None:
        """A container's blocks, or None when it has no entry."""
        blocks = self._entries.get(pod_uid, {}).get(name)
        return None if blocks is None else tuple(b.frozen() for b in blocks)

    def pod_blocks(self, pod_uid: str) -> tuple[MemoryBlock, ...] | None:
        """A pod-level pod's budget blocks, or None."""
        blocks = self._pod_entries.get(pod_uid)
        return None if blocks is None else tuple(b.frozen() for b in blocks)

    def numa_nodes_for(self, pod_uid: str, name: str) -> tuple[int, ...]:
        """``GetMemoryNUMANodes``: NUMA nodes of a container's blocks (empty: leave mems as is)."""
        nodes: set[int] = set()
        for b in self._entries.get(pod_uid, {}).get(name, []):
            nodes.update(b.numa)
        return tuple(sorted(nodes))

    def pods(self) -> tuple[str, ...]:
        """Pods with any entry."""
        return tuple(sorted(set(self._entries) | set(self._pod_entries)))

    def containers(self, pod_uid: str) -> tuple[str, ...]:
        """Containers of a pod with an entry."""
        return tuple(self._entries.get(pod_uid, {}))

    def allocatable(self) -> list[MemoryBlock]:
        """``GetAllocatableMemory``: one block per (NUMA node, type) with allocatable > 0."""
        return [
            MemoryBlock((node,), name, t.allocatable)
            for node, state in sorted(self.machine_state.items())
            for name, t in state.memory_map.items()
            if t.allocatable > 0
        ]

    # state ------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-able state with the kubelet's field names plus ``podEntries``."""
        return {
            "format": STATE_FORMAT,
            "policyName": self.config.policy,
            "machineState": {str(n): s.to_dict() for n, s in sorted(self.machine_state.items())},
            "entries": {
                uid: {name: [b.to_dict() for b in blocks] for name, blocks in entries.items()}
                for uid, entries in self._entries.items()
            },
            "podEntries": {
                uid: [b.to_dict() for b in blocks] for uid, blocks in self._pod_entries.items()
            },
            "podShared": {uid: sorted(names) for uid, names in self._shared.items() if names},
        }

    @classmethod
    def from_dict(
        cls, topology: Topology, config: MemoryManagerConfig, data: Mapping[str, Any]
    ) -> MemoryManager:
        """Restore a state saved by :meth:`to_dict`, recomputing the machine state from the
        blocks; a saved machine state that disagrees raises ``MemoryStateError``."""
        mm = cls(topology, config)
        policy = data.get("policyName", config.policy)
        if policy != config.policy:
            raise MemoryStateError(
                f'configured policy "{config.policy}" differs from state checkpoint policy '
                f'"{policy}"'
            )
        try:
            pod_entries = {
                str(uid): [_block_from_dict(b) for b in blocks]
                for uid, blocks in dict(data.get("podEntries", {})).items()
            }
            entries = {
                str(uid): {
                    str(name): [_block_from_dict(b) for b in blocks]
                    for name, blocks in dict(conts).items()
                }
                for uid, conts in dict(data.get("entries", {})).items()
            }
        except (KeyError, TypeError, ValueError) as err:
            raise MemoryStateError(f"memory manager state: malformed entries ({err})") from err
        charged: list[tuple[str, str, _Block]] = [
            (uid, "", b) for uid, blocks in pod_entries.items() for b in blocks
        ]
        for uid, conts in entries.items():
            if uid not in pod_entries:
                charged.extend((uid, name, b) for name, blocks in conts.items() for b in blocks)
        saved = data.get("machineState")
        if saved is not None and not saved and charged:
            raise MemoryStateError(
                "[memorymanager] machine state can not be empty when it has memory assignments"
            )
        for uid, name, b in charged:
            for n in b.numa:
                if n not in mm.machine_state:
                    raise MemoryStateError(
                        f"[memorymanager] (pod: {uid}, container: {name}) the memory assignment "
                        "uses the NUMA that does not exist"
                    )
                if b.type not in mm.machine_state[n].memory_map:
                    raise MemoryStateError(
                        f"[memorymanager] (pod: {uid}, container: {name}) the memory assignment "
                        "uses memory resource that does not exist"
                    )
            mm._charge(b.numa, b.type, b.size)
        if saved:
            restored = _machine_state_from_dict(saved)
            if not _machine_states_equal(restored, mm.machine_state):
                raise MemoryStateError(
                    "[memorymanager] the expected machine state is different from the real one"
                )
            mm.machine_state = restored
        mm._entries = entries
        mm._pod_entries = pod_entries
        mm._shared = {str(u): set(map(str, n)) for u, n in dict(data.get("podShared", {})).items()}
        return mm


def _machine_state_from_dict(data: Any) -> dict[int, NodeState]:
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


def _machine_states_equal(saved: dict[int, NodeState], expected: dict[int, NodeState]) -> bool:
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
