"""The kubelet's ``takeByTopology`` family (``cpumanager/cpu_assignment.go``), bit for bit.

``take_by_topology`` picks ``n`` CPUs out of an available set the way the kubelet's static CPU
manager does: NUMA-packed (whole NUMA nodes / sockets, optional uncore-cache step, whole cores,
then single threads, each level sorted by ascending free CPUs then id), or NUMA-distributed
(``distribute-cpus-across-numa``, KEP-2902 balance scores).

Every topology query is answered from integer bitmasks precomputed once per :class:`Topology`
(:func:`topology_index`), so a decision on a 1,024-CPU machine is a few hundred popcounts.

Go details reproduced on purpose (they decide which CPUs are picked):

- ``numaFirst`` when sockets >= NUMA nodes, else ``socketsFirst``; lists sorted by
  (free CPUs, id); a NUMA node / uncore cache is "free" when all its CPUs are free, a socket when
  its free CPUs equal ``CPUsPerSocket`` and a core when they equal ``CPUsPerCore`` (integer
  divisions over the whole machine).
- ``take`` lowers the remaining need by the size of the set handed to it, as Go does.
- ``iterateCombinations`` in Go appends to a shared slice; combos of size >= 4 share a backing
  array, so a retained "best" combo can be overwritten by later iterations. This module emulates
  Go's append growth (capacity 1, 2, 4, 8, ...) so the NUMA-distributed result matches the
  kubelet on machines with 4 or more NUMA nodes too.
- Go map iteration feeding the balance score is replaced by ascending NUMA id order (the values
  are rounded to 3 decimals, so the order cannot change a result except at exact ties of the
  last float bit).

One divergence: where the kubelet's remainder loops in ``takeByTopologyNUMADistributed`` could
spin forever (a NUMA subset whose CPUs cannot be handed out in whole groups), this module stops:
such a subset is not a candidate, and the final loop reports the kubelet's accounting error.
"""

from __future__ import annotations

import enum
import math
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.topology.model import Topology


class CPUAllocationError(Exception):
    """``takeByTopology`` could not pick the CPUs; ``str(err)`` is the kubelet's error text."""


class SortingStrategy(enum.Enum):
    """The kubelet's ``CPUSortingStrategy`` (``spread`` = ``distribute-cpus-across-cores``)."""

    PACKED = "packed"
    SPREAD = "spread"


@dataclass(frozen=True)
class TakeOptions:
    """The static-policy options that change how ``takeByTopology`` picks CPUs."""

    full_pcpus_only: bool = False
    distribute_cpus_across_numa: bool = False
    distribute_cpus_across_cores: bool = False
    prefer_align_by_uncore_cache: bool = False


def _bits(mask: int) -> list[int]:
    out: list[int] = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _group(pairs: Mapping[int, set[int]]) -> dict[int, tuple[int, ...]]:
    return {key: tuple(sorted(values)) for key, values in pairs.items()}


