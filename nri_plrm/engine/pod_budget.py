"""A pod-level pod's CPU and memory budget on the incremental (NRI) path, in scope pod.

The budget is reserved at sandbox time (the CPU manager's pod entry, the memory manager's pod
blocks); its containers then come one at a time. :class:`PodBudget` holds the rules they meet
there: the kubelet's ``validatePodScopeResources`` applied one exclusive container at a time
(:func:`check_slice`, the one check admission, adoption and a budget resize use), the carving
of exclusive slices and shared places, and the shared containers following their pool (which
it reports when they moved).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.admitted import AdmittedPod
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.memory_manager import MemoryManager
from nri_plrm.engine.spec import (
    CPU,
    EMPTY_POD_SHARED_POOL_ERROR,
    MEMORY,
    AdmissionError,
    ContainerAssignment,
)

Changes = dict[tuple[str, str], ContainerAssignment]
"""The new assignments of containers that changed, by (pod uid, container name)."""


def cpu_pool_emptied() -> str:
    """The kubelet's message when exclusive CPUs would leave shared containers none."""
    return (
        "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no "
        "cpus for shared containers"
    )


def memory_pool_emptied(resource: str) -> str:
    """The kubelet's message when exclusive memory would leave shared containers none."""
    return (
        f"pod rejected, sum of exclusive container {resource} requests equals pod budget, "
        "leaving no memory for shared containers"
    )


def check_slice(pool: int, request: int, shared_alive: bool, resource: str) -> None:
    """Incremental form of ``validatePodScopeResources`` for exclusive slices: ``request`` (of
    ``resource``: CPUs, or bytes of a memory type) must fit in ``pool`` (what is left of the
    budget) and must not empty it while a shared container lives. Raises ``AdmissionError``."""
    if request > pool:
        amount = f"{request} cpus" if resource == CPU else f"{request} of {resource}"
        raise AdmissionError(
            EMPTY_POD_SHARED_POOL_ERROR,
            f"pod rejected, exclusive container requests {amount}, but only {pool} available "
            "in the pod budget",
        )
    if shared_alive and request >= pool:
        raise AdmissionError(
            EMPTY_POD_SHARED_POOL_ERROR,
            cpu_pool_emptied() if resource == CPU else memory_pool_emptied(resource),
        )


def shared_alive(record: AdmittedPod, name: str) -> bool:
    """True when a container of the pod other than ``name`` runs on its shared pool."""
    return any(s not in record.stopped and s != name for s in record.shared)


class PodBudget:
    """The budgets the CPU and memory managers hold for pod-level pods (module docstring).

    ``assignment_of`` gives a container's assignment as the engine reports it (for the
    shared containers a change of their pool moves)."""

    def __init__(
        self,
        cpu: CPUManager,
        memory: MemoryManager,
        assignment_of: Callable[[str, str], ContainerAssignment],
    ) -> None:
        self.cpu = cpu
        self.memory = memory
        self.assignment_of = assignment_of

    def holds(self, pod_uid: str) -> bool:
        """True while the pod has a reserved CPU or memory budget."""
        return (
            self.cpu.state.pod_cpus(pod_uid) is not None
            or self.memory.state.pod_blocks(pod_uid) is not None
        )

    def check(self, record: AdmittedPod, name: str, n: int, memory: Mapping[str, int]) -> None:
        """May container ``name`` of the pod take ``n`` exclusive CPUs (0: it shares the pod
        pool) and the exclusive ``memory`` (empty: it shares)? A shared container needs a
        non-empty pool, a slice must pass :func:`check_slice`. Raises ``AdmissionError``."""
        uid = record.spec.uid
        live_shared = shared_alive(record, name)
        if self.cpu.state.pod_cpus(uid) is not None:
            free = len(self.cpu.pod_shared_pool(uid))
            if n > 0:
                check_slice(free, n, live_shared, CPU)
            elif free == 0:
                raise AdmissionError(EMPTY_POD_SHARED_POOL_ERROR, cpu_pool_emptied())
        if self.memory.state.pod_blocks(uid) is not None:
            pool = self.memory.pod_pool(uid)
            if memory:
                for resource, size in memory.items():
                    check_slice(pool.get(resource, 0), size, live_shared, resource)
            elif not any(v > 0 for v in pool.values()):
                raise AdmissionError(EMPTY_POD_SHARED_POOL_ERROR, memory_pool_emptied(MEMORY))

    def carve(
        self,
        record: AdmittedPod,
        name: str,
        n: int,
        memory: Mapping[str, int],
        cpus: CPUSet | None = None,
    ) -> None:
        """Give container ``name`` its place in the budget after :meth:`check`: an exclusive
        slice of ``n`` CPUs (exactly ``cpus`` when given: adoption; ValueError, nothing
        changed, unless they are all in the pod shared pool) or the pod shared pool, and its
        exclusive ``memory`` or the memory pool; the shared containers follow their pool."""
        cpu, mem, uid = self.cpu, self.memory, record.spec.uid
        if cpu.state.pod_cpus(uid) is not None:
            if cpus is not None:
                cpu.adopt_pod_slice(uid, name, cpus)
                record.shared.discard(name)
            elif n > 0:
                cpu.take_from_pod(uid, name, n)
                record.shared.discard(name)
            else:
                cpu.set_container_cpus(uid, name, cpu.pod_shared_pool(uid))
                record.shared.add(name)
        if mem.state.pod_blocks(uid) is not None:
            if memory:
                mem.take_from_pod(uid, name, memory)
            else:
                mem.share_pod_pool(uid, name)
        self.pin_shared(record)

    def pin_shared(self, record: AdmittedPod) -> None:
        """Put the pod's live shared containers on the pod shared pool as it is now."""
        cpu, uid = self.cpu, record.spec.uid
        if cpu.state.pod_cpus(uid) is not None:
            pool = cpu.pod_shared_pool(uid)
            for name in record.shared:
                if name not in record.stopped and cpu.assignment(uid, name) is not None:
                    cpu.set_container_cpus(uid, name, pool)
        self.memory.refresh_shared(uid)

    def shared_now(self, record: AdmittedPod) -> dict[str, ContainerAssignment]:
        """The assignments of the containers on the pod shared pool (to compare with later)."""
        if not record.shared:
            return {}
        uid = record.spec.uid
        return {n: self.assignment_of(uid, n) for n in record.shared}

    def moved(
        self,
        record: AdmittedPod,
        before: Mapping[str, ContainerAssignment],
        changes: Changes,
        exclude: str,
    ) -> None:
        """Add to ``changes`` the containers still on the pod shared pool (but ``exclude``)
        whose assignment differs from ``before`` (:meth:`shared_now`)."""
        uid = record.spec.uid
        for other, old in before.items():
            if other == exclude or other not in record.shared:
                continue
            new = self.assignment_of(uid, other)
            if new != old:
                changes[(uid, other)] = new
