"""What a pod and its containers ask for, inferred from the resources containerd forwards over NRI.

The kubelet translates pod specs into CRI resources (shares, CFS quota and period, memory limit,
hugepage limits); containerd forwards them as ``PodSandbox.linux.pod_resources`` (the pod budget)
and ``Container.linux.resources``. This module inverts that translation into the engine's
``PodSpec``/``ContainerSpec``. The inferences and their edge cases are in ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_plrm.engine.spec import (
    CPU,
    HUGEPAGES_PREFIX,
    MEMORY,
    ContainerSpec,
    PodSpec,
)
from nri_plrm.engine.spec_json import spec_from_dict, spec_to_dict
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.pod_to_cri import (
    DEFAULT_CPU_PERIOD,
    MIN_SHARES,
    SHARES_PER_CPU,
    sandbox_resources,
)

_PAGE_SIZE = re.compile(r"^([0-9]+)([KMGTP]?)B$")

log = logging.getLogger(__name__)


class IntentError(ValueError):
    """NRI resources that no kubelet would have produced (e.g. a malformed hugepage size)."""


class QOSClass(enum.Enum):
    """The Kubernetes QoS class as far as the forwarded resources show it."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


def hugepage_resource(page_size: str) -> str:
    """The resource name for a CRI hugepage size (``"2MB"`` -> ``"hugepages-2Mi"``).

    The kubelet writes page sizes with ``HugePageUnitSizeFromByteSize`` (binary units spelled
    ``KB``/``MB``/``GB``); anything else is an ``IntentError``.
    """
    match = _PAGE_SIZE.match(page_size)
    if not match or int(match.group(1)) == 0:
        raise IntentError(
            f"hugepage limit page_size {page_size!r}: expected a positive size such as 2MB or 1GB"
        )
    number, unit = match.groups()
    return f"{HUGEPAGES_PREFIX}{number}{unit + 'i' if unit else ''}"