class TopologyIndex:
    """The kubelet's ``CPUDetails`` queries over one topology, as precomputed bitmasks."""

    def __init__(self, topology: Topology) -> None:
        info = topology.cpu_info
        self.topology = topology
        self.all_mask = topology.all_cpus.mask
        self.cpus_per_core = topology.cpus_per_core
        self.cpus_per_socket = topology.cpus_per_socket
        self.cpus_per_uncore = topology.cpus_per_uncore
        self.num_numa_nodes = len({i.numa for i in info.values()})
        self.num_sockets = topology.num_sockets
        self.num_uncore_caches = topology.num_uncore_caches
        self.numa_first = self.num_sockets >= self.num_numa_nodes
        numa: dict[int, int] = {}
        socket: dict[int, int] = {}
        core: dict[int, int] = {}
        uncore: dict[int, int] = {}
        numa_sockets: dict[int, set[int]] = {}
        socket_numas: dict[int, set[int]] = {}
        socket_cores: dict[int, set[int]] = {}
        numa_cores: dict[int, set[int]] = {}
        numa_uncores: dict[int, set[int]] = {}
        uncore_cores: dict[int, set[int]] = {}
        self.numa_of: dict[int, int] = {}
        self.core_of: dict[int, int] = {}
        for cpu, i in info.items():
            bit = 1 << cpu
            numa[i.numa] = numa.get(i.numa, 0) | bit
            socket[i.socket] = socket.get(i.socket, 0) | bit
            core[i.core] = core.get(i.core, 0) | bit
            uncore[i.l3] = uncore.get(i.l3, 0) | bit
            numa_sockets.setdefault(i.numa, set()).add(i.socket)
            socket_numas.setdefault(i.socket, set()).add(i.numa)
            socket_cores.setdefault(i.socket, set()).add(i.core)
            numa_cores.setdefault(i.numa, set()).add(i.core)
            numa_uncores.setdefault(i.numa, set()).add(i.l3)
            uncore_cores.setdefault(i.l3, set()).add(i.core)
            self.numa_of[cpu] = i.numa
            self.core_of[cpu] = i.core
        self.numa_mask = numa
        self.socket_mask = socket
        self.core_mask = core
        self.uncore_mask = uncore
        self.numa_ids = tuple(sorted(numa))
        self.socket_ids = tuple(sorted(socket))
        self.numa_sockets = _group(numa_sockets)
        self.socket_numas = _group(socket_numas)
        self.socket_cores = _group(socket_cores)
        self.numa_cores = _group(numa_cores)
        self.numa_uncores = _group(numa_uncores)
        self.uncore_cores = _group(uncore_cores)
        self.numa_size = {n: m.bit_count() for n, m in numa.items()}
        self.uncore_size = {u: m.bit_count() for u, m in uncore.items()}

    def cpus_in_numa_mask(self, affinity: int) -> int:
        """Bitmask of the CPUs of the NUMA nodes whose bits are set in ``affinity``."""
        mask = 0
        for node in _bits(affinity):
            mask |= self.numa_mask.get(node, 0)
        return mask

    def sockets_of_numa_mask(self, affinity: int) -> tuple[int, ...]:
        """Socket ids holding CPUs of the NUMA nodes in ``affinity`` (ascending)."""
        out: set[int] = set()
        for node in _bits(affinity):
            out.update(self.numa_sockets.get(node, ()))
        return tuple(sorted(out))

    def siblings_mask(self, mask: int) -> int:
        """All SMT siblings of the CPUs in ``mask`` (whole cores)."""
        out = 0
        for cpu in _bits(mask):
            core = self.core_of.get(cpu)
            if core is not None:
                out |= self.core_mask[core]
        return out


_INDEXES: weakref.WeakKeyDictionary[Topology, TopologyIndex] = weakref.WeakKeyDictionary()


def topology_index(topology: Topology) -> TopologyIndex:
    """The cached :class:`TopologyIndex` of ``topology`` (built on first use)."""
    index = _INDEXES.get(topology)
    if index is None:
        index = TopologyIndex(topology)
        _INDEXES[topology] = index
    return index


