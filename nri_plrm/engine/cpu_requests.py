"""Who gets exclusive CPUs: pod QoS, container eligibility and the CPU counts the kubelet derives.

Pure functions over :class:`PodSpec` / :class:`ContainerSpec` (cpu in millicores, memory in
bytes). Requests are read the way the API server stores them: an unset request defaults to the
limit of the same resource (for containers and for pod-level resources alike).

``plrm`` is the ``PodLevelResourceManagers`` feature gate; ``PodLevelResources`` is taken as on
(it is required by the feature and on by default in the kubelet releases this project follows).
"""

from __future__ import annotations

from nri_plrm.engine.spec import CPU, MEMORY, ContainerSpec, PodSpec, ResourceList

QOS_GUARANTEED = "Guaranteed"
QOS_BURSTABLE = "Burstable"
QOS_BEST_EFFORT = "BestEffort"

_QOS_RESOURCES = (CPU, MEMORY)


def effective_requests(
    requests: ResourceList | None, limits: ResourceList | None
) -> dict[str, int]:
    """Requests after API defaulting: a resource with a limit but no request requests its limit."""
    out = dict(limits or {})
    out.update(requests or {})
    return out


def pod_qos(pod: PodSpec) -> str:
    """The kubelet's ``GetPodQOS``: pod-level resources decide alone when the pod sets them.

    Remembered on the (immutable) spec: one admission asks it of the same spec many times."""
    known: str | None = pod.__dict__.get(_QOS_MEMO)
    if known is None:
        known = pod.__dict__[_QOS_MEMO] = _pod_qos(pod)
    return known


_QOS_MEMO = "_qos"


def _pod_qos(pod: PodSpec) -> str:
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    if pod.requests is not None or pod.limits is not None:
        pod_requests = effective_requests(pod.requests, pod.limits)
        for name in _QOS_RESOURCES:
            if pod_requests.get(name, 0) > 0:
                requests[name] = pod_requests[name]
            if (pod.limits or {}).get(name, 0) > 0:
                limits[name] = (pod.limits or {})[name]
        if not all(name in limits for name in _QOS_RESOURCES):
            guaranteed = False
    else:
        for container in pod.all_containers():
            c_requests = effective_requests(container.requests, container.limits)
            found: set[str] = set()
            for name in _QOS_RESOURCES:
                if c_requests.get(name, 0) > 0:
                    requests[name] = requests.get(name, 0) + c_requests[name]
                limit = container.limits.get(name, 0)
                if limit > 0:
                    found.add(name)
                    limits[name] = limits.get(name, 0) + limit
            if not all(name in found for name in _QOS_RESOURCES):
                guaranteed = False
    if not requests and not limits:
        return QOS_BEST_EFFORT
    if guaranteed and any(limits.get(name) != value for name, value in requests.items()):
        guaranteed = False
    if guaranteed and len(requests) == len(limits):
        return QOS_GUARANTEED
    return QOS_BURSTABLE


def is_container_equivalent_guaranteed(container: ContainerSpec) -> bool:
    """``IsContainerEquivalentQOSGuaranteed``: cpu and memory requests non-zero and equal limits."""
    requests = effective_requests(container.requests, container.limits)
    for name in _QOS_RESOURCES:
        value = requests.get(name, 0)
        if value == 0 or container.limits.get(name) != value:
            return False
    return True


def is_integral_cpu(millis: int) -> bool:
    """True when a cpu quantity (millicores) is a whole number of CPUs."""
    return millis % 1000 == 0


def qualifies_for_exclusive_cpus(container: ContainerSpec) -> bool:
    """``resourcesQualifyForExclusiveCPUs``: equivalent-Guaranteed with an integral cpu limit."""
    return is_container_equivalent_guaranteed(container) and is_integral_cpu(
        container.limits.get(CPU, 0)
    )


def guaranteed_cpus(pod: PodSpec, container: ContainerSpec, *, plrm: bool = True) -> int:
    """The kubelet's ``guaranteedCPUs``: exclusive CPUs this container gets (0 = shared)."""
    if pod_qos(pod) != QOS_GUARANTEED:
        return 0
    if plrm and pod.has_pod_level_resources and not is_container_equivalent_guaranteed(container):
        return 0
    millis = effective_requests(container.requests, container.limits).get(CPU, 0)
    if not is_integral_cpu(millis):
        return 0
    return millis // 1000


def pod_guaranteed_cpus(pod: PodSpec, *, plrm: bool = True) -> int:
    """The kubelet's ``podGuaranteedCPUs``: the pod budget, or the classic aggregate."""
    if plrm and pod.has_pod_level_resources:
        if pod_qos(pod) != QOS_GUARANTEED:
            return 0
        millis = effective_requests(pod.requests, pod.limits).get(CPU)
        if millis is None or not is_integral_cpu(millis):
            return 0
        return millis // 1000
    by_init = 0
    by_sidecars = 0
    for container in pod.init_containers:
        if CPU not in effective_requests(container.requests, container.limits):
            continue
        cpus = guaranteed_cpus(pod, container, plrm=plrm)
        if container.restartable:
            by_sidecars += cpus
        elif by_sidecars + cpus > by_init:
            by_init = by_sidecars + cpus
    by_apps = 0
    for container in pod.containers:
        if CPU not in effective_requests(container.requests, container.limits):
            continue
        by_apps += guaranteed_cpus(pod, container, plrm=plrm)
    return max(by_init, by_apps + by_sidecars)


def validate_pod_scope_resources(pod: PodSpec, *, plrm: bool = True) -> str | None:
    """The kubelet's CPU ``validatePodScopeResources``: its exact message, or None when valid."""
    total = pod_guaranteed_cpus(pod, plrm=plrm)
    shared_long_running = False
    long_running_exclusive = 0
    for container in pod.init_containers:
        cpus = guaranteed_cpus(pod, container, plrm=plrm)
        if not container.restartable:
            if cpus > 0:
                pool = total - long_running_exclusive
                if cpus > pool:
                    return (
                        f"pod rejected, largest exclusive init container requests {cpus} cpus, "
                        f"but only {pool} available"
                    )
            elif long_running_exclusive >= total:
                return "pod rejected, pod has shared init containers but no cpus available for them"
            continue
        if cpus == 0:
            shared_long_running = True
            continue
        long_running_exclusive += cpus
    for container in pod.containers:
        cpus = guaranteed_cpus(pod, container, plrm=plrm)
        if cpus == 0:
            shared_long_running = True
            continue
        long_running_exclusive += cpus
    if shared_long_running and long_running_exclusive >= total:
        return (
            "pod rejected, sum of exclusive container cpu requests equals pod budget, "
            "leaving no cpus for shared containers"
        )
    return None
