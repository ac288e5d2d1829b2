"""A fixed :class:`nri_plrm.ledger.view.PodResourcesView` for tests and benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.spec import MemoryBlock
from nri_plrm.ledger.view import PodView


@dataclass(frozen=True)
class StaticView:
    """A fixed PodResources view: the pods, CPUs and memory blocks given."""

    pod_list: tuple[PodView, ...] = ()
    cpus: CPUSet = EMPTY
    memory: tuple[MemoryBlock, ...] = ()

    def pods(self) -> Sequence[PodView]:
        """The pods given."""
        return self.pod_list

    def allocatable_cpus(self) -> CPUSet:
        """The CPUs given."""
        return self.cpus

    def allocatable_memory(self) -> Sequence[MemoryBlock]:
        """The memory blocks given."""
        return self.memory
