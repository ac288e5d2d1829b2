"""In-place resize, as kubelet 1.37 performs or refuses it (docs/design.md section 10).

The kubelet's resize admission (``pkg/kubelet/allocation/handlers.go``,
``podResizesAdmitHandler``) refuses, with reason ``Infeasible``:

- a pod-level change unless ``InPlacePodLevelResourcesVerticalScaling`` is on (on by default
  since 1.36; ``InPlacePodLevelResourcesVerticalScaling is disabled``);
- a CPU change of a resizable container of a Guaranteed pod under CPU manager ``static`` unless
  ``InPlacePodVerticalScalingExclusiveCPUs`` is on (``Resize is infeasible for Guaranteed Pods
  alongside CPU Manager policy "static"``);
- a memory change of a resizable container of a Guaranteed pod under memory manager ``Static``
  (same message naming ``Static``; ``InPlacePodVerticalScalingExclusiveMemory`` is not offered);
- a pod whose requests exceed the node's allocatable (``Node didn't have enough capacity: cpu,
  requested: R, capacity: C``, millicores; memory in bytes, checked first).

Only app and restartable (sidecar) init containers are resizable (``IsResizableContainer``); the
API server refuses a resize of a plain init container, and the plugin refuses it too (its own
message). What the kubelet admits, its CPU and Memory Managers leave as they are: they act on
the ``Add`` operation only (kubernetes/kubernetes#140224), so a Burstable container keeps its
shared pool and a pod budget keeps its CPUs and memory blocks; the runtime applies the new
quota, shares and limits.

Opt-in, for features not in any kubelet release (docs/config.md ``[resize]``):

- ``exclusive_cpus`` follows kubernetes/kubernetes#140629 (KEP-5554, open): an exclusive
  container keeps the CPUs it holds when growing (new ones chosen by
  :mod:`~nri_plrm.engine.resize_topology`) and its baseline (the CPUs it was created with) when
  shrinking; it refuses shrinking below the baseline (``prohibitedCPUAllocationError``) and
  moving between the exclusive and the shared pool (``inconsistentCPUAllocationError``). An
  exclusive slice of a pod with pod-level resources is not resized by that PR either; the
  plugin refuses it instead of acknowledging a cpuset it leaves (its own message).
- ``pod_budget_cpus``, the plugin's own: a budget resize grows or shrinks the pod's reserved
  CPUs through its shared pool (growing by the same topology rules); exclusive slices stay. A
  budget that would no longer hold the slices, or leave no CPU for a live shared container, is
  refused with the pod-scope admission messages.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.admitted import MODE_WHOLE, AdmittedPod
from nri_plrm.engine.cpu_assignment import CPUAllocationError, take_by_topology
from nri_plrm.engine.cpu_requests import QOS_GUARANTEED, effective_requests, pod_qos
from nri_plrm.engine.pod_budget import check_slice
from nri_plrm.engine.resize_topology import grow_affinity
from nri_plrm.engine.spec import (
    CPU,
    MEMORY,
    AdmissionError,
    AssignmentType,
    ContainerAssignment,
    ContainerKind,
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
NODE_CAPACITY_MESSAGE = "Node didn't have enough capacity: "
"""The kubelet's prefix; ``{resource}, requested: {R}, capacity: {C}`` follows."""


def init_container_message(name: str) -> str:
    """The plugin's own message for a plain init container (the API server refuses that patch)."""
    return (
        f'Resize is infeasible for init container "{name}": only app and restartable (sidecar) '
        "init containers are resized in place"
    )


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


def pod_request(pod: PodSpec, name: str) -> int:
    """The kubelet's ``GetResourceRequest``: the pod-level request when set, otherwise app
    containers and sidecars summed, or the largest plain init container (with the sidecars
    started before it) when that is more."""
    if pod.has_pod_level_resources and name in (pod.requests or {}):
        return (pod.requests or {})[name]
    sidecars, init_peak = 0, 0
    for c in pod.init_containers:
        value = effective_requests(c.requests, c.limits).get(name, 0)
        if c.kind is ContainerKind.SIDECAR:
            sidecars += value
        else:
            init_peak = max(init_peak, sidecars + value)
    apps = sum(effective_requests(c.requests, c.limits).get(name, 0) for c in pod.containers)
    return max(apps + sidecars, init_peak)


