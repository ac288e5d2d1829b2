"""The static policy's ``takeByTopology`` for one node, with its last answers kept.

An NRI-only pod's promotion and demotion (docs/design.md section 2) take again, from the same
free CPUs, what its admission took; the answer is a pure function of the free CPUs and the
count (the topology and the policy options are the node's), so it is kept, not recomputed.
"""

from __future__ import annotations

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.cpu_assignment import TakeOptions, take_by_topology
from nri_plrm.topology.model import Topology

RECENT_TAKES = 64
"""Answers kept (the oldest is dropped first)."""


class KeptTakes:
    """``takeByTopology`` on ``topology`` with ``options``, remembering its last answers."""

    def __init__(self, topology: Topology, options: TakeOptions) -> None:
        self.topology = topology
        self.options = options
        self._recent: dict[tuple[int, int], CPUSet] = {}

    def take(self, available: CPUSet, n: int) -> CPUSet:
        """``n`` CPUs of ``available`` (raises ``CPUAllocationError`` as ``take_by_topology``)."""
        key = (available.mask, n)
        taken = self._recent.get(key)
        if taken is None:
            taken = take_by_topology(self.topology, available, n, options=self.options)
            if len(self._recent) >= RECENT_TAKES:
                del self._recent[next(iter(self._recent))]
            self._recent[key] = taken
        return taken
