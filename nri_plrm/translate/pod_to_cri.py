"""The kubelet's and containerd's translation of a pod spec into what an NRI plugin receives.

The kubelet turns a pod into CRI requests (``kuberuntime_sandbox_linux.go``
``calculateSandboxResources``, ``kuberuntime_container_linux.go``
``generateLinuxContainerResources``); containerd turns those into the OCI spec and the NRI
``PodSandbox``/``Container`` messages. This module does both steps, so tests and ``simulate``
feed the plugin exactly what a real node would:

- Sandbox (``LinuxPodSandboxConfig.resources`` -> ``PodSandbox.linux.pod_resources``): from
  ``PodRequests``/``PodLimits`` without overhead: the pod-level values when the pod sets them,
  the containers' aggregate otherwise. ``shares = MilliCPUToShares(request)`` (of the limit when
  there is no request), ``quota = milliCPUToQuota(limit, period)``, memory limit.
- Container (``LinuxContainerResources`` -> ``Container.linux.resources`` via the OCI spec):
  the same formulas on the container's values, except that with pod-level resources a
  container without a cpu or memory limit inherits the pod's (``getCPULimit`` /
  ``getMemoryLimit``); a hugepage limit for every page size of the machine (0 where not
  requested, the pod-level hugepage limit for pod-level pods). containerd writes only non-zero
  cpu period, quota and shares to the OCI spec, and sets swap = memory limit (hosts with the
  swap controller, as in the recorded traffic).
- Identity: cgroup parent ``/kubepods[/burstable|/besteffort]/pod<uid>`` (cgroupfs driver),
  the ``io.kubernetes.*`` labels and containerd's ``io.kubernetes.cri.*`` annotations, and
  deterministic sandbox and container ids (hashes of the pod uid and container name).
- Creation order: init containers (regular and sidecars) in spec order, then app containers.

The values match the CRI requests recorded in ``testdata/nri-capture/seed-pods/cri/``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nri_plrm.base.quantity import memory_bytes
from nri_plrm.engine.spec import (
    CPU,
    HUGEPAGES_PREFIX,
    MEMORY,
    ContainerAssignment,
    ContainerSpec,
    PodSpec,
)
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.manifest_to_pod import aggregate_requests

DEFAULT_CPU_PERIOD = 100_000
"""The kubelet's ``quotaPeriod`` in microseconds."""
MIN_SHARES = 2
"""The kubelet's ``MinShares``: what a container without a CPU request gets."""
MAX_SHARES = 262_144
SHARES_PER_CPU = 1024
"""The kubelet's ``SharesPerCPU``: ``shares = millicores * 1024 / 1000``."""
MIN_QUOTA_PERIOD = 1_000

QOS_GUARANTEED = "Guaranteed"
QOS_BURSTABLE = "Burstable"
QOS_BEST_EFFORT = "BestEffort"


@dataclass(frozen=True)
class CRIResources:
    """The fields of a CRI ``LinuxContainerResources`` the kubelet fills for CPU and memory."""

    cpu_period: int
    cpu_quota: int
    cpu_shares: int
    memory_limit_in_bytes: int
    hugepage_limits: tuple[tuple[str, int], ...] = field(default=())
    """(page size as ``2MB``/``1GB``, limit in bytes) in the machine's page-size order."""

    def to_cri_json(self) -> dict[str, Any]:
        """The protobuf-JSON form (zero fields left out), as in the recorded CRI requests."""
        out: dict[str, Any] = {}
        for key in ("cpu_period", "cpu_quota", "cpu_shares", "memory_limit_in_bytes"):
            value = getattr(self, key)
            if value:
                out[key] = value
        if self.hugepage_limits:
            out["hugepage_limits"] = [
                {"page_size": size, "limit": limit} if limit else {"page_size": size}
                for size, limit in self.hugepage_limits
            ]
        return out


