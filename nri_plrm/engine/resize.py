"""In-place resize, as kubelet 1.35-1.37 performs or refuses it (docs/design.md, "Resize").

The kubelet's resize admission (``podResizesAdmitHandler``) refuses, with reason ``Infeasible``:

- any change of a pod-level resource unless ``InPlacePodLevelResourcesVerticalScaling`` is on
  (message ``InPlacePodLevelResourcesVerticalScaling is disabled``);
- any CPU change of a container of a Guaranteed pod under CPU manager ``static`` unless
  ``InPlacePodVerticalScalingExclusiveCPUs`` is on (``Resize is infeasible for Guaranteed Pods
  alongside CPU Manager policy "static"``);
- any memory change of a container of a Guaranteed pod under memory manager ``Static`` unless
  ``InPlacePodVerticalScalingExclusiveMemory`` is on (same message naming ``Static``). The
  plugin does not implement exclusive-memory resize, so that gate is not offered: memory
  resizes of Guaranteed pods are always refused, as by a kubelet with its default gates.

With ``InPlacePodVerticalScalingExclusiveCPUs`` the static policy resizes an exclusive container
in place: it keeps the CPUs it holds when growing (new ones aligned to its NUMA affinity first)
and keeps its baseline (the CPUs it was created with) when shrinking; it refuses shrinking below
the baseline (``prohibitedCPUAllocationError``) and moving between the exclusive and the shared
pool (``inconsistentCPUAllocationError``). A shared container's CPU resize changes its quota
only (the runtime applies it); its cpuset stays its pool. Exclusive slices of pods with
pod-level resources are not resized by the kubelet; the plugin refuses that resize instead of
acknowledging it (its own message, below).

A pod budget resize (``InPlacePodLevelResourcesVerticalScaling``) grows or shrinks the pod's
reserved CPUs through its shared pool: growing takes node CPUs aligned to the pod's NUMA
affinity first, shrinking gives back CPUs of the pod shared pool; exclusive slices stay. A budget
that would no longer hold the exclusive slices, or leave no CPU for a live shared container, is
refused with the pod-scope admission messages.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from nri_plrm.cpuset import EMPTY, CPUSet
from nri_plrm.engine.admitted import MODE_WHOLE, AdmittedPod
from nri_plrm.engine.cpu_assignment import CPUAllocationError, take_by_topology
from nri_plrm.engine.cpu_requests import QOS_GUARANTEED, effective_requests, pod_qos
from nri_plrm.engine.spec import (
    CPU,
    EMPTY_POD_SHARED_POOL_ERROR,
    MEMORY,
    AdmissionError,
    AssignmentType,
    ContainerAssignment,
    ContainerSpec,
    PodSpec,
    ResourceList,
    unexpected,
)

if TYPE_CHECKING:
    from nri_plrm.engine.facade import Changes, Engine

INFEASIBLE = "Infeasible"
"""The kubelet's ``PodReasonInfeasible``."""
INCONSISTENT_CPU_ALLOCATION_ERROR = "inconsistentCPUAllocationError"
PROHIBITED_CPU_ALLOCATION_ERROR = "prohibitedCPUAllocationError"

POD_LEVEL_GATE_MESSAGE = "InPlacePodLevelResourcesVerticalScaling is disabled"
CPU_STATIC_MESSAGE = (
    'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'
)
MEMORY_STATIC_MESSAGE = (
    'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"'
)
POD_LEVEL_SLICE_MESSAGE = (
    "Resize is infeasible for exclusive CPUs of pods with pod-level resources alongside CPU "
    'Manager policy "static"'
)
"""The plugin's own message: the kubelet skips this resize and leaves the CPUs as they were."""


def quantity(millis: int) -> str:
    """A CPU amount the way ``resource.Quantity.String()`` prints it (``2``, ``1500m``)."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _cpu_millis(container: ContainerSpec) -> int:
    return effective_requests(container.requests, container.limits).get(CPU, 0)


def _changed(old: ContainerSpec | PodSpec, new: ContainerSpec | PodSpec, name: str) -> bool:
    return (old.requests or {}).get(name) != (new.requests or {}).get(name) or (
        old.limits or {}
    ).get(name) != (new.limits or {}).get(name)


def with_container(pod: PodSpec, new: ContainerSpec) -> PodSpec:
    """``pod`` with the container of ``new``'s name replaced by ``new`` (its kind kept)."""

    def swap(items: tuple[ContainerSpec, ...]) -> tuple[ContainerSpec, ...]:
        return tuple(replace(new, kind=c.kind) if c.name == new.name else c for c in items)

    return replace(pod, init_containers=swap(pod.init_containers), containers=swap(pod.containers))


