"""The static policy's ``generateCPUTopologyHints``, computed over precomputed NUMA-mask tables.

The kubelet walks every non-empty set of NUMA nodes (``IterateBitMasks``: by size, then in
lexicographic order) and keeps those with enough free CPUs, preferring the narrowest width any
mask could ever satisfy. On a 16-NUMA machine that is 65,535 masks per call, so the per-topology
parts (the walk order, CPUs per mask, the hint objects) are built once and cached, and the
per-call free-CPU counts of every mask are built by doubling lists instead of a Python loop.
The last answers are kept too: an NRI-only pod's promotion and demotion (docs/design.md
section 2) ask again, on the same free CPUs, what its admission asked.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from itertools import combinations, compress

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_assignment import TopologyIndex, topology_index
from nri_plrm.engine.spec import TopologyHint
from nri_plrm.engine.topology_manager import HintList
from nri_plrm.topology.model import Topology

RECENT_ANSWERS = 64
"""Answers of :func:`generate_cpu_hints` kept per topology (the oldest is dropped first)."""


def _by_doubling(values: list[int]) -> list[int]:
    """``out[m]`` = sum of ``values[i]`` for the bits ``i`` set in ``m`` (index space)."""
    out = [0]
    for value in values:
        out += list(map(value.__add__, out))
    return out


class _MaskTable:
    """Per-topology tables indexed by "index masks" (bit i = i-th NUMA id in ascending order)."""

    def __init__(self, index: TopologyIndex) -> None:
        self.index = index
        ids = index.numa_ids
        self.ids = ids
        self.order = [
            sum(1 << i for i in combo)
            for k in range(1, len(ids) + 1)
            for combo in combinations(range(len(ids)), k)
        ]
        self.real = _by_doubling([1 << node for node in ids])
        self.width = _by_doubling([1] * len(ids))
        self.total = _by_doubling([index.numa_size[node] for node in ids])
        self.hints = (
            [TopologyHint(mask, False) for mask in self.real],
            [TopologyHint(mask, True) for mask in self.real],
        )
        totals = sorted((index.numa_size[node] for node in ids), reverse=True)
        self._totals_desc = totals
        self._choices: dict[tuple[int, bool], list[TopologyHint]] = {}
        self._preferred_indexes: dict[tuple[int, bool], list[int]] = {}
        self.every_mask: dict[tuple[int, bool], HintList] = {}
        self.recent: dict[tuple[int, int, int, bool], HintList] = {}

    def remember(self, key: tuple[int, int, int, bool], hints: HintList) -> HintList:
        """Keep ``hints`` as the answer for ``key`` (at most ``RECENT_ANSWERS`` answers)."""
        recent = self.recent
        if len(recent) >= RECENT_ANSWERS:
            del recent[next(iter(recent))]
        recent[key] = hints
        return hints

    def choice(self, narrowest: int, align_by_socket: bool) -> list[TopologyHint]:
        """The hint each index mask yields (preferred or not) for this narrowest width."""
        key = (narrowest, align_by_socket)
        chosen = self._choices.get(key)
        if chosen is None:
            plain, preferred = self.hints
            chosen = [
                preferred[m] if self._preferred(m, narrowest, align_by_socket) else plain[m]
                for m in range(len(self.real))
            ]
            self._choices[key] = chosen
        return chosen

    def preferred_indexes(self, narrowest: int, align_by_socket: bool) -> list[int]:
        """The index masks whose hint is preferred for this narrowest width (a short list)."""
        key = (narrowest, align_by_socket)
        found = self._preferred_indexes.get(key)
        if found is None:
            chosen = self.choice(narrowest, align_by_socket)
            found = [m for m in self.order if chosen[m].preferred]
            self._preferred_indexes[key] = found
        return found

    def _preferred(self, m: int, narrowest: int, align_by_socket: bool) -> bool:
        if self.width[m] == narrowest:
            return True
        if not align_by_socket:
            return False
        index = self.index
        per_socket = index.num_numa_nodes // index.num_sockets
        if per_socket == 0:
            return False
        min_sockets = (narrowest + per_socket - 1) // per_socket
        return len(index.sockets_of_numa_mask(self.real[m])) == min_sockets

    def min_affinity(self, request: int) -> int:
        """Fewest NUMA nodes whose CPUs (all of them, busy or not) can hold ``request``."""
        running = 0
        for width, size in enumerate(self._totals_desc, start=1):
            running += size
            if running >= request:
                return width
        return len(self.ids)


_TABLES: weakref.WeakKeyDictionary[Topology, _MaskTable] = weakref.WeakKeyDictionary()


def _table(topology: Topology) -> _MaskTable:
    table = _TABLES.get(topology)
    if table is None:
        table = _MaskTable(topology_index(topology))
        _TABLES[topology] = table
    return table


def generate_cpu_hints(
    topology: Topology,
    available: CPUSet,
    reusable: CPUSet,
    request: int,
    *,
    align_by_socket: bool = False,
) -> HintList:
    """The kubelet's ``generateCPUTopologyHints`` (hint order = ``IterateBitMasks`` order).

    A mask is kept when every reusable CPU lies in it and reusable plus available CPUs in it
    reach ``request`` (an overlap of the two sets is counted twice, as the kubelet does).
    The result is a :class:`HintList` that already knows its preferred masks, so the topology
    manager's merge never scans the (up to 65,535-entry) list; it may be a cached object that
    callers must not mutate.
    """
    table = _table(topology)
    key = (available.mask, reusable.mask, request, align_by_socket)
    known = table.recent.get(key)
    if known is not None:
        return known
    return table.remember(key, _hints(table, available, reusable, request, align_by_socket))


def _hints(
    table: _MaskTable, available: CPUSet, reusable: CPUSet, request: int, align_by_socket: bool
) -> HintList:
    index = table.index
    per_node = [(available.mask & index.numa_mask[node]).bit_count() for node in table.ids]
    required = 0
    for cpu in reusable:
        node = index.numa_of.get(cpu, 0)
        if node in table.ids:
            required |= 1 << table.ids.index(node)
        else:
            return HintList()
    needed = request - len(reusable)
    narrowest = table.min_affinity(request)
    chosen = table.choice(narrowest, align_by_socket)
    preferred = table.preferred_indexes(narrowest, align_by_socket)
    real = table.real
    if required == 0 and all(count >= needed for count in per_node):
        # Every single node qualifies, so every mask does: the answer depends on the width only.
        key = (narrowest, align_by_socket)
        cached = table.every_mask.get(key)
        if cached is None:
            cached = HintList(
                map(chosen.__getitem__, table.order),
                preferred_masks={real[m] for m in preferred},
            )
            table.every_mask[key] = cached
        return cached
    free = _by_doubling(per_node)
    if required == 0:
        kept: Iterable[int] = compress(
            table.order, map(needed.__le__, map(free.__getitem__, table.order))
        )
        preferred_kept = {real[m] for m in preferred if free[m] >= needed}
    else:
        kept = (m for m in table.order if free[m] >= needed and m & required == required)
        preferred_kept = {
            real[m] for m in preferred if free[m] >= needed and m & required == required
        }
    return HintList(map(chosen.__getitem__, kept), preferred_masks=preferred_kept)
