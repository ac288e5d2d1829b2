"""NUMA affinity bitmasks as plain integers (bit n = NUMA node n), with the kubelet's orderings.

These mirror ``topologymanager/bitmask``: ``IsNarrowerThan`` (fewer nodes wins, equal counts
compare numerically) and ``IterateBitMasks`` (every non-empty subset of the given node ids, by
size, then in lexicographic combination order).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import combinations

from nri_plrm.topology.model import MAX_NUMA_NODES


def mask_of(nodes: Iterable[int]) -> int:
    """The mask with a bit set for every node id (ids in ``0..MAX_NUMA_NODES - 1``)."""
    mask = 0
    for node in nodes:
        if not 0 <= node < MAX_NUMA_NODES:
            raise ValueError(
                f"numa node id {node}: must be >= 0 and below {MAX_NUMA_NODES} to be part of a "
                "bitmask"
            )
        mask |= 1 << node
    return mask


def bits(mask: int) -> tuple[int, ...]:
    """The node ids set in ``mask``, ascending (``GetBits``)."""
    out: list[int] = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


def count(mask: int) -> int:
    """Number of nodes in the mask (``Count``)."""
    return mask.bit_count()


def is_narrower_than(a: int, b: int) -> bool:
    """``a.IsNarrowerThan(b)``: fewer nodes, or as many nodes and numerically smaller."""
    ca, cb = a.bit_count(), b.bit_count()
    if ca == cb:
        return a < b
    return ca < cb


def iterate_bitmasks(node_ids: Sequence[int]) -> Iterator[int]:
    """Every non-empty subset of ``node_ids`` as a mask, in the kubelet's enumeration order."""
    ids = list(node_ids)
    for size in range(1, len(ids) + 1):
        for combo in combinations(ids, size):
            yield mask_of(combo)


def mask_string(mask: int) -> str:
    """``BitMask.String()``: binary, most significant node first, zero-padded in pairs of digits.

    Like the kubelet, the width is the smallest even width ``w`` with ``mask > 2**(w-2)``, so
    ``1`` is ``01`` and ``5`` is ``0101`` while an exact power of two may print one digit wider
    than its padding (``4`` is ``100``).
    """
    for shift in range(62, 0, -2):
        if mask > 1 << shift:
            return format(mask, f"0{shift + 2}b")
    return format(mask, "02b")
