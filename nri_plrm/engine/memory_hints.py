"""The Memory Manager's ``calculateHints``: NUMA masks that can hold a request, with caches.

Determinism: a request is iterated ``memory`` first, then hugepages sorted by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any

from nri_plrm.engine.bitmask import bits, is_narrower_than, iterate_bitmasks, mask_of
from nri_plrm.engine.memory_state import Block, MachineState, allocatable_of, free_of
from nri_plrm.engine.spec import MEMORY, HintMap, TopologyHint, unexpected
from nri_plrm.engine.topology_manager import HintList

_SHAPE_CACHE_SIZE = 256
"""Hint lists kept per machine-state shape (see :meth:`HintCalculator.calculate`)."""
_RECENT_ANSWERS = 64
"""Answers kept per request and machine state (see :meth:`HintCalculator.calculate`)."""


class HintCalculator:
    """``calculateHints`` for one machine's NUMA nodes, caching what does not change."""

    def __init__(self, numa_ids: tuple[int, ...]) -> None:
        self._numa_ids = numa_ids
        self._masks = [(m, bits(m)) for m in iterate_bitmasks(numa_ids)]
        self._min_affinity_cache: dict[tuple[tuple[str, int], ...], int] = {}
        self._hint_cache: dict[tuple[int, bool], TopologyHint] = {}
        self._shape_cache: dict[Any, HintList] = {}
        self._recent: dict[Any, dict[str, list[TopologyHint]]] = {}
        self._all_masks_cache: dict[
            tuple[tuple[tuple[str, int], ...], int], list[TopologyHint]
        ] = {}

    def _min_affinity(self, ms: MachineState, requests: Mapping[str, int]) -> int:
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
                all(sum(allocatable_of(ms, n, name) for n in combo) >= size for name, size in key)
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

    @staticmethod
    def _fits(
        ms: MachineState,
        nodes: Iterable[int],
        requests: Mapping[str, int],
        reusable: Mapping[str, int],
    ) -> bool:
        nodes = tuple(nodes)
        for name, size in requests.items():
            if sum(allocatable_of(ms, n, name) for n in nodes) < size:
                return False
            if sum(free_of(ms, n, name) for n in nodes) + reusable.get(name, 0) < size:
                return False
        return True

    def calculate(
        self,
        ms: MachineState,
        requests: Mapping[str, int],
        reusable: Mapping[int, Mapping[str, int]],
    ) -> dict[str, list[TopologyHint]]:
        """``calculateHints``: every NUMA mask with enough allocatable, group-compatible and free
        memory for all requested types, in ``IterateBitMasks`` order; preferred = the narrowest
        width any mask's allocatable memory could hold.

        The group rules leave few masks to test: single nodes outside multi-NUMA groups, the
        existing groups, and sets of nodes without any assignment (where free equals
        allocatable, so when each of them fits alone every such set fits). Without
        init-container reuse the answer depends only on the request, the fitting single nodes
        and groups and the unused nodes with their free memory, so it is cached by that shape.
        The returned lists are shared between types and cached: callers must not mutate them.
        The last answers are kept by the request and each node's assignment count, group and
        free memory of the requested types (allocatable memory never changes): an NRI-only
        pod's promotion and demotion ask again what its admission asked.
        """
        if any(reusable.values()):
            return self._calculate(ms, requests, reusable)
        key = (
            tuple(requests.items()),
            tuple(
                (
                    state.number_of_assignments,
                    tuple(state.cells),
                    tuple(
                        table.free if (table := state.memory_map.get(name)) is not None else 0
                        for name in requests
                    ),
                )
                for state in map(ms.__getitem__, self._numa_ids)
            ),
        )
        known = self._recent.get(key)
        if known is None:
            known = self._calculate(ms, requests, reusable)
            if len(self._recent) >= _RECENT_ANSWERS:
                del self._recent[next(iter(self._recent))]
            self._recent[key] = known
        return dict(known)

    def _calculate(
        self,
        ms: MachineState,
        requests: Mapping[str, int],
        reusable: Mapping[int, Mapping[str, int]],
    ) -> dict[str, list[TopologyHint]]:
        ids = self._numa_ids
        min_affinity = self._min_affinity(ms, requests)
        unused = [n for n in ids if ms[n].number_of_assignments == 0]
        no_reuse = not any(reusable.values())
        every_single_fits = all(self._fits(ms, (n,), requests, {}) for n in ids)
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
            if len(ms[n].cells) == 1 and self._fits(ms, (n,), requests, reusable.get(1 << n, {}))
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
                and self._fits(ms, bits(g), requests, reusable.get(g, {}))
            )
        )
        unused_free = tuple(free_of(ms, n, name) for n in unused for name in requests)
        shape = (tuple(requests.items()), min_affinity, singles, tuple(unused), unused_free, groups)
        if no_reuse:
            cached = self._shape_cache.get(shape)
            if cached is not None:
                return {name: cached for name in requests} if cached else {}
        by_width: dict[int, list[int]] = {}
        if singles:
            by_width[1] = [1 << n for n in singles]
        all_unused_fit = no_reuse and all(self._fits(ms, (n,), requests, {}) for n in unused)
        for width in range(2, len(unused) + 1):
            for combo in combinations(unused, width):
                mask = mask_of(combo)
                if all_unused_fit or self._fits(ms, combo, requests, reusable.get(mask, {})):
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

    def choose_affinity(
        self,
        ms: MachineState,
        requests: Mapping[str, int],
        reusable: Mapping[int, Mapping[str, int]],
        hint: TopologyHint | None,
    ) -> int:
        """Default hint, hint extension and the single/multi-NUMA rule of ``Allocate``."""
        best = hint if hint is not None else TopologyHint(None, False)
        if best.numa_affinity is None:
            hints = self.calculate(ms, requests, reusable)
            if not hints:
                raise unexpected(
                    "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes "
                    "with enough memory is available"
                )
            default = best_hint(main_hints(hints))
            if not default.preferred and best.preferred:
                raise unexpected("[memorymanager] failed to find the default preferred hint")
            best = default
        mask = best.numa_affinity or 0
        if not all(
            sum(free_of(ms, n, name) for n in bits(mask)) >= size for name, size in requests.items()
        ):
            candidates = [
                h
                for h in main_hints(self.calculate(ms, requests, reusable))
                if h.numa_affinity is not None and mask & h.numa_affinity == mask
            ]
            if not candidates:
                raise unexpected(
                    "[memorymanager] failed to find NUMA nodes to extend the current topology hint"
                )
            extended = best_hint(candidates)
            if not extended.preferred and best.preferred:
                raise unexpected("[memorymanager] failed to find the extended preferred hint")
            best = extended
        mask = best.numa_affinity or 0
        nodes = bits(mask)
        if len(nodes) > 1:
            for n in nodes:
                state = ms[n]
                if state.number_of_assignments == 0:
                    continue
                if len(state.cells) == 1 or sorted(state.cells) != list(nodes):
                    raise unexpected("[memorymanager] preferred hint violates NUMA node allocation")
        return mask


def best_hint(hints: Iterable[TopologyHint]) -> TopologyHint:
    """``findBestHint``: the first preferred hint, narrowest on ties."""
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


def main_hints(hints: Mapping[str, list[TopologyHint]]) -> list[TopologyHint]:
    """The kubelet reads the ``memory`` list (all types' lists are equal)."""
    if MEMORY in hints:
        return hints[MEMORY]
    return next(iter(hints.values()), [])


def regenerate_hints(blocks: list[Block], requests: Mapping[str, int]) -> HintMap | None:
    """Hints from existing blocks (re-admission): one preferred hint per type, None when the
    blocks do not match the request."""
    hints: dict[str, list[TopologyHint]] = {name: [] for name in requests}
    if len(blocks) != len(requests):
        return None
    for b in blocks:
        if b.type not in requests or b.size != requests[b.type]:
            return None
        hints[b.type].append(TopologyHint(mask_of(b.numa), True))
    return hints