def inconsistent(requested: str, allocated: str, *, shared_to_exclusive: bool) -> AdmissionError:
    """The static policy's ``inconsistentCPUAllocationError``."""
    if shared_to_exclusive:
        text = (
            "inconsistentCPUAllocation Error: Not allowed to move a container from shared pool "
            f"to exclusively allocated pool, (requested CPUs = {requested}, allocated CPUs = "
            f"{allocated})"
        )
    else:
        text = (
            "inconsistentCPUAllocation Error: Not allowed to move a container from  exclusively "
            f"allocated pool to shared pool, not allowed (requested CPUs = {requested}, "
            f"allocated CPUs = {allocated})"
        )
    return AdmissionError(INCONSISTENT_CPU_ALLOCATION_ERROR, text)


def prohibited(requested: str, allocated: str, promised: int, guaranteed: int) -> AdmissionError:
    """The static policy's ``prohibitedCPUAllocationError``."""
    return AdmissionError(
        PROHIBITED_CPU_ALLOCATION_ERROR,
        "prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively "
        f"allocated pool below promised, (requested CPUs = {requested}, allocated CPUs = "
        f"{allocated}, promised CPUs = {promised}, guaranteed CPUs = {guaranteed})",
    )


def _take_more(engine: Engine, n: int, affinity: int | None) -> CPUSet:
    """``n`` free node CPUs, those of ``affinity``'s NUMA nodes first (``allocateCPUs``); they
    leave the node shared pool."""
    try:
        return engine.cpu_manager.allocate_cpus(n, affinity)
    except CPUAllocationError as err:
        raise unexpected(str(err)) from err


def _take(engine: Engine, available: CPUSet, n: int) -> CPUSet:
    """``takeByTopology`` with the static policy's options; raises ``CPUAllocationError``."""
    options = engine.cpu_manager.options.take_options
    return take_by_topology(engine.topology, available, n, options=options)


def _record(engine: Engine, pod_uid: str) -> AdmittedPod:
    record = engine.admitted(pod_uid)
    if record is None:
        raise ValueError(f"pod {pod_uid}: not known")
    return record


def _shared_containers(engine: Engine, record: AdmittedPod) -> list[str]:
    """Live containers of a pod-level pod that run on its pod shared pool."""
    if record.mode != MODE_WHOLE:
        return sorted(record.shared - record.stopped)
    cpu, uid = engine.cpu_manager, record.spec.uid
    return [
        c.name
        for c in record.spec.all_containers()
        if cpu.assignment(uid, c.name) is not None
        and cpu.assignment_type(uid, c.name) is AssignmentType.POD_SHARED
    ]


def _pod_affinity(engine: Engine, record: AdmittedPod) -> int | None:
    """The NUMA affinity the pod was aligned with (scope pod), or None."""
    if record.hint is not None:
        return record.hint.numa_affinity
    first = next(iter(record.spec.all_containers()), None)
    if first is None:
        return None
    return engine.topology_manager.get_affinity(record.spec.uid, first.name).numa_affinity


def _record_container(record: AdmittedPod, container: ContainerSpec) -> None:
    if record.mode == MODE_WHOLE:
        record.spec = with_container(record.spec, container)
        return
    for i, known in enumerate(record.containers):
        if known.name == container.name:
            record.containers[i] = container


def resize_container(
    engine: Engine, pod_uid: str, new: ContainerSpec
) -> tuple[ContainerAssignment, Changes]:
    """Resize a known container to ``new``'s requests and limits (kind kept); its assignment and
    the other containers' changes. Raises ``AdmissionError`` (nothing changes then) and
    ValueError for an unknown container."""
    record = _record(engine, pod_uid)
    pod = engine.pod_so_far(pod_uid) or record.spec
    old = pod.container(new.name)
    if old is None:
        raise ValueError(f"pod {pod_uid}, container {new.name}: not known")
    new = replace(new, kind=old.kind)
    cpu_changed, memory_changed = _changed(old, new, CPU), _changed(old, new, MEMORY)
    cpu = engine.cpu_manager
    guaranteed = pod_qos(pod) == QOS_GUARANTEED
    gates = engine.config.resize
    if guaranteed and cpu_changed and not gates.exclusive_cpus:
        raise AdmissionError(INFEASIBLE, CPU_STATIC_MESSAGE)
    if guaranteed and memory_changed and engine.memory_manager.static:
        raise AdmissionError(INFEASIBLE, MEMORY_STATIC_MESSAGE)
    before = cpu.default_cpuset
    resized = with_container(pod, new)
    old_n, new_n = cpu.guaranteed_cpus(pod, old), cpu.guaranteed_cpus(resized, new)
    requested, allocated = quantity(_cpu_millis(new)), quantity(_cpu_millis(old))
    if cpu_changed and guaranteed and (old_n > 0) != (new_n > 0):
        raise inconsistent(requested, allocated, shared_to_exclusive=new_n > 0)
    if cpu_changed and old_n > 0 and old_n != new_n:
        if cpu.pod_cpus(pod_uid) is not None:
            raise AdmissionError(INFEASIBLE, POD_LEVEL_SLICE_MESSAGE)
        current = cpu.assignment(pod_uid, new.name) or EMPTY
        baseline = record.baselines.get(new.name, current)
        if not baseline <= current:
            baseline = current
        if len(baseline) > new_n:
            raise prohibited(requested, allocated, len(baseline), new_n)
        cpu.require_whole_cores(new_n)
        if new_n > len(current):
            hint = engine.topology_manager.get_affinity(pod_uid, new.name)
            cpus = current | _take_more(engine, new_n - len(current), hint.numa_affinity)
        else:
            cpus = baseline | _take(engine, current - baseline, new_n - len(baseline))
            cpu.give_back(current - cpus)
        cpu.set_container_cpus(pod_uid, new.name, cpus)
        record.baselines.setdefault(new.name, baseline)
    _record_container(record, new)
    return engine.current(pod_uid, new.name), engine.changes_since(before, (pod_uid, new.name))


