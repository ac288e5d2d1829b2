"""Containers no hint provider can give anything: the fast path of a classic placement."""

from __future__ import annotations

from nri_plrm.engine.admitted import AdmittedPod
from nri_plrm.engine.device_manager import container_devices
from nri_plrm.engine.spec import ContainerSpec, PodSpec
from nri_plrm.engine.topology_manager import POLICY_NONE, TopologyManager


def holds_nothing(pod: PodSpec, container: ContainerSpec) -> bool:
    """True when the container of a classic pod can hold nothing, whatever the pod's other
    containers: the pod sets no pod-level resources and the container no limits (so the pod is
    not Guaranteed: the CPU and Memory Managers give no hints and allocate nothing), and it has
    no devices (no device hints). Every provider then has no preference and allocates nothing.
    """
    return (
        pod.requests is None
        and pod.limits is None
        and not container.limits
        and not container_devices(pod, container)
    )


def placed_holding_nothing(
    tm: TopologyManager, record: AdmittedPod, container: ContainerSpec, providers: int
) -> bool:
    """The container path of a classic pod (``Engine.add_container``) for a container that
    :func:`holds_nothing`, without asking the ``providers`` hint providers: only its hint is
    stored, the pod's (pod scope) or the merge of no preferences, as the full path would store.
    False (nothing done) for any other container."""
    pod = record.spec
    if not holds_nothing(pod, container):
        return False
    if tm.policy != POLICY_NONE:
        hint = record.hint
        if hint is None:
            hint = tm.no_preference_hint(pod, providers)
        tm.set_affinity(pod.uid, container.name, hint)
    return True