class _Accumulator:
    """The kubelet's ``cpuAccumulator``: free CPUs left, CPUs taken, CPUs still needed."""

    def __init__(self, index: TopologyIndex, available: int, n: int) -> None:
        self.ix = index
        self.free = available & index.all_mask
        self.result = 0
        self.need = n

    # -- bookkeeping -------------------------------------------------------------------------
    def take(self, mask: int) -> None:
        self.result |= mask
        self.free &= ~self.result
        self.need -= mask.bit_count()

    def satisfied(self) -> bool:
        return self.need < 1

    def failed(self) -> bool:
        return self.need > self.free.bit_count()

    def _sort(self, ids: Sequence[int], masks: Mapping[int, int]) -> list[int]:
        free = self.free
        keyed = [((free & masks[i]).bit_count(), i) for i in ids]
        return [i for count, i in sorted(keyed) if count]

    def _sort_within(
        self,
        groups: Sequence[int],
        group_mask: Mapping[int, int],
        members: Mapping[int, Sequence[int]],
        member_mask: Mapping[int, int],
    ) -> list[int]:
        """Group by group in the order given, each group's members with free CPUs, sorted."""
        out: list[int] = []
        for group in groups:
            cpus = self.free & group_mask[group]
            present = [m for m in members[group] if cpus & member_mask[m]]
            out.extend(self._sort(present, member_mask))
        return out

    # -- orders ------------------------------------------------------------------------------
    def sorted_numa_nodes(self) -> list[int]:
        ix = self.ix
        if ix.numa_first:
            return self._sort(ix.numa_ids, ix.numa_mask)
        return self._sort_within(
            self.sorted_sockets(), ix.socket_mask, ix.socket_numas, ix.numa_mask
        )

    def sorted_sockets(self) -> list[int]:
        ix = self.ix
        if not ix.numa_first:
            return self._sort(ix.socket_ids, ix.socket_mask)
        return self._sort_within(
            self.sorted_numa_nodes(), ix.numa_mask, ix.numa_sockets, ix.socket_mask
        )

    def sorted_cores(self) -> list[int]:
        ix = self.ix
        if ix.numa_first:
            return self._sort_within(
                self.sorted_sockets(), ix.socket_mask, ix.socket_cores, ix.core_mask
            )
        return self._sort_within(
            self.sorted_numa_nodes(), ix.numa_mask, ix.numa_cores, ix.core_mask
        )

    def sorted_uncore_caches(self) -> list[int]:
        ix = self.ix
        return self._sort_within(
            self.sorted_numa_nodes(), ix.numa_mask, ix.numa_uncores, ix.uncore_mask
        )

    def sorted_cpus(self, strategy: SortingStrategy) -> list[int]:
        ix = self.ix
        out: list[int] = []
        if strategy is SortingStrategy.PACKED:
            for core in self.sorted_cores():
                out.extend(_bits(self.free & ix.core_mask[core]))
        else:
            for socket in self.sorted_sockets():
                out.extend(_bits(self.free & ix.socket_mask[socket]))
        return out

    # -- "free" elements ---------------------------------------------------------------------
    def free_numa_nodes(self) -> list[int]:
        ix = self.ix
        return [
            n
            for n in self.sorted_numa_nodes()
            if (self.free & ix.numa_mask[n]).bit_count() == ix.numa_size[n]
        ]

    def free_sockets(self) -> list[int]:
        ix = self.ix
        return [
            s
            for s in self.sorted_sockets()
            if (self.free & ix.socket_mask[s]).bit_count() == ix.cpus_per_socket
        ]

    def free_cores(self) -> list[int]:
        ix = self.ix
        return [
            c
            for c in self.sorted_cores()
            if (self.free & ix.core_mask[c]).bit_count() == ix.cpus_per_core
        ]

    def free_uncore_caches(self) -> list[int]:
        ix = self.ix
        return [
            u
            for u in self.sorted_uncore_caches()
            if (self.free & ix.uncore_mask[u]).bit_count() == ix.uncore_size[u]
        ]

    # -- takes -------------------------------------------------------------------------------
    def take_full_numa_nodes(self) -> None:
        for node in self.free_numa_nodes():
            cpus = self.ix.numa_mask[node]
            if self.need >= cpus.bit_count():
                self.take(cpus)

    def take_full_sockets(self) -> None:
        for socket in self.free_sockets():
            cpus = self.ix.socket_mask[socket]
            if self.need >= cpus.bit_count():
                self.take(cpus)

    def take_full_first_level(self) -> None:
        if self.ix.numa_first:
            self.take_full_numa_nodes()
        else:
            self.take_full_sockets()

    def take_full_second_level(self) -> None:
        if self.ix.numa_first:
            self.take_full_sockets()
        else:
            self.take_full_numa_nodes()

    def take_full_uncore(self) -> None:
        for cache in self.free_uncore_caches():
            cpus = self.ix.uncore_mask[cache]
            if self.need >= cpus.bit_count():
                self.take(cpus)

    def take_partial_uncore(self, cache: int) -> None:
        ix = self.ix
        per_core = ix.cpus_per_core
        cores_needed = (self.need + per_core - 1) // per_core
        cpus_in_cache = self.free & ix.uncore_mask[cache]
        cores = [c for c in ix.uncore_cores[cache] if cpus_in_cache & ix.core_mask[c]]
        if len(cores) < cores_needed:
            return
        chosen = 0
        for core in cores[:cores_needed]:
            chosen |= self.free & ix.core_mask[core]
        if self.need % 2 != 0 and per_core > 1 and chosen.bit_count() > self.need:
            chosen &= ~(1 << (chosen.bit_length() - 1))
        if chosen.bit_count() == self.need:
            self.take(chosen)

    def take_uncore_cache(self) -> None:
        per_uncore = self.ix.cpus_per_uncore
        for cache in self.sorted_uncore_caches():
            if self.need >= per_uncore:
                self.take_full_uncore()
            if self.satisfied():
                return
            self.take_partial_uncore(cache)
            if self.satisfied():
                return

    def take_full_cores(self) -> None:
        for core in self.free_cores():
            cpus = self.ix.core_mask[core]
            if self.need >= cpus.bit_count():
                self.take(cpus)

    def take_remaining_cpus(self, strategy: SortingStrategy) -> None:
        for cpu in self.sorted_cpus(strategy):
            self.take(1 << cpu)
            if self.satisfied():
                return


