"""What the PodResources endpoint needs from the plugin: a thread-safe snapshot of its pods.

The plugin satisfies :class:`PodResourcesView`. The gRPC server calls it from its worker
threads, so ``pods()`` must return an immutable snapshot (e.g. a tuple the plugin replaces
atomically after every decision) and never block on the plugin's event loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.spec import ContainerAssignment, ContainerKind, MemoryBlock


@dataclass(frozen=True)
class ContainerView:
    """One container of a pod and the engine's decision for it (None while undecided)."""

    name: str
    assignment: ContainerAssignment | None = None
    kind: ContainerKind | None = None
    """The container's kind when known; regular init containers are not reported (as the
    kubelet does), unknown kinds (NRI-only mode) are."""


@dataclass(frozen=True)
class PodView:
    """One pod: identity, containers in spec (or creation) order, pod-level allocation."""

    uid: str
    namespace: str
    name: str
    containers: tuple[ContainerView, ...] = ()
    cpus: CPUSet = EMPTY
    """Pod-level exclusive CPUs (scope ``pod`` with pod-level resources); empty otherwise."""
    memory: tuple[MemoryBlock, ...] = ()
    """Pod-level memory blocks, populated like ``cpus``."""


class PodResourcesView(Protocol):
    """The plugin's side of the contract; every method may be called from any thread."""

    def pods(self) -> Sequence[PodView]:
        """Every pod the plugin tracks, as an immutable snapshot.

        The same object must be returned until something changes (the server caches its
        ``List`` reply by the snapshot's identity); publish a new object on every change.
        """
        ...

    def allocatable_cpus(self) -> CPUSet:
        """CPUs the plugin may hand out: all online CPUs minus the reserved ones."""
        ...

    def allocatable_memory(self) -> Sequence[MemoryBlock]:
        """Allocatable bytes per NUMA node and memory type (one single-node block each)."""
        ...


def find_pod(view: PodResourcesView, namespace: str, name: str) -> PodView | None:
    """The pod with this namespace and name, or None."""
    for pod in view.pods():
        if pod.namespace == namespace and pod.name == name:
            return pod
    return None


def reported_containers(pod: PodView) -> Iterable[ContainerView]:
    """The containers the kubelet would report: all but regular (non-restartable) init ones."""
    return (c for c in pod.containers if c.kind is not ContainerKind.INIT)
