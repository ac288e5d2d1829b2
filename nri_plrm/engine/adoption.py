"""Adopting allocations that already run, instead of choosing them (reconciliation).

After a restart without usable state, Synchronize reports every running container with the
cpuset and mems it runs on. The functions below record such an allocation in an
:class:`~nri_plrm.engine.facade.Engine` as it is, after checking that the engine could hold it
now: exclusive CPUs free (not reserved, not held by anyone else), as many as the request, a
pod-level pod's slices inside its budget and leaving its shared pool non-empty while a shared
container lives, memory charged on the NUMA nodes the container runs on. Each raises
:class:`AdoptionError` (nothing changed) naming why not; the caller then places the container
through the ordinary decision path. :func:`place_in_node_pool` records a container that cannot
get any allocation in the node shared pool, so it is never left on every CPU.

Pure functions of the engine's state and their arguments, deterministic, so a journal record
of their inputs replays to the same state. Whole-pod (``admit_pod``) records are not adopted.
"""

from __future__ import annotations

from nri_plrm.base.cpuset import EMPTY, CPUSet
from nri_plrm.engine.admitted import MODE_CLASSIC, MODE_POD_LEVEL, MODE_WHOLE, AdmittedPod
from nri_plrm.engine.bitmask import mask_of
from nri_plrm.engine.cpu_assignment import CPUAllocationError, topology_index
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.pod_budget import check_slice
from nri_plrm.engine.spec import (
    CPU,
    AdmissionError,
    ContainerAssignment,
    ContainerSpec,
    PodSpec,
    ResourceList,
    TopologyHint,
)
from nri_plrm.engine.topology_manager import POLICY_NONE


class AdoptionError(ValueError):
    """A running allocation the engine cannot hold as it is (the message says why)."""


def numa_mask(engine: Engine, cpus: CPUSet) -> int:
    """The NUMA nodes (as a mask) of ``cpus`` on the engine's machine."""
    info = engine.topology.cpu_info
    return mask_of({info[c].numa for c in cpus if c in info})


def exclusive_request(engine: Engine, pod: PodSpec, container: ContainerSpec) -> int:
    """Exclusive CPUs ``container`` is entitled to as a container of ``pod`` (0 = shared)."""
    spec = PodSpec(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        containers=(container,),
        requests=pod.requests,
        limits=pod.limits,
    )
    return engine.cpu_manager.guaranteed_cpus(spec, container)


def has_budget(engine: Engine, pod: PodSpec) -> bool:
    """True when admitting ``pod`` reserves a CPU budget (pod-level pod in scope pod)."""
    bare = _bare(pod)
    return (
        engine._pod_scope
        and bare.has_pod_level_resources
        and engine.cpu_manager.pod_guaranteed_cpus(bare) > 0
    )


def _bare(pod: PodSpec) -> PodSpec:
    return PodSpec(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        requests=pod.requests,
        limits=pod.limits,
    )