def _not_enough(n: int, available: CPUSet) -> CPUAllocationError:
    return CPUAllocationError(
        f"not enough cpus available to satisfy request: requested={n}, available={len(available)}"
    )


def take_by_topology_numa_packed(
    topology: Topology,
    available: CPUSet,
    n: int,
    strategy: SortingStrategy = SortingStrategy.PACKED,
    prefer_align_by_uncore_cache: bool = False,
) -> CPUSet:
    """The kubelet's ``takeByTopologyNUMAPacked``; raises :class:`CPUAllocationError`."""
    acc = _Accumulator(topology_index(topology), available.mask, n)
    if acc.satisfied():
        return CPUSet.from_mask(0)
    if acc.failed():
        raise _not_enough(n, available)
    for step in (acc.take_full_first_level, acc.take_full_second_level):
        step()
        if acc.satisfied():
            return CPUSet.from_mask(acc.result)
    if prefer_align_by_uncore_cache:
        acc.take_uncore_cache()
        if acc.satisfied():
            return CPUSet.from_mask(acc.result)
    if strategy is not SortingStrategy.SPREAD:
        acc.take_full_cores()
        if acc.satisfied():
            return CPUSet.from_mask(acc.result)
    acc.take_remaining_cpus(strategy)
    if acc.satisfied():
        return CPUSet.from_mask(acc.result)
    raise CPUAllocationError("failed to allocate cpus")


class _GoSlice:
    """A Go ``[]int`` view: shared backing array, length, capacity (for append aliasing)."""

    __slots__ = ("array", "cap", "length")

    def __init__(self, array: list[int], length: int, cap: int) -> None:
        self.array = array
        self.length = length
        self.cap = cap

    def append(self, value: int) -> _GoSlice:
        if self.length < self.cap:
            self.array[self.length] = value
            return _GoSlice(self.array, self.length + 1, self.cap)
        cap = max(1, self.cap * 2)
        array = [*self.array[: self.length], value] + [0] * (cap - self.length - 1)
        return _GoSlice(array, self.length + 1, cap)

    def values(self) -> list[int]:
        return self.array[: self.length]


def _iterate_combinations(items: Sequence[int], k: int) -> Iterator[_GoSlice]:
    """Go's ``iterateCombinations``: k-subsets in lexicographic order, as aliased slices."""
    if k < 1:
        return

    def helper(k_left: int, start: int, accum: _GoSlice) -> Iterator[_GoSlice]:
        if k_left == 0:
            yield accum
            return
        for i in range(start, len(items) - k_left + 1):
            yield from helper(k_left - 1, i + 1, accum.append(items[i]))

    yield from helper(k, 0, _GoSlice([], 0, 0))


def _go_round(value: float) -> float:
    whole = float(math.trunc(value))
    if abs(value - whole) >= 0.5:
        whole += math.copysign(1.0, value)
    return whole


def _standard_deviation(values: Sequence[int]) -> float:
    mean = _go_round(sum(float(v) for v in values) / len(values) * 1000) / 1000
    total = 0.0
    for v in values:
        total += (float(v) - mean) * (float(v) - mean)
    return _go_round(math.sqrt(total / len(values)) * 1000) / 1000


def _spread_remainder(
    after: dict[int, int], subset: Sequence[int], remainder: int, group: int
) -> bool:
    """Hand ``remainder`` CPUs out of ``subset`` in groups; False when no group can be given."""
    while remainder > 0:
        progressed = False
        for node in subset:
            if remainder == 0:
                break
            if after[node] < group:
                continue
            after[node] -= group
            remainder -= group
            progressed = True
        if not progressed:
            return False
    return True