@dataclass(frozen=True)
class ResourceValues:
    """The forwarded resource fields the plugin reads; 0 stands for "not set" as in the CRI."""

    cpu_shares: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    memory_limit: int = 0
    hugepage_limits: Mapping[str, int] = field(default_factory=dict)
    """Hugepage limits in bytes by resource name; zero limits are left out."""

    @classmethod
    def from_nri(cls, resources: api.LinuxResources | None) -> ResourceValues:
        """Read an NRI ``LinuxResources`` (None or unset wrappers read as 0)."""
        if resources is None:
            return cls()
        hugepages: dict[str, int] = {}
        for limit in resources.hugepage_limits:
            if limit.limit > 0:
                name = hugepage_resource(limit.page_size)
                hugepages[name] = hugepages.get(name, 0) + limit.limit
        # An unset message or wrapper reads as its default: the value 0 (no HasField needed).
        cpu = resources.cpu
        return cls(
            cpu_shares=cpu.shares.value,
            cpu_quota=cpu.quota.value,
            cpu_period=cpu.period.value,
            memory_limit=resources.memory.limit.value,
            hugepage_limits=hugepages,
        )

    @property
    def cpu_request_millis(self) -> int:
        """The CPU request the shares were computed from (0 for the kubelet's minimum of 2).

        ``MilliCPUToShares`` truncates ``m * 1024 / 1000``; the smallest request giving these
        shares is ``ceil(shares * 1000 / 1024)``, which is exact for every request of 3
        millicores or more (1m and 2m give the minimum shares, read as no request).
        """
        if self.cpu_shares <= MIN_SHARES:
            return 0
        return -(-self.cpu_shares * 1000 // SHARES_PER_CPU)

    @property
    def cpu_limit_millis(self) -> int:
        """The CPU limit behind quota/period (0 when there is no quota)."""
        if self.cpu_quota <= 0 or self.cpu_period <= 0:
            return 0
        return -(-self.cpu_quota * 1000 // self.cpu_period)

    @property
    def integral_cpus(self) -> int:
        """n when shares == n*1024 and quota == n*period with n >= 1 (request == limit), else 0."""
        if self.cpu_shares < SHARES_PER_CPU or self.cpu_shares % SHARES_PER_CPU:
            return 0
        n = self.cpu_shares // SHARES_PER_CPU
        if self.cpu_period <= 0 or self.cpu_quota != n * self.cpu_period:
            return 0
        return n

    @property
    def cpu_guaranteed(self) -> bool:
        """CPU request equals a non-zero limit."""
        request = self.cpu_request_millis
        return request > 0 and request == self.cpu_limit_millis

    def qos(self) -> QOSClass:
        """The QoS class these values show: Guaranteed needs cpu request == limit and a memory
        limit (the memory request is not forwarded; it is taken to equal the limit)."""
        if self.cpu_guaranteed and self.memory_limit > 0:
            return QOSClass.GUARANTEED
        if self.cpu_request_millis == 0 and self.cpu_limit_millis == 0 and self.memory_limit == 0:
            return QOSClass.BEST_EFFORT
        return QOSClass.BURSTABLE

    def exclusive_cpus(self) -> int:
        """Whole CPUs for an exclusive slice: integral, request == limit, memory limited."""
        return self.integral_cpus if self.memory_limit > 0 else 0

    def same_limits(self, other: ResourceValues) -> bool:
        """True when the CPU quota (as a CPU amount) and memory limit equal ``other``'s."""
        return (
            self.cpu_limit_millis == other.cpu_limit_millis
            and self.memory_limit == other.memory_limit
            and self.cpu_request_millis == other.cpu_request_millis
        )

    def requests_and_limits(self) -> tuple[dict[str, int], dict[str, int]]:
        """Kubernetes-style requests and limits (cpu in millicores, memory in bytes).

        The memory request is taken to equal the memory limit when the CPU is Guaranteed (the
        only case where it matters: ``IsContainerEquivalentQOSGuaranteed``); hugepages always
        have request == limit in Kubernetes.
        """
        requests: dict[str, int] = {}
        limits: dict[str, int] = {}
        if self.cpu_request_millis:
            requests[CPU] = self.cpu_request_millis
        if self.cpu_limit_millis:
            limits[CPU] = self.cpu_limit_millis
        if self.memory_limit > 0:
            limits[MEMORY] = self.memory_limit
            if self.cpu_guaranteed:
                requests[MEMORY] = self.memory_limit
        for name, size in self.hugepage_limits.items():
            requests[name] = size
            limits[name] = size
        return requests, limits


class PodMode(enum.Enum):
    """How the plugin treats a pod it knows only from NRI."""

    BUDGET = "budget"
    """Guaranteed pod with an integral CPU budget: aligned and reserved as one bubble."""
    CLASSIC = "classic"
    """Anything else: the kubelet's per-container static-policy rules."""


@dataclass(frozen=True)
class PodIntent:
    """A pod as inferred at ``RunPodSandbox``: identity, budget and how it is handled."""

    spec: PodSpec
    """Identity and, for BUDGET pods, the budget as pod-level requests and limits."""
    budget: ResourceValues
    qos: QOSClass
    mode: PodMode
    qos_stated: bool = False
    """The QoS class is the one the kubelet named in the pod's cgroup parent (not inferred)."""

    @property
    def aggregate(self) -> dict[str, int] | None:
        """For a Guaranteed CLASSIC pod, the containers' aggregate requests (for the pod-scope
        alignment the kubelet does on them); None otherwise."""
        if self.mode is PodMode.CLASSIC and self.qos is QOSClass.GUARANTEED:
            return self.budget.requests_and_limits()[0]
        return None

    @property
    def budget_cpus(self) -> int:
        """Whole CPUs of the budget (0 unless BUDGET)."""
        return self.budget.integral_cpus if self.mode is PodMode.BUDGET else 0


def pod_identity(pod: api.PodSandbox) -> tuple[str, str, str]:
    """(uid, namespace, name) of a sandbox; the sandbox id stands in for a missing uid."""
    return (pod.uid or pod.id, pod.namespace or "default", pod.name)


_SYSTEMD_POD_SLICE = re.compile(r"kubepods-(?:(burstable|besteffort)-)?pod[^/]+\.slice")
_QOS_TIERS = {
    None: QOSClass.GUARANTEED,
    "kubepods": QOSClass.GUARANTEED,
    "burstable": QOSClass.BURSTABLE,
    "besteffort": QOSClass.BEST_EFFORT,
}


def qos_from_cgroup_parent(parent: str) -> QOSClass | None:
    """The QoS class the kubelet states in a pod's cgroup parent, or None when the parent does
    not follow its naming: with the cgroupfs driver ``.../kubepods/pod<uid>`` (Guaranteed),
    ``.../kubepods/burstable/pod<uid>``, ``.../kubepods/besteffort/pod<uid>``; with the
    systemd driver ``kubepods-pod<uid>.slice``, ``kubepods-burstable-pod<uid>.slice``,
    ``kubepods-besteffort-pod<uid>.slice`` (alone or at the end of a slice path)."""
    parts = [part for part in parent.split("/") if part]
    if not parts:
        return None
    systemd = _SYSTEMD_POD_SLICE.fullmatch(parts[-1])
    if systemd is not None:
        return _QOS_TIERS[systemd.group(1)]
    if len(parts) < 2 or not parts[-1].startswith("pod") or len(parts[-1]) == 3:
        return None
    if parts[-2] == "kubepods":
        return QOSClass.GUARANTEED
    if len(parts) >= 3 and parts[-3] == "kubepods":
        return _QOS_TIERS.get(parts[-2]) if parts[-2] != "kubepods" else None
    return None


def pod_intent(pod: api.PodSandbox) -> PodIntent:
    """Infer a pod's budget, QoS and mode from ``PodSandbox.linux``.

    The QoS class is the one the kubelet states in the cgroup parent
    (:func:`qos_from_cgroup_parent`); only a parent without the kubelet's naming leaves it to
    the values, which cannot tell a Burstable pod whose memory request is below its limit (NRI
    does not forward memory requests). The kubelet fills ``pod_resources`` for every pod: the
    pod-level resources when set, the containers' aggregate otherwise. A Guaranteed pod with a
    Guaranteed budget of a whole number of CPUs is treated as pod-level (BUDGET); anything else
    falls back to CLASSIC, and a Burstable or BestEffort pod never gets exclusive CPUs.
    """
    uid, namespace, name = pod_identity(pod)
    has_resources = pod.HasField("linux") and pod.linux.HasField("pod_resources")
    budget = ResourceValues.from_nri(pod.linux.pod_resources if has_resources else None)
    stated = qos_from_cgroup_parent(pod.linux.cgroup_parent)
    if stated is None:
        log.debug(
            "pod %s/%s: cgroup parent %r does not name a QoS class; taken from its resources",
            namespace,
            name,
            pod.linux.cgroup_parent,
        )
    qos = budget.qos() if stated is None else stated
    mode = PodMode.CLASSIC
    if qos is budget.qos() is QOSClass.GUARANTEED and budget.integral_cpus > 0:
        mode = PodMode.BUDGET
    if mode is PodMode.BUDGET:
        requests, limits = budget.requests_and_limits()
        spec = PodSpec(uid=uid, namespace=namespace, name=name, requests=requests, limits=limits)
    else:
        spec = PodSpec(uid=uid, namespace=namespace, name=name)
    return PodIntent(spec=spec, budget=budget, qos=qos, mode=mode, qos_stated=stated is not None)


def container_resources(container: api.Container) -> ResourceValues:
    """The container's forwarded resources (see :func:`resource_values`)."""
    if not (container.HasField("linux") and container.linux.HasField("resources")):
        return ResourceValues()
    return resource_values(container.linux.resources)


def resource_values(resources: api.LinuxResources | None) -> ResourceValues:
    """Forwarded container resources. A running container reported by Synchronize carries the
    resources applied to it: a CPU quota of -1 means a CPU manager gave it exclusive CPUs (only
    exclusive containers get it), so with shares of n*1024 it is read back as the n whole CPUs
    it asked for."""
    values = ResourceValues.from_nri(resources)
    n, rest = divmod(values.cpu_shares, SHARES_PER_CPU)
    if values.cpu_quota == -1 and n >= 1 and not rest:
        period = values.cpu_period or DEFAULT_CPU_PERIOD
        return dataclasses.replace(values, cpu_quota=n * period, cpu_period=period)
    return values


def container_spec(intent: PodIntent, container: api.Container) -> ContainerSpec:
    """The engine's view of a container, kind unknown (NRI does not tell; taken as APP).

    Inside a BUDGET pod, a container whose CPU and memory values equal the pod's is taken as one
    without container-level resources: the kubelet copies the pod's limits into such containers.
    In a pod whose cgroup parent says it is not Guaranteed, no container is taken as
    Guaranteed: its memory request,
    which NRI does not forward, is taken as 0 (the kubelet's ``GetPodQOS`` ignores a zero
    request, so the container is Burstable, as the pod's cgroup parent says).
    """
    values = container_resources(container)
    if intent.mode is PodMode.BUDGET and values.same_limits(intent.budget):
        return ContainerSpec(name=container.name)
    requests, limits = values.requests_and_limits()
    if intent.qos_stated and intent.qos is not QOSClass.GUARANTEED and MEMORY in limits:
        requests[MEMORY] = 0
    return ContainerSpec(name=container.name, requests=requests, limits=limits)


def resized_container(
    intent: PodIntent, old: ContainerSpec, resources: api.LinuxResources | None
) -> ContainerSpec | None:
    """The container an ``UpdateContainer`` asks for, or None when its CPU and memory values are
    those the plugin already holds (the kubelet re-applying them).

    Only what the CRI carries is compared: the CPU request (from the shares), the CPU limit
    (quota) and the memory limit. In a pod with a budget, a value the container does not set
    arrives as the pod's (the kubelet copies the limits, and the shares follow) and stays
    unset. A value the message does not carry is kept. The memory request is not forwarded: it
    keeps following the limit when it equalled it, and is kept otherwise; hugepages are kept.
    """
    values = resource_values(resources)
    budget = intent.budget if intent.mode is PodMode.BUDGET else None
    old_request = old.requests.get(CPU, old.limits.get(CPU, 0))
    old_memory = old.limits.get(MEMORY, 0)
    shares, quota, memory = _carried(resources)
    cpu_limit = values.cpu_limit_millis if quota else old.limits.get(CPU, 0)
    memory_limit = values.memory_limit if memory else old_memory
    cpu_request = values.cpu_request_millis if shares else old_request
    if budget is not None and CPU not in old.limits and cpu_limit == budget.cpu_limit_millis:
        cpu_limit = 0
    if budget is not None and MEMORY not in old.limits and memory_limit == budget.memory_limit:
        memory_limit = 0
    if budget is not None and not old_request and cpu_request == budget.cpu_request_millis:
        cpu_request = 0
    if (
        cpu_request == (old_request if old_request >= 3 else 0)
        and cpu_limit == old.limits.get(CPU, 0)
        and memory_limit == old_memory
    ):
        return None
    requests = {k: v for k, v in old.requests.items() if k not in (CPU, MEMORY)}
    limits = {k: v for k, v in old.limits.items() if k not in (CPU, MEMORY)}
    if cpu_request:
        requests[CPU] = cpu_request
    if cpu_limit:
        limits[CPU] = cpu_limit
    if memory_limit > 0:
        limits[MEMORY] = memory_limit
        memory_request = old.requests.get(MEMORY)
        guaranteed = not intent.qos_stated or intent.qos is QOSClass.GUARANTEED
        if memory_request is None and not old_memory and cpu_request == cpu_limit and guaranteed:
            memory_request = memory_limit
        if memory_request is not None:
            follows = memory_request == old_memory or memory_request > memory_limit
            requests[MEMORY] = memory_limit if follows else memory_request
    return ContainerSpec(old.name, old.kind, requests, limits)


def _carried(resources: api.LinuxResources | None) -> tuple[bool, bool, bool]:
    """Whether the CPU shares, the CPU quota (with its period) and the memory limit are in the
    message; a value that is not carried is left as it was."""
    if resources is None:
        return False, False, False
    cpu = resources.cpu if resources.HasField("cpu") else None
    shares = cpu is not None and cpu.HasField("shares")
    quota = cpu is not None and cpu.HasField("quota")
    quota = quota and (cpu is not None and (cpu.HasField("period") or cpu.quota.value <= 0))
    memory = resources.HasField("memory") and resources.memory.HasField("limit")
    return shares, quota, memory


def resized_budget(intent: PodIntent, resources: api.LinuxResources | None) -> PodIntent | None:
    """The pod an ``UpdatePodSandbox`` asks for when it changes a BUDGET pod's budget; None for
    an unchanged budget and for CLASSIC pods (their containers carry the change)."""
    if intent.mode is not PodMode.BUDGET or resources is None:
        return None
    values = ResourceValues.from_nri(resources)
    same = values.same_limits(intent.budget)
    if same and dict(values.hugepage_limits) == dict(intent.budget.hugepage_limits):
        return None
    requests, limits = values.requests_and_limits()
    spec = dataclasses.replace(intent.spec, requests=requests, limits=limits)
    return dataclasses.replace(intent, spec=spec, budget=values, qos=values.qos())


def is_sole_guaranteed_candidate(intent: PodIntent, container: api.Container) -> bool:
    """True for a container of a BUDGET pod whose values equal the budget: the pod's first
    container is then taken as a classic Guaranteed container (docs/design.md section 2)."""
    return intent.mode is PodMode.BUDGET and container_resources(container).same_limits(
        intent.budget
    )


def as_classic(intent: PodIntent) -> PodIntent:
    """A BUDGET pod taken as a classic Guaranteed pod (its sole container holds the budget)."""
    bare = dataclasses.replace(intent.spec, requests=None, limits=None)
    return dataclasses.replace(intent, spec=bare, mode=PodMode.CLASSIC)


def as_budget(intent: PodIntent) -> PodIntent:
    """The pod budget again (the inverse of :func:`as_classic`)."""
    requests, limits = intent.budget.requests_and_limits()
    spec = dataclasses.replace(intent.spec, requests=requests, limits=limits)
    return dataclasses.replace(intent, spec=spec, mode=PodMode.BUDGET)


PROMOTE = "promote"
"""The single-container inference's step taking a pod budget as a classic Guaranteed pod."""
DEMOTE = "demote"
"""The step taking a promoted pod back to its budget (a second container showed it)."""


def readmitted_intent(intent: PodIntent, kind: str) -> PodIntent:
    """``intent`` after the step ``kind`` (:data:`PROMOTE` or :data:`DEMOTE`)."""
    return as_classic(intent) if kind == PROMOTE else as_budget(intent)


def readmit_kind(value: object) -> str:
    """A journal record's step, checked; raises ValueError naming the value and the rule."""
    if value not in (PROMOTE, DEMOTE):
        raise ValueError(f"readmit kind {value!r}: must be {PROMOTE!r} or {DEMOTE!r}")
    return str(value)


def is_promoted(intent: PodIntent) -> bool:
    """True for a pod taken as classic although its budget alone would make it BUDGET."""
    budget = intent.budget
    return (
        intent.mode is PodMode.CLASSIC
        and intent.qos is budget.qos() is QOSClass.GUARANTEED
        and budget.integral_cpus > 0
    )


def budget_container(intent: PodIntent, name: str) -> ContainerSpec:
    """The classic Guaranteed container holding the whole budget."""
    requests, limits = intent.budget.requests_and_limits()
    return ContainerSpec(name=name, requests=requests, limits=limits)


def budget_intent(intent: PodIntent, pod: PodSpec) -> PodIntent:
    """``intent`` with the pod-level resources of ``pod`` (a resize seen in the API), its
    budget values as the kubelet forwards them."""
    cri = sandbox_resources(pod)
    budget = ResourceValues(
        cpu_shares=cri.cpu_shares,
        cpu_quota=cri.cpu_quota,
        cpu_period=cri.cpu_period,
        memory_limit=cri.memory_limit_in_bytes,
        hugepage_limits={
            k: v for k, v in (pod.limits or {}).items() if k.startswith(HUGEPAGES_PREFIX)
        },
    )
    spec = dataclasses.replace(intent.spec, requests=pod.requests, limits=pod.limits)
    return dataclasses.replace(intent, spec=spec, budget=budget, qos=budget.qos())


def intent_to_dict(intent: PodIntent) -> dict[str, Any]:
    """A JSON-able form of a ``PodIntent`` (for the checkpoint)."""
    b = intent.budget
    return {
        "spec": spec_to_dict(intent.spec),
        "mode": intent.mode.value,
        "qos": intent.qos.value,
        "qos_stated": intent.qos_stated,
        "budget": {
            "cpu_shares": b.cpu_shares,
            "cpu_quota": b.cpu_quota,
            "cpu_period": b.cpu_period,
            "memory_limit": b.memory_limit,
            "hugepage_limits": dict(b.hugepage_limits),
        },
    }


def intent_from_dict(d: Mapping[str, Any]) -> PodIntent:
    """The inverse of :func:`intent_to_dict`; unknown keys are ignored."""
    b = d.get("budget", {})
    budget = ResourceValues(
        cpu_shares=int(b.get("cpu_shares", 0)),
        cpu_quota=int(b.get("cpu_quota", 0)),
        cpu_period=int(b.get("cpu_period", 0)),
        memory_limit=int(b.get("memory_limit", 0)),
        hugepage_limits={str(k): int(v) for k, v in b.get("hugepage_limits", {}).items()},
    )
    return PodIntent(
        spec=spec_from_dict(d["spec"]),
        budget=budget,
        qos=QOSClass(d.get("qos", budget.qos().value)),
        mode=PodMode(d.get("mode", PodMode.CLASSIC.value)),
        qos_stated=bool(d.get("qos_stated", False)),
    )
