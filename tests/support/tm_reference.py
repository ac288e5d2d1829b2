"""The kubelet's topology-manager merge written literally (cross product, pairwise compare).

Only for tests: the engine's merge computes the same result without enumerating permutations,
and property tests compare the two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import product

from nri_plrm.engine.spec import TopologyHint


def reference_merge(
    lists: Sequence[Sequence[TopologyHint]],
    default_affinity: int,
    fitter: Callable[[int, int], int],
) -> TopologyHint:
    """``HintMerger.Merge``: ``fitter(cur, cand)`` returns the fitter of two different masks."""
    target = 0
    for hints in lists:
        masks = [h.numa_affinity for h in hints if h.numa_affinity is not None]
        if masks:
            narrowest = min(masks, key=lambda m: (m.bit_count(), m))
            target = max(target, narrowest.bit_count())
    best: TopologyHint | None = None
    for perm in product(*lists):
        preferred = True
        merged = default_affinity
        first: int | None = None
        for h in perm:
            if h.numa_affinity is not None:
                merged &= h.numa_affinity
                if first is None:
                    first = h.numa_affinity
                elif h.numa_affinity != first:
                    preferred = False
            if not h.preferred:
                preferred = False
        best = _compare(best, TopologyHint(merged, preferred), target, fitter)
    return best if best is not None else TopologyHint(default_affinity, False)


def _fit(cur: TopologyHint, cand: TopologyHint, fitter: Callable[[int, int], int]) -> TopologyHint:
    assert cur.numa_affinity is not None and cand.numa_affinity is not None
    if cand.numa_affinity == cur.numa_affinity:
        return cur
    return cur if fitter(cur.numa_affinity, cand.numa_affinity) == cur.numa_affinity else cand


def _compare(
    cur: TopologyHint | None,
    cand: TopologyHint,
    target: int,
    fitter: Callable[[int, int], int],
) -> TopologyHint | None:
    if not cand.numa_affinity:
        return cur
    if cur is None:
        return cand
    if not cur.preferred and cand.preferred:
        return cand
    if cur.preferred and not cand.preferred:
        return cur
    if cur.preferred and cand.preferred:
        return _fit(cur, cand, fitter)
    assert cur.numa_affinity is not None
    c, k = cur.numa_affinity.bit_count(), cand.numa_affinity.bit_count()
    if c > target:
        return _fit(cur, cand, fitter)
    if c == target:
        return cur if k != target else _fit(cur, cand, fitter)
    if k > target:
        return cur
    if k == target:
        return cand
    if k > c:
        return cand
    if k < c:
        return cur
    return _fit(cur, cand, fitter)


def narrowest(a: int, b: int) -> int:
    """``Narrowest``."""
    ca, cb = a.bit_count(), b.bit_count()
    if ca == cb:
        return a if a < b else b
    return a if ca < cb else b