def milli_cpu_to_shares(millis: int) -> int:
    """The kubelet's ``MilliCPUToShares``: 1024 per CPU, clamped to [2, 262144]."""
    if millis == 0:
        return MIN_SHARES
    return min(MAX_SHARES, max(MIN_SHARES, millis * SHARES_PER_CPU // 1000))


def milli_cpu_to_quota(millis: int, period: int = DEFAULT_CPU_PERIOD) -> int:
    """The kubelet's ``milliCPUToQuota``: 0 for no limit, else at least 1000 microseconds."""
    if millis == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, millis * period // 1000)


def page_size_name(resource: str) -> str:
    """``hugepages-2Mi`` -> ``2MB``, ``hugepages-1Gi`` -> ``1GB`` (libcontainer's size names)."""
    size = memory_bytes(resource[len(HUGEPAGES_PREFIX) :])
    units = ("B", "KB", "MB", "GB", "TB", "PB")
    value = float(size)
    i = 0
    while value >= 1024 and i < len(units) - 1:
        value /= 1024
        i += 1
    return f"{value:g}{units[i]}"


def machine_page_sizes(resources: Iterable[str]) -> tuple[str, ...]:
    """The hugepage resources of a machine in the order the kubelet lists them (by the sysfs
    directory name ``hugepages-<kB>kB``, as ``HugePageSizes`` reads them)."""
    pages = [r for r in resources if r.startswith(HUGEPAGES_PREFIX)]
    return tuple(
        sorted(
            pages, key=lambda r: f"hugepages-{memory_bytes(r[len(HUGEPAGES_PREFIX) :]) // 1024}kB"
        )
    )


def pod_requests(pod: PodSpec) -> dict[str, int]:
    """The kubelet's ``PodRequests`` without overhead: pod-level values override the aggregate."""
    out = aggregate_requests(pod.init_containers, pod.containers)
    if pod.has_pod_level_resources:
        out.update(pod.requests or {})
    return out


def pod_limits(pod: PodSpec) -> dict[str, int]:
    """The kubelet's ``PodLimits`` without overhead: pod-level values override the aggregate."""
    out = aggregate_requests(pod.init_containers, pod.containers, limits=True)
    if pod.has_pod_level_resources:
        out.update(pod.limits or {})
    return out


def qos_class(pod: PodSpec) -> str:
    """The pod's QoS class (from pod-level resources alone when the pod sets them)."""
    if pod.has_pod_level_resources:
        groups: Sequence[tuple[Mapping[str, int], Mapping[str, int]]] = [
            (pod.requests or {}, pod.limits or {})
        ]
    else:
        groups = [(c.requests, c.limits) for c in pod.all_containers()]
    any_set = False
    guaranteed = True
    for requests, limits in groups:
        for rname in (CPU, MEMORY):
            req, lim = requests.get(rname, 0), limits.get(rname, 0)
            any_set = any_set or bool(req or lim)
            if not lim or req != lim:
                guaranteed = False
    if not any_set:
        return QOS_BEST_EFFORT
    return QOS_GUARANTEED if guaranteed else QOS_BURSTABLE


def cgroup_parent(pod: PodSpec) -> str:
    """The pod cgroup the kubelet asks for with the cgroupfs driver."""
    qos = qos_class(pod)
    if qos == QOS_GUARANTEED:
        return f"/kubepods/pod{pod.uid}"
    return f"/kubepods/{qos.lower()}/pod{pod.uid}"


def _linux_resources(
    cpu_request: int | None, cpu_limit: int, memory_limit: int, period: int
) -> tuple[int, int, int]:
    if cpu_request is None and cpu_limit:
        shares = milli_cpu_to_shares(cpu_limit)
    else:
        shares = milli_cpu_to_shares(cpu_request or 0)
    return shares, milli_cpu_to_quota(cpu_limit, period), memory_limit


def sandbox_resources(pod: PodSpec, *, period: int = DEFAULT_CPU_PERIOD) -> CRIResources:
    """``LinuxPodSandboxConfig.resources`` as the kubelet fills it for every pod."""
    requests = pod_requests(pod)
    limits = pod_limits(pod)
    shares, quota, memory = _linux_resources(
        requests.get(CPU), limits.get(CPU, 0), limits.get(MEMORY, 0), period
    )
    return CRIResources(period, quota, shares, memory)


def container_resources(
    pod: PodSpec,
    container: ContainerSpec,
    *,
    page_sizes: Sequence[str] = (),
    period: int = DEFAULT_CPU_PERIOD,
) -> CRIResources:
    """The container's ``LinuxContainerResources`` (``page_sizes``: the machine's hugepage
    resources in the kubelet's order, see :func:`machine_page_sizes`)."""
    pod_level = pod.has_pod_level_resources
    pod_lim = pod.limits or {}
    cpu_limit = container.limits.get(CPU, 0)
    memory_limit = container.limits.get(MEMORY, 0)
    if pod_level and not cpu_limit:
        cpu_limit = pod_lim.get(CPU, 0)
    if pod_level and not memory_limit:
        memory_limit = pod_lim.get(MEMORY, 0)
    shares, quota, memory = _linux_resources(
        container.requests.get(CPU), cpu_limit, memory_limit, period
    )
    wanted: dict[str, int] = {}
    if pod_level:
        wanted.update({k: v for k, v in pod_lim.items() if k.startswith(HUGEPAGES_PREFIX)})
    wanted.update({k: v for k, v in container.limits.items() if k.startswith(HUGEPAGES_PREFIX)})
    hugepages = tuple((page_size_name(r), wanted.get(r, 0)) for r in page_sizes)
    return CRIResources(period, quota, shares, memory, hugepages)


def creation_order(pod: PodSpec) -> tuple[ContainerSpec, ...]:
    """The order the kubelet creates containers in: init containers, then app containers."""
    return pod.init_containers + pod.containers


def sandbox_id(pod: PodSpec, attempt: int = 0) -> str:
    """A deterministic 64-hex sandbox id for the pod (real ones are random)."""
    return hashlib.sha256(f"sandbox/{pod.uid}/{attempt}".encode()).hexdigest()


def container_id(pod: PodSpec, name: str, attempt: int = 0) -> str:
    """A deterministic 64-hex container id for a container of the pod."""
    return hashlib.sha256(f"container/{pod.uid}/{name}/{attempt}".encode()).hexdigest()


def _pod_labels(pod: PodSpec) -> dict[str, str]:
    return {
        "io.kubernetes.pod.name": pod.name,
        "io.kubernetes.pod.namespace": pod.namespace,
        "io.kubernetes.pod.uid": pod.uid,
    }


def nri_pod_sandbox(pod: PodSpec, *, attempt: int = 0) -> api.PodSandbox:
    """The ``PodSandbox`` containerd sends for the pod's ``RunPodSandbox``."""
    sid = sandbox_id(pod, attempt)
    res = sandbox_resources(pod)
    parent = cgroup_parent(pod)
    msg = api.PodSandbox(id=sid, name=pod.name, uid=pod.uid, namespace=pod.namespace)
    msg.labels.update(_pod_labels(pod))
    msg.labels["io.cri-containerd.kind"] = "sandbox"
    msg.annotations.update(
        {
            "io.kubernetes.cri.container-type": "sandbox",
            "io.kubernetes.cri.sandbox-id": sid,
            "io.kubernetes.cri.sandbox-name": pod.name,
            "io.kubernetes.cri.sandbox-namespace": pod.namespace,
            "io.kubernetes.cri.sandbox-uid": pod.uid,
            "io.kubernetes.cri.sandbox-log-directory": (
                f"/var/log/pods/{pod.namespace}_{pod.name}_{pod.uid}"
            ),
        }
    )
    for key, value in (
        ("cpu-period", res.cpu_period),
        ("cpu-quota", res.cpu_quota),
        ("cpu-shares", res.cpu_shares),
        ("memory", res.memory_limit_in_bytes),
    ):
        if value:
            msg.annotations[f"io.kubernetes.cri.sandbox-{key}"] = str(value)
    linux = msg.linux
    pod_res = linux.pod_resources
    pod_res.cpu.shares.value = res.cpu_shares
    pod_res.cpu.quota.value = res.cpu_quota
    pod_res.cpu.period.value = res.cpu_period
    pod_res.memory.limit.value = res.memory_limit_in_bytes
    linux.cgroup_parent = parent
    linux.cgroups_path = f"{parent}/{sid}"
    return msg


def nri_container(
    pod: PodSpec,
    container: ContainerSpec,
    *,
    page_sizes: Sequence[str] = (),
    attempt: int = 0,
    state: api.ContainerState = api.CONTAINER_UNKNOWN,
    created_at: int = 0,
) -> api.Container:
    """The ``Container`` containerd sends for the container's ``CreateContainer``."""
    sid = sandbox_id(pod)
    cid = container_id(pod, container.name, attempt)
    res = container_resources(pod, container, page_sizes=page_sizes)
    msg = api.Container(
        id=cid, pod_sandbox_id=sid, name=container.name, state=state, created_at=created_at
    )
    msg.labels.update(_pod_labels(pod))
    msg.labels["io.kubernetes.container.name"] = container.name
    msg.labels["io.cri-containerd.kind"] = "container"
    msg.annotations.update(
        {
            "io.kubernetes.container.restartCount": str(attempt),
            "io.kubernetes.cri.container-name": container.name,
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-id": sid,
            "io.kubernetes.cri.sandbox-name": pod.name,
            "io.kubernetes.cri.sandbox-namespace": pod.namespace,
            "io.kubernetes.cri.sandbox-uid": pod.uid,
        }
    )
    lres = msg.linux.resources
    if res.memory_limit_in_bytes:
        lres.memory.limit.value = res.memory_limit_in_bytes
        lres.memory.swap.value = res.memory_limit_in_bytes
    if res.cpu_shares:
        lres.cpu.shares.value = res.cpu_shares
    if res.cpu_quota:
        lres.cpu.quota.value = res.cpu_quota
    if res.cpu_period:
        lres.cpu.period.value = res.cpu_period
    for size, limit in res.hugepage_limits:
        lres.hugepage_limits.append(api.HugepageLimit(page_size=size, limit=limit))
    lres.devices.append(api.LinuxDeviceCgroup(allow=False, access="rwm"))
    msg.linux.cgroups_path = f"{cgroup_parent(pod)}/{cid}"
    return msg


def fill_assignment(res: api.LinuxResources, assignment: ContainerAssignment) -> None:
    """Write a decided assignment into NRI resources: cpuset, mems when pinned, and quota -1
    (no CFS limit) for exclusive CPUs."""
    res.cpu.cpus = str(assignment.cpus)
    if assignment.mems:
        res.cpu.mems = str(assignment.mems)
    if assignment.exclusive:
        res.cpu.quota.value = -1


def assignment_update(container_id: str, assignment: ContainerAssignment) -> api.ContainerUpdate:
    """The ``ContainerUpdate`` that moves a container to ``assignment``."""
    update = api.ContainerUpdate(container_id=container_id)
    fill_assignment(update.linux.resources, assignment)
    return update


def assignment_updates(
    targets: Iterable[tuple[str, ContainerAssignment]],
) -> list[api.ContainerUpdate]:
    """``ContainerUpdate`` messages for (container id, assignment) pairs. Each assignment
    object is encoded once and copied (every container on a pool that moved shares one): a
    copy costs half of building the message again."""
    templates: dict[int, tuple[ContainerAssignment, api.ContainerUpdate]] = {}
    updates = []
    for container_id, assignment in targets:
        known = templates.get(id(assignment))
        if known is None:
            known = templates[id(assignment)] = (assignment, assignment_update("", assignment))
        update = api.ContainerUpdate()
        update.CopyFrom(known[1])
        update.container_id = container_id
        updates.append(update)
    return updates
