"""The restart invariants of issue 4, checked against the runtime's view and the engine."""

from __future__ import annotations

from plrm_runtime import FakeRuntime

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AssignmentType
from nri_plrm.proto import nri_api_pb2 as api

EXCLUSIVE = (AssignmentType.NODE_EXCLUSIVE, AssignmentType.POD_EXCLUSIVE)


def exclusive_cpus(runtime: FakeRuntime) -> dict[str, CPUSet]:
    """Container id -> applied cpuset, for live containers pinned with quota -1."""
    return {
        cid: rc.cpus
        for cid, rc in runtime.containers.items()
        if rc.applied.quota == -1 and rc.applied.cpus and rc.msg.state != api.CONTAINER_STOPPED
    }


def check(
    engine: Engine,
    runtime: FakeRuntime,
    pod_uids: set[str],
    before: dict[str, CPUSet] | None = None,
) -> list[str]:
    """Every violation found (empty when the node is consistent).

    - the engine's own invariants (``verify``);
    - no CPU in two exclusive sets;
    - every running container's applied cpuset equals its decision;
    - containers pinned exclusively before (``before``) still have the same CPUs;
    - the engine holds nothing for pods the runtime no longer has;
    - the node shared pool equals a fresh computation: all CPUs minus pod budgets and exclusive
      slices of live pods.
    """
    problems = list(engine.verify())
    seen: dict[int, str] = {}
    for cid, cpus in exclusive_cpus(runtime).items():
        for cpu in cpus:
            if cpu in seen:
                problems.append(f"cpu {cpu} exclusive to both {seen[cpu]} and {cid}")
            seen[cpu] = cid
    for cid, rc in runtime.containers.items():
        if rc.msg.state == api.CONTAINER_STOPPED:
            continue  # exited: not reported by Synchronize, released on reconnect
        uid = rc.msg.labels.get("io.kubernetes.pod.uid", "")
        want = engine.assignment(uid, rc.msg.name)
        if want is None:
            problems.append(f"container {cid} ({rc.msg.name}) unknown to the engine")
            continue
        if rc.cpus != want.cpus:
            problems.append(f"container {cid}: applied {rc.cpus}, decided {want.cpus}")
    for cid, cpus in (before or {}).items():
        rc = runtime.containers.get(cid)
        if rc is not None and rc.cpus != cpus:
            problems.append(f"container {cid}: exclusive cpus moved {cpus} -> {rc.cpus}")
    orphans = set(engine.pods()) - pod_uids
    if orphans:
        problems.append(f"engine holds pods the runtime does not have: {sorted(orphans)}")
    held = CPUSet()
    for (uid, _name), a in engine.assignments().items():
        if a.assignment in EXCLUSIVE and uid in pod_uids:
            held |= a.cpus
    for uid in pod_uids:
        held |= engine.pod_cpus(uid) or CPUSet()
    fresh = engine.topology.all_cpus - held
    cm = engine.cpu_manager
    if cm.options.strict_cpu_reservation:
        fresh -= cm.reserved_cpus
    if engine.node_shared_pool() != fresh:
        problems.append(f"node shared pool {engine.node_shared_pool()} != fresh {fresh}")
    return problems
