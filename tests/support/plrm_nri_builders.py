"""Build NRI ``PodSandbox``/``Container`` messages from ``PodSpec`` the way the kubelet and
containerd fill them (kubelet ``calculateSandboxResources`` / ``generateLinuxContainerResources``).

A small stand-in for the plugin tests; ``nri_plrm.kubelet_translation`` is the product version.
"""

from __future__ import annotations

from collections.abc import Mapping

from nri_plrm.engine.types import (
    CPU,
    HUGEPAGES_PREFIX,
    MEMORY,
    ContainerKind,
    ContainerSpec,
    PodSpec,
)
from nri_plrm.proto import nri_api_pb2 as api

PERIOD = 100_000


def shares(millis: int) -> int:
    """The kubelet's ``MilliCPUToShares``."""
    if millis == 0:
        return 2
    return max(2, millis * 1024 // 1000)


def quota(millis: int, period: int = PERIOD) -> int:
    """The kubelet's ``milliCPUToQuota``."""
    if millis == 0:
        return 0
    return max(1000, millis * period // 1000)


def page_size(resource: str) -> str:
    """``hugepages-2Mi`` -> ``2MB`` (``HugePageUnitSizeFromByteSize``)."""
    size = resource[len(HUGEPAGES_PREFIX) :]
    return size[:-1] + "B" if size.endswith("i") else size + "B"


def linux_resources(
    cpu_request: int, cpu_limit: int, memory_limit: int, hugepages: Mapping[str, int]
) -> api.LinuxResources:
    """CRI/NRI resources with every wrapper set, as containerd's ``fromCRILinuxResources``."""
    res = api.LinuxResources(
        cpu=api.LinuxCPU(
            shares=api.OptionalUInt64(value=shares(cpu_request or cpu_limit)),
            quota=api.OptionalInt64(value=quota(cpu_limit)),
            period=api.OptionalUInt64(value=PERIOD),
        ),
        memory=api.LinuxMemory(limit=api.OptionalInt64(value=memory_limit)),
    )
    for name, size in sorted(hugepages.items()):
        res.hugepage_limits.append(api.HugepageLimit(page_size=page_size(name), limit=size))
    return res


def _hugepages(values: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in values.items() if k.startswith(HUGEPAGES_PREFIX)}


def pod_aggregate(pod: PodSpec) -> tuple[dict[str, int], dict[str, int]]:
    """The kubelet's ``PodRequests``/``PodLimits`` for a pod without pod-level resources."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    for target, field in ((requests, "requests"), (limits, "limits")):
        running: dict[str, int] = {}
        for c in pod.init_containers + pod.containers:
            if c.kind is ContainerKind.INIT:
                for k, v in getattr(c, field).items():
                    target[k] = max(target.get(k, 0), v + running.get(k, 0))
                continue
            for k, v in getattr(c, field).items():
                running[k] = running.get(k, 0) + v
        for k, v in running.items():
            target[k] = max(target.get(k, 0), v)
    return requests, limits


def sandbox(pod: PodSpec, sandbox_id: str | None = None) -> api.PodSandbox:
    """The ``PodSandbox`` containerd sends for this pod."""
    if pod.has_pod_level_resources:
        requests, limits = dict(pod.requests or {}), dict(pod.limits or {})
    else:
        requests, limits = pod_aggregate(pod)
    msg = api.PodSandbox(
        id=sandbox_id or f"sandbox-{pod.uid}",
        name=pod.name,
        uid=pod.uid,
        namespace=pod.namespace,
    )
    msg.linux.cgroup_parent = f"/kubepods/pod{pod.uid}"
    msg.linux.pod_resources.CopyFrom(
        linux_resources(
            requests.get(CPU, 0), limits.get(CPU, 0), limits.get(MEMORY, 0), _hugepages(limits)
        )
    )
    return msg


def container(
    pod: PodSpec,
    spec: ContainerSpec,
    container_id: str | None = None,
    sandbox_id: str | None = None,
) -> api.Container:
    """The ``Container`` containerd sends, with the kubelet's pod-limit inheritance."""
    request = spec.requests.get(CPU, 0)
    limit = spec.limits.get(CPU, 0)
    memory = spec.limits.get(MEMORY, 0)
    if pod.has_pod_level_resources:
        pod_limits = pod.limits or {}
        limit = limit or pod_limits.get(CPU, 0)
        memory = memory or pod_limits.get(MEMORY, 0)
    msg = api.Container(
        id=container_id or f"{pod.uid}-{spec.name}",
        pod_sandbox_id=sandbox_id or f"sandbox-{pod.uid}",
        name=spec.name,
        state=api.CONTAINER_CREATED,
    )
    msg.linux.resources.CopyFrom(linux_resources(request, limit, memory, _hugepages(spec.limits)))
    return msg


def creation_order(pod: PodSpec) -> list[ContainerSpec]:
    """Init containers and sidecars in spec order, then app containers."""
    return list(pod.init_containers) + list(pod.containers)