def adopt_sandbox(
    engine: Engine,
    pod: PodSpec,
    aggregate: ResourceList | None,
    claimed: CPUSet,
    avoid: CPUSet = EMPTY,
    mems: CPUSet = EMPTY,
) -> CPUSet:
    """Admit a running pod keeping the CPUs its containers hold.

    A pod with a CPU budget (:func:`has_budget`) gets a budget that contains ``claimed`` (its
    exclusive slices and shared pool as they run), completed to its size on the same NUMA
    nodes, preferring CPUs outside ``avoid`` (what other running containers hold); its memory
    budget is charged on the NUMA nodes of the CPUs. Other pods reserve nothing: their pod hint
    is the NUMA nodes of ``claimed``, else the NUMA nodes ``mems`` (the memory nodes its shared
    containers run on), or merged as at ``RunPodSandbox`` when neither is given (none when that
    merge fails: the pod runs already). Returns the budget's CPUs (empty when none). Raises
    :class:`AdoptionError`; nothing changes then.
    """
    uid = pod.uid
    if uid in engine._pods:
        raise AdoptionError(f"pod {uid}: already admitted")
    bare = _bare(pod)
    mode = MODE_POD_LEVEL if bare.has_pod_level_resources else MODE_CLASSIC
    cpu, mem = engine.cpu_manager, engine.memory_manager
    if not has_budget(engine, pod):
        record = AdmittedPod(spec=bare, mode=mode)
        nodes = [n for n in mems if n in engine.topology.numa_nodes]
        if engine._pod_scope and claimed:
            record.hint = TopologyHint(numa_mask(engine, claimed), True)
        elif engine._pod_scope and nodes:
            record.hint = TopologyHint(mask_of(nodes), True)
        elif engine._pod_scope and aggregate:
            try:
                engine.admit_sandbox(pod, aggregate)
                return EMPTY
            except AdmissionError:
                record.hint = None  # the pod runs already: admitted without a pod hint
        engine._pods[uid] = record
        return EMPTY
    total = cpu.pod_guaranteed_cpus(bare)
    affinity = numa_mask(engine, claimed) if claimed else None
    try:
        bubble = adopt_pod_bubble(cpu, uid, claimed, total, affinity, avoid)
    except ValueError as err:
        raise AdoptionError(f"pod {uid}: {err}") from err
    hint = TopologyHint(numa_mask(engine, bubble), True)
    try:
        mem.allocate_pod_budget(bare, hint)
    except AdmissionError as err:
        engine._rollback(uid)
        raise AdoptionError(f"pod {uid}: memory budget: {err.message}") from err
    engine._pods[uid] = AdmittedPod(spec=bare, mode=mode, hint=hint)
    return bubble


def adopt_container(
    engine: Engine, pod_uid: str, container: ContainerSpec, cpus: CPUSet, mems: CPUSet
) -> ContainerAssignment:
    """Record a running container of an admitted pod with the exclusive ``cpus`` it runs on.

    Only containers entitled to exclusive CPUs are adopted this way (shared ones get their pool
    through ``add_container``). Memory is charged on the NUMA nodes of ``mems`` (of ``cpus``
    when empty). Raises :class:`AdoptionError`; nothing changes then.
    """
    record = engine._pods.get(pod_uid)
    name = container.name
    if record is None or record.mode == MODE_WHOLE:
        raise AdoptionError(f"pod {pod_uid}: not admitted from its NRI budget")
    if any(c.name == name for c in record.containers):
        raise AdoptionError(f"container {name}: already placed")
    record.containers.append(container)
    try:
        return _adopt(engine, record, container, cpus, mems)
    except AdoptionError:
        record.containers.remove(container)
        raise


def _adopt(
    engine: Engine, record: AdmittedPod, container: ContainerSpec, cpus: CPUSet, mems: CPUSet
) -> ContainerAssignment:
    cpu, mem, tm = engine.cpu_manager, engine.memory_manager, engine.topology_manager
    spec = record.spec_so_far()
    uid, name = spec.uid, container.name
    n = cpu.guaranteed_cpus(spec, container)
    if n == 0:
        raise AdoptionError(f"container {name}: not entitled to exclusive cpus")
    if len(cpus) != n:
        raise AdoptionError(f"container {name}: runs on {cpus or 'every cpu'}, requests {n} cpus")
    ix = topology_index(engine.topology)
    if cpu.options.full_pcpus_only and ix.siblings_mask(cpus.mask) != cpus.mask:
        raise AdoptionError(f"container {name}: cpus {cpus} are not whole cores")
    if record.mode == MODE_POD_LEVEL and engine._pod_scope and cpu.pod_cpus(uid) is not None:
        live_shared = any(s not in record.stopped and s != name for s in record.shared)
        mem_req = mem.container_requests(spec, container)
        try:
            check_slice(len(cpu.pod_shared_pool(uid)), n, live_shared, CPU)
            if mem.pod_blocks(uid) is not None:
                pool = mem.pod_pool(uid)
                for resource, size in mem_req.items():
                    check_slice(pool.get(resource, 0), size, live_shared, resource)
            adopt_pod_slice(cpu, uid, name, cpus)
        except (AdmissionError, ValueError) as err:
            raise AdoptionError(f"container {name}: {err}") from err
        if mem.pod_blocks(uid) is not None and mem_req:
            mem.take_from_pod(uid, name, mem_req)
        record.shared.discard(name)
        engine._pin_shared_to_pod_pool(record)
        return engine._assignment_of(uid, name)
    try:
        adopt_container_cpus(cpu, uid, name, cpus)
    except ValueError as err:
        raise AdoptionError(f"container {name}: {err}") from err
    nodes = [n for n in mems if n in engine.topology.numa_nodes]
    hint = TopologyHint(mask_of(nodes) if nodes else numa_mask(engine, cpus), True)
    try:
        mem.allocate(spec, container, hint)
    except AdmissionError as err:
        cpu.remove_container(uid, name)
        raise AdoptionError(f"container {name}: memory: {err.message}") from err
    if tm.policy != POLICY_NONE:
        tm.set_affinity(uid, name, hint)
    return engine._assignment_of(uid, name)


