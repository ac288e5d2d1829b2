"""Adopting allocations that already run, instead of choosing them (reconciliation): the rules.

After a restart without usable state, Synchronize reports every running container with the
cpuset and mems it runs on. The engine's ``adopt_sandbox``, ``adopt_container`` and
``place_in_node_pool`` (:class:`~nri_plrm.engine.facade.Engine`) record such an allocation as it is,
after checking that the engine could hold it now: exclusive CPUs free (not reserved, not held
by anyone else: the CPU manager's ``adopt_*`` methods), as many as the request, a pod-level
pod's slices passing the pod budget's check (:class:`~nri_plrm.engine.pod_budget.PodBudget`),
memory charged on the NUMA nodes the container runs on. Each raises :class:`AdoptionError`
(nothing changed) naming why not; the caller then places the container through the ordinary
decision path, or in the node shared pool (``place_in_node_pool``) so it is never left on
every CPU.

Adoption is a pure function of the engine's state and its arguments, deterministic, so a
journal record of its inputs replays to the same state. Whole-pod (``admit_pod``) records are
not adopted. This module holds the error and the questions the engine and the reconciliation
both ask before adopting.
"""

from __future__ import annotations

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.engine.bitmask import mask_of
from nri_plrm.engine.cpu_manager import CPUManager
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.topology.model import Topology


class AdoptionError(ValueError):
    """A running allocation the engine cannot hold as it is (the message says why)."""


def numa_mask(topology: Topology, cpus: CPUSet) -> int:
    """The NUMA nodes (as a mask) of ``cpus`` on ``topology``."""
    info = topology.cpu_info
    return mask_of({info[c].numa for c in cpus if c in info})


def exclusive_request(cpu: CPUManager, pod: PodSpec, container: ContainerSpec) -> int:
    """Exclusive CPUs ``container`` is entitled to as a container of ``pod`` (0 = shared)."""
    spec = PodSpec(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        containers=(container,),
        requests=pod.requests,
        limits=pod.limits,
    )
    return cpu.guaranteed_cpus(spec, container)


def has_budget(cpu: CPUManager, pod: PodSpec, *, pod_scope: bool) -> bool:
    """True when admitting ``pod`` reserves a CPU budget (a pod-level pod, ``pod_scope``: the
    Topology Manager aligns whole pods)."""
    bare = bare_pod(pod)
    return pod_scope and bare.has_pod_level_resources and cpu.pod_guaranteed_cpus(bare) > 0


def bare_pod(pod: PodSpec) -> PodSpec:
    """``pod`` as an adopted pod is admitted: identity and pod-level resources only."""
    return PodSpec(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        requests=pod.requests,
        limits=pod.limits,
    )