def resize_pod(
    engine: Engine, pod_uid: str, requests: ResourceList, limits: ResourceList
) -> Changes:
    """Resize a pod's pod-level resources (its budget); the containers whose assignment changed.
    Raises ``AdmissionError`` (nothing changes then) and ValueError for an unknown pod."""
    record = _record(engine, pod_uid)
    pod = engine.pod_so_far(pod_uid) or record.spec
    resized = replace(pod, requests=dict(requests), limits=dict(limits))
    cpu = engine.cpu_manager
    bubble = cpu.pod_cpus(pod_uid)
    cpu_changed, memory_changed = _changed(pod, resized, CPU), _changed(pod, resized, MEMORY)
    if not (cpu_changed or memory_changed):
        return {}
    if not engine.config.resize.pod_level:
        raise AdmissionError(INFEASIBLE, POD_LEVEL_GATE_MESSAGE)
    guaranteed = pod_qos(pod) == QOS_GUARANTEED
    if guaranteed and memory_changed and engine.memory_manager.static:
        raise AdmissionError(INFEASIBLE, MEMORY_STATIC_MESSAGE)
    before = cpu.default_cpuset
    if bubble is None or not cpu_changed:
        record.spec = replace(record.spec, requests=dict(requests), limits=dict(limits))
        return engine.changes_since(before)
    shared = _shared_containers(engine, record)
    old = {name: engine.current(pod_uid, name) for name in shared}
    _resize_bubble(engine, record, resized, bubble)
    pool = cpu.pod_shared_pool(pod_uid)
    for name in shared:
        cpu.set_container_cpus(pod_uid, name, pool)
    record.spec = replace(record.spec, requests=dict(requests), limits=dict(limits))
    changes = engine.changes_since(before)
    for name, was in old.items():
        now = engine.current(pod_uid, name)
        if now != was:
            changes[(pod_uid, name)] = now
    return changes


def _resize_bubble(engine: Engine, record: AdmittedPod, resized: PodSpec, bubble: CPUSet) -> None:
    """Grow or shrink the pod's reserved CPUs to the resized budget (module docstring)."""
    cpu = engine.cpu_manager
    total = cpu.pod_guaranteed_cpus(resized)
    if total == 0:
        requested = quantity(effective_requests(resized.requests, resized.limits).get(CPU, 0))
        allocated = quantity(len(bubble) * 1000)
        raise inconsistent(requested, allocated, shared_to_exclusive=False)
    cpu.require_whole_cores(total)
    uid = resized.uid
    pool = cpu.pod_shared_pool(uid)
    slices = len(bubble) - len(pool)
    if total < slices:
        raise AdmissionError(
            EMPTY_POD_SHARED_POOL_ERROR,
            f"pod rejected, exclusive container requests {slices} cpus, but only {total} "
            "available in the pod budget",
        )
    if total == slices and _shared_containers(engine, record):
        raise AdmissionError(
            EMPTY_POD_SHARED_POOL_ERROR,
            "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no "
            "cpus for shared containers",
        )
    if total > len(bubble):
        extra = _take_more(engine, total - len(bubble), _pod_affinity(engine, record))
        cpu.set_pod_cpus(uid, bubble | extra)
        return
    try:
        keep = _take(engine, pool, len(pool) - (len(bubble) - total))
    except CPUAllocationError as err:
        raise unexpected(str(err)) from err
    cpu.set_pod_cpus(uid, bubble - (pool - keep))
    cpu.give_back(pool - keep)