def place_in_node_pool(engine: Engine, pod: PodSpec, name: str) -> ContainerAssignment:
    """Record a running container that cannot get its allocation in the node shared pool (it
    then follows every change of that pool); the pod is recorded without resources when the
    engine does not know it."""
    uid = pod.uid
    record = engine._pods.get(uid)
    if record is None:
        bare = PodSpec(uid=uid, namespace=pod.namespace, name=pod.name)
        record = AdmittedPod(spec=bare, mode=MODE_CLASSIC)
        engine._pods[uid] = record
    if record.mode != MODE_WHOLE and all(c.name != name for c in record.containers):
        record.containers.append(ContainerSpec(name))
    engine._node_shared.add((uid, name))
    return engine._assignment_of(uid, name)


# The CPU manager's side of adoption: its state recorded as given instead of chosen. Kept here,
# beside the rules that decide when to use them, rather than in the (size-limited) policy module.


def adopt_container_cpus(cpu: CPUManager, pod_uid: str, name: str, cpus: CPUSet) -> None:
    """Record ``cpus`` as a node-pool container entry as they are; raises ValueError (nothing
    changed) unless they are all free (in the node shared pool and not reserved)."""
    taken = cpus - cpu.available_cpus()
    if taken or not cpus:
        raise ValueError(f"cpus {taken or cpus} are not free for an exclusive allocation")
    cpu._entries.setdefault(pod_uid, {})[name] = cpus
    cpu._default = cpu._default - cpus


def adopt_pod_bubble(
    cpu: CPUManager, pod_uid: str, claimed: CPUSet, total: int, affinity: int | None, avoid: CPUSet
) -> CPUSet:
    """Record a pod entry of ``total`` CPUs that keeps ``claimed`` (free CPUs its running
    containers hold); the rest is allocated as ``allocateCPUs`` would, preferring CPUs outside
    ``avoid``. Raises ValueError (nothing changed) when that is impossible."""
    taken = claimed - cpu.available_cpus()
    if taken or len(claimed) > total:
        raise ValueError(f"pod cpus {claimed}: {taken or 'more than'} the budget of {total}")
    saved = cpu._default
    extra = EMPTY
    for excluded in (claimed | avoid, claimed):
        cpu._default = saved - excluded
        try:
            extra = cpu.allocate_cpus(total - len(claimed), affinity)
            break
        except CPUAllocationError as err:
            cpu._default = saved
            if excluded == claimed:
                raise ValueError(f"pod budget of {total} cpus: {err}") from err
    bubble = claimed | extra
    cpu._default = saved - bubble
    cpu._pod_entries[pod_uid] = bubble
    return bubble


def adopt_pod_slice(cpu: CPUManager, pod_uid: str, name: str, cpus: CPUSet) -> None:
    """Record ``cpus`` as an exclusive slice of the pod's budget as they are; raises ValueError
    (nothing changed) unless they are all in the pod shared pool."""
    pool = cpu.pod_shared_pool(pod_uid)
    if not cpus or not cpus <= pool:
        raise ValueError(f"cpus {cpus - pool or cpus} are not free in the pod's budget {pool}")
    cpu._entries.setdefault(pod_uid, {})[name] = cpus
    cpu._pool_consumers.setdefault(pod_uid, set()).add(name)