def check_node_capacity(engine: Engine, pod: PodSpec) -> None:
    """Refuse a resized pod whose requests exceed the node's allocatable (the kubelet's
    ``insufficient_node_allocatable``: memory first, then CPU). Allocatable CPU is the node's
    CPUs less the reserved ones; allocatable memory is known with the ``Static`` policy."""
    memory = engine.memory_manager
    if memory.static:
        capacity = sum(b.size for b in memory.allocatable() if b.resource == MEMORY)
        requested = pod_request(pod, MEMORY)
        if requested > capacity:
            raise AdmissionError(
                INFEASIBLE,
                f"{NODE_CAPACITY_MESSAGE}memory, requested: {requested}, capacity: {capacity}",
            )
    capacity = len(engine.cpu_manager.allocatable_cpus()) * 1000
    requested = pod_request(pod, CPU)
    if requested > capacity:
        raise AdmissionError(
            INFEASIBLE, f"{NODE_CAPACITY_MESSAGE}cpu, requested: {requested}, capacity: {capacity}"
        )


def _grow_affinity(
    engine: Engine, held: CPUSet, n: int, memory_numa: tuple[int, ...]
) -> int | None:
    policy = engine.topology_manager.policy
    free = engine.cpu_manager.available_cpus()
    return grow_affinity(engine.topology, policy, held, free, n, memory_numa)


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
    if (cpu_changed or memory_changed) and old.kind is ContainerKind.INIT:
        raise AdmissionError(INFEASIBLE, init_container_message(new.name))
    cpu = engine.cpu_manager
    guaranteed = pod_qos(pod) == QOS_GUARANTEED
    gates = engine.config.resize
    if guaranteed and cpu_changed and not gates.exclusive_cpus:
        raise AdmissionError(INFEASIBLE, CPU_STATIC_MESSAGE)
    if guaranteed and memory_changed and engine.memory_manager.static:
        raise AdmissionError(INFEASIBLE, MEMORY_STATIC_MESSAGE)
    resized = with_container(pod, new)
    if cpu_changed or memory_changed:
        check_node_capacity(engine, resized)
    before = cpu.default_cpuset
    old_n, new_n = cpu.guaranteed_cpus(pod, old), cpu.guaranteed_cpus(resized, new)
    requested, allocated = quantity(_cpu_millis(new)), quantity(_cpu_millis(old))
    if cpu_changed and guaranteed and (old_n > 0) != (new_n > 0):
        raise inconsistent(requested, allocated, shared_to_exclusive=new_n > 0)
    if cpu_changed and old_n > 0 and old_n != new_n:
        if pod.has_pod_level_resources or cpu.pod_cpus(pod_uid) is not None:
            raise AdmissionError(INFEASIBLE, POD_LEVEL_SLICE_MESSAGE)
        current = cpu.assignment(pod_uid, new.name) or EMPTY
        baseline = record.baselines.get(new.name, current)
        if not baseline <= current:
            baseline = current
        if len(baseline) > new_n:
            raise prohibited(requested, allocated, len(baseline), new_n)
        cpu.require_whole_cores(new_n)
        if new_n > len(current):
            memory_numa = engine.memory_manager.numa_nodes_for(pod_uid, new.name)
            affinity = _grow_affinity(engine, current, new_n, memory_numa)
            cpus = current | _take_more(engine, new_n - len(current), affinity)
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
    gates = engine.config.resize
    if not gates.pod_level:
        raise AdmissionError(INFEASIBLE, POD_LEVEL_GATE_MESSAGE)
    check_node_capacity(engine, resized)
    before = cpu.default_cpuset
    if bubble is None or not cpu_changed or not gates.pod_budget_cpus:
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
    """Grow or shrink the pod's reserved CPUs to the resized budget (``pod_budget_cpus``)."""
    cpu = engine.cpu_manager
    total = cpu.pod_guaranteed_cpus(resized)
    if total == 0:
        requested = quantity(effective_requests(resized.requests, resized.limits).get(CPU, 0))
        allocated = quantity(len(bubble) * 1000)
        raise inconsistent(requested, allocated, shared_to_exclusive=False)
    cpu.require_whole_cores(total)
    uid = resized.uid
    pool = cpu.pod_shared_pool(uid)
    check_slice(total, len(bubble) - len(pool), bool(_shared_containers(engine, record)), CPU)
    if total > len(bubble):
        blocks = engine.memory_manager.pod_blocks(uid) or ()
        memory_numa = tuple(sorted({n for b in blocks for n in b.numa_nodes}))
        affinity = _grow_affinity(engine, bubble, total, memory_numa)
        if affinity is None:
            affinity = _pod_affinity(engine, record)
        extra = _take_more(engine, total - len(bubble), affinity)
        cpu.set_pod_cpus(uid, bubble | extra)
        return
    try:
        keep = _take(engine, pool, len(pool) - (len(bubble) - total))
    except CPUAllocationError as err:
        raise unexpected(str(err)) from err
    cpu.set_pod_cpus(uid, bubble - (pool - keep))
    cpu.give_back(pool - keep)
