"""Requests and decisions shared by the allocation engine's parts.

Resource lists map kubelet resource names to integers: ``cpu`` in millicores, ``memory`` and
``hugepages-<size>`` in bytes. A missing key means "not set".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from nri_plrm.base.cpuset import CPUSet

ResourceList = Mapping[str, int]

CPU = "cpu"
MEMORY = "memory"
HUGEPAGES_PREFIX = "hugepages-"


def is_memory_resource(name: str) -> bool:
    """True for ``memory`` and ``hugepages-<size>``: the resources the memory manager pins."""
    return name == MEMORY or name.startswith(HUGEPAGES_PREFIX)


class ContainerKind(enum.Enum):
    """Where a container sits in the pod spec."""

    INIT = "init"
    """A regular init container: runs to completion before the next one starts."""
    SIDECAR = "sidecar"
    """A restartable init container (``restartPolicy: Always``): runs for the pod's life."""
    APP = "app"
    """An ordinary container of ``spec.containers``."""


@dataclass(frozen=True)
class Device:
    """A device allocated to a container (by the kubelet's Device Manager at admission): its
    id and the NUMA nodes its device plugin reported (empty: no topology)."""

    id: str
    numa_nodes: tuple[int, ...] = ()


DeviceMap = Mapping[str, "tuple[Device, ...]"]
"""Allocated devices per resource name (``nvidia.com/gpu`` -> its devices)."""


@dataclass(frozen=True)
class ContainerSpec:
    """One container's name, kind, container-level resources and allocated devices."""

    name: str
    kind: ContainerKind = ContainerKind.APP
    requests: ResourceList = field(default_factory=dict)
    limits: ResourceList = field(default_factory=dict)
    devices: DeviceMap = field(default_factory=dict)
    """Devices the container holds, when known with the container; else :attr:`PodSpec.devices`
    by the container's name."""

    @property
    def restartable(self) -> bool:
        """True for sidecars (restartable init containers)."""
        return self.kind is ContainerKind.SIDECAR


@dataclass(frozen=True)
class PodSpec:
    """What the engine needs of a pod: identity, pod-level resources, containers in spec order."""

    uid: str
    namespace: str = "default"
    name: str = ""
    init_containers: tuple[ContainerSpec, ...] = ()
    containers: tuple[ContainerSpec, ...] = ()
    requests: ResourceList | None = None
    """``.spec.resources.requests``; None when the pod sets no pod-level resources."""
    limits: ResourceList | None = None
    """``.spec.resources.limits``; None when the pod sets no pod-level resources."""
    devices: Mapping[str, DeviceMap] = field(default_factory=dict)
    """Each container's allocated devices by container name (the kubelet's PodResources
    ``Get``), also for containers not in the spec yet (a pod known by its sandbox)."""

    @cached_property
    def has_pod_level_resources(self) -> bool:
        """``IsPodLevelResourcesSet``: pod-level requests or limits name cpu or memory."""
        names = set(self.requests or {}) | set(self.limits or {})
        return any(n == CPU or is_memory_resource(n) for n in names)

    def all_containers(self) -> tuple[ContainerSpec, ...]:
        """Init containers (sidecars included) then app containers, in spec order."""
        return self.init_containers + self.containers

    def container(self, name: str) -> ContainerSpec | None:
        """The container with this name, or None."""
        for c in self.all_containers():
            if c.name == name:
                return c
        return None


class AssignmentType(enum.Enum):
    """How a container's CPUs were decided; values are the ``simulate`` JSON and metric labels."""

    NODE_SHARED = "node_shared"
    NODE_EXCLUSIVE = "node_exclusive"
    POD_EXCLUSIVE = "pod_exclusive"
    POD_SHARED = "pod_shared"


class AdmissionError(Exception):
    """A pod or container the kubelet would reject: ``reason`` and ``message`` are the kubelet's.

    ``str(err)`` is the message, so logs and runtime errors read as the kubelet's do.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __repr__(self) -> str:
        return f"AdmissionError(reason={self.reason!r}, message={self.message!r})"


TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
SMT_ALIGNMENT_ERROR = "SMTAlignmentError"
EMPTY_POD_SHARED_POOL_ERROR = "EmptyPodSharedPoolError"
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"


def unexpected(message: str) -> AdmissionError:
    """Wrap a plain allocation failure the way the kubelet's ``GetPodAdmitResult`` does."""
    return AdmissionError(
        UNEXPECTED_ADMISSION_ERROR, f"Allocate failed due to {message}, which is unexpected"
    )


@dataclass(frozen=True)
class MemoryBlock:
    """Memory of one resource type pinned to a set of NUMA nodes (the kubelet's ``state.Block``)."""

    numa_nodes: tuple[int, ...]
    resource: str
    size: int


@dataclass(frozen=True)
class ContainerAssignment:
    """The engine's decision for one container, as the plugin applies it."""

    assignment: AssignmentType
    cpus: CPUSet
    """The cpuset to write (``cpu.cpus``): exclusive slice, pod pool or node shared pool."""
    mems: CPUSet
    """NUMA nodes to write to ``cpu.mems``; empty means "leave as is" (no memory pinning)."""
    memory: tuple[MemoryBlock, ...] = ()
    """Memory blocks reported for the container (empty for shared containers)."""

    @property
    def exclusive(self) -> bool:
        """True when CFS quota must be disabled (``cpu.quota = -1``)."""
        return self.assignment in (AssignmentType.NODE_EXCLUSIVE, AssignmentType.POD_EXCLUSIVE)


@dataclass(frozen=True)
class TopologyHint:
    """A NUMA affinity a resource could be satisfied with (the kubelet's ``TopologyHint``).

    ``numa_affinity`` is a bitmask of NUMA node ids (bit n = node n); None means "no preference".
    """

    numa_affinity: int | None
    preferred: bool

    def nodes(self) -> tuple[int, ...]:
        """The NUMA node ids of the affinity, ascending (empty for no preference)."""
        mask = self.numa_affinity or 0
        return tuple(i for i in range(mask.bit_length()) if mask >> i & 1)


HintMap = Mapping[str, "list[TopologyHint] | None"]
"""Hints per resource name. A missing map or a None list means "no preference"; an empty list
means the resource cannot be satisfied on any NUMA combination."""


@dataclass(frozen=True)
class ResizeGates:
    """What decides which resizes are performed (defaults: kubelet 1.37's default gates)."""

    exclusive_cpus: bool = False
    """``InPlacePodVerticalScalingExclusiveCPUs`` by kubernetes/kubernetes#140629 (open PR)."""
    pod_level: bool = True
    """``InPlacePodLevelResourcesVerticalScaling`` (beta, on by default since 1.36)."""
    pod_budget_cpus: bool = False
    """The plugin's own: a budget resize grows or shrinks the pod's reserved CPUs."""