def take_by_topology_numa_distributed(
    topology: Topology,
    available: CPUSet,
    n: int,
    group_size: int,
    strategy: SortingStrategy = SortingStrategy.PACKED,
) -> CPUSet:
    """The kubelet's ``takeByTopologyNUMADistributed`` (KEP-2902); raises CPUAllocationError."""
    if group_size < 1:
        raise ValueError(f"cpu group size {group_size}: must be >= 1")
    if n % group_size != 0:
        return take_by_topology_numa_packed(topology, available, n, strategy, False)
    ix = topology_index(topology)
    acc = _Accumulator(ix, available.mask, n)
    if acc.satisfied():
        return CPUSet.from_mask(0)
    if acc.failed():
        raise _not_enough(n, available)
    numas = acc.sorted_numa_nodes()
    free_in = {node: (acc.free & ix.numa_mask[node]).bit_count() for node in numas}
    groups_total = (ix.all_mask.bit_count() - 1) // group_size + 1
    groups_per_numa = (groups_total - 1) // ix.num_numa_nodes + 1
    groups_needed = (acc.need - 1) // group_size + 1
    min_numas = (groups_needed - 1) // groups_per_numa + 1
    max_numas = min(groups_needed, len(numas))
    order = sorted(numas)
    for k in range(min_numas, max_numas + 1):
        best_balance = math.inf
        best_combo: _GoSlice | None = None
        best_remainder: _GoSlice | None = None
        for combo_slice in _iterate_combinations(numas, k):
            if best_balance == 0:
                break
            combo = combo_slice.values()
            if sum(free_in[x] for x in combo) < n:
                continue
            if sum(free_in[x] // group_size for x in combo) * group_size < n:
                continue
            distribution = (n // len(combo) // group_size) * group_size
            if any(free_in[x] < distribution for x in combo):
                continue
            after = dict(free_in)
            for x in combo:
                after[x] -= distribution
            remainder = n - distribution * len(combo)
            remainder_combo = [x for x in combo if after[x] >= group_size]
            local_best = math.inf
            local_remainder: _GoSlice | None = None
            if remainder == 0:
                local_best = _standard_deviation([after[x] for x in order])
            size = len(remainder_combo)
            while remainder > 0 and size >= 1:
                for subset_slice in _iterate_combinations(remainder_combo, size):
                    subset = subset_slice.values()
                    trial = dict(after)
                    if sum(trial[x] for x in subset) < remainder:
                        continue
                    if not _spread_remainder(trial, subset, remainder, group_size):
                        continue
                    balance = _standard_deviation([trial[x] for x in order])
                    if balance < local_best:
                        local_best = balance
                        local_remainder = subset_slice
                size -= 1
            if local_best < best_balance:
                best_balance = local_best
                best_remainder = local_remainder
                best_combo = combo_slice
        if best_combo is None:
            continue
        chosen = best_combo.values()
        distribution = (n // len(chosen) // group_size) * group_size
        for node in chosen:
            cpus = CPUSet.from_mask(acc.free & ix.numa_mask[node])
            acc.take(take_by_topology_numa_packed(topology, cpus, distribution, strategy).mask)
        remainder = n - distribution * len(chosen)
        spread = best_remainder.values() if best_remainder is not None else []
        while remainder > 0:
            progressed = False
            for node in spread:
                if remainder == 0:
                    break
                cpus = CPUSet.from_mask(acc.free & ix.numa_mask[node])
                if len(cpus) < group_size:
                    continue
                acc.take(take_by_topology_numa_packed(topology, cpus, group_size, strategy).mask)
                remainder -= group_size
                progressed = True
            if not progressed:
                break
        if acc.need > 0:
            raise CPUAllocationError(
                f"accounting error, not enough CPUs allocated, remaining: {acc.need}"
            )
        if acc.need < 0:
            raise CPUAllocationError(
                f"accounting error, too many CPUs allocated, remaining: {acc.need}"
            )
        return CPUSet.from_mask(acc.result)
    return take_by_topology_numa_packed(topology, available, n, strategy, False)


def take_by_topology(
    topology: Topology,
    available: CPUSet,
    n: int,
    *,
    options: TakeOptions | None = None,
) -> CPUSet:
    """The static policy's ``takeByTopology``: packed or NUMA-distributed per ``options``.

    Raises :class:`CPUAllocationError` with the kubelet's text, e.g.
    ``not enough cpus available to satisfy request: requested=5, available=4``.
    """
    opts = options or TakeOptions()
    strategy = (
        SortingStrategy.SPREAD if opts.distribute_cpus_across_cores else SortingStrategy.PACKED
    )
    if opts.distribute_cpus_across_numa:
        group = topology.cpus_per_core if opts.full_pcpus_only else 1
        return take_by_topology_numa_distributed(topology, available, n, group, strategy)
    return take_by_topology_numa_packed(
        topology, available, n, strategy, opts.prefer_align_by_uncore_cache
    )
