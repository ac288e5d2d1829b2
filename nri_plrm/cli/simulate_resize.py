"""``nri-plrm simulate --resize``: preview an in-place resize (``kubectl patch --subresource
resize``) after every manifest is admitted.

``NAMESPACE/POD/CONTAINER=cpu=Q[,memory=Q]`` resizes a container, ``NAMESPACE/POD=...`` the
pod-level resources (``.spec.resources``). A value sets the request and, where the container
(or pod) has a limit for that resource, the limit too, so a Guaranteed pod stays Guaranteed.
Each resize goes through the daemon's handlers as containerd would deliver it
(``UpdateContainer`` with the kubelet's new values, ``UpdatePodSandbox`` for the pod) and is
performed or refused by the rules of docs/design.md section 10; the runtime then holds what
the plugin decided.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from nri_plrm.base.quantity import cpu_millis, memory_bytes
from nri_plrm.cli.inputs import UsageError
from nri_plrm.engine.resize import (
    CPU_STATIC_MESSAGE,
    INCONSISTENT_CPU_ALLOCATION_ERROR,
    INFEASIBLE,
    MEMORY_STATIC_MESSAGE,
    NODE_CAPACITY_MESSAGE,
    POD_LEVEL_GATE_MESSAGE,
    POD_LEVEL_SLICE_MESSAGE,
    PROHIBITED_CPU_ALLOCATION_ERROR,
    init_container_message,
)
from nri_plrm.engine.spec import (
    CPU,
    EMPTY_POD_SHARED_POOL_ERROR,
    MEMORY,
    TOPOLOGY_AFFINITY_ERROR,
    AdmissionError,
    ContainerKind,
    ContainerSpec,
    PodSpec,
    ResourceList,
)
from nri_plrm.nri.handlers import NRIError
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.pod_to_cri import nri_container, nri_pod_sandbox

FLAG = "--resize"


@dataclass(frozen=True)
class ResizeRequest:
    """One ``--resize`` value."""

    target: str
    """``NAMESPACE/POD`` or ``NAMESPACE/POD/CONTAINER`` as written."""
    namespace: str
    pod: str
    container: str
    """"" for the pod-level resources."""
    values: ResourceList
    """New CPU (millicores) and memory (bytes) values."""


@dataclass(frozen=True)
class ResizeOutcome:
    """A resize performed, or refused with the kubelet's reason and message."""

    target: str
    admitted: bool
    reason: str = ""
    message: str = ""
    explanation: str = ""

    def to_json(self) -> dict[str, Any]:
        """The ``resizes`` entry of ``--output json``."""
        return {
            "target": self.target,
            "admitted": self.admitted,
            "reason": self.reason,
            "message": self.message,
            "explanation": self.explanation,
        }

    def to_lines(self) -> list[str]:
        """The table view: one line, and the cause of a refusal."""
        if self.admitted:
            return [f"{self.target}: performed"]
        lines = [f"{self.target}: refused: {self.reason}: {self.message}"]
        if self.explanation:
            lines.append(f"  cause: {self.explanation}")
        return lines


def parse_resize(text: str) -> ResizeRequest:
    """Parse one ``--resize`` value; raises ``UsageError`` naming the value and the rule."""
    rule = "expected NAMESPACE/POD[/CONTAINER]=cpu=Q[,memory=Q]"
    target, sep, spec = text.partition("=")
    parts = target.split("/")
    if not sep or len(parts) not in (2, 3) or not all(parts) or not spec:
        raise UsageError(f"{FLAG} {text!r}: {rule}")
    values: dict[str, int] = {}
    for item in spec.split(","):
        name, eq, value = item.partition("=")
        if not eq or name not in (CPU, MEMORY) or name in values:
            raise UsageError(f"{FLAG} {text!r}: {item!r}: {rule}, each resource once")
        try:
            values[name] = cpu_millis(value) if name == CPU else memory_bytes(value)
        except ValueError as exc:
            raise UsageError(f"{FLAG} {text!r}: {name}={value!r}: {exc}") from exc
        if values[name] <= 0:
            raise UsageError(f"{FLAG} {text!r}: {name}={value!r}: must be positive")
    container = parts[2] if len(parts) == 3 else ""
    return ResizeRequest(target, parts[0], parts[1], container, values)


def _with_values(
    requests: ResourceList, limits: ResourceList, values: ResourceList
) -> tuple[dict[str, int], dict[str, int]]:
    new_requests, new_limits = dict(requests), dict(limits)
    for name, value in values.items():
        new_requests[name] = value
        if name in new_limits:
            new_limits[name] = value
    return new_requests, new_limits


def resized_pod(pod: PodSpec, request: ResizeRequest) -> PodSpec:
    """``pod`` as the resize asks for it; raises ``UsageError`` for an unknown container or a
    pod-level resize of a pod without pod-level resources."""
    if not request.container:
        if not pod.has_pod_level_resources:
            raise UsageError(
                f"{FLAG} {request.target!r}: the pod has no pod-level resources "
                "(.spec.resources); name a container"
            )
        requests, limits = _with_values(pod.requests or {}, pod.limits or {}, request.values)
        return replace(pod, requests=requests, limits=limits)
    old = pod.container(request.container)
    if old is None:
        raise UsageError(f"{FLAG} {request.target!r}: the pod has no container of that name")
    requests, limits = _with_values(old.requests, old.limits, request.values)
    new = replace(old, requests=requests, limits=limits)

    def swap(items: tuple[ContainerSpec, ...]) -> tuple[ContainerSpec, ...]:
        return tuple(new if c.name == new.name else c for c in items)

    return replace(pod, init_containers=swap(pod.init_containers), containers=swap(pod.containers))


def explain(err: AdmissionError, request: ResizeRequest) -> str:
    """Why the resize was refused, in operator terms, and the setting or step that changes it."""
    if err.message == CPU_STATIC_MESSAGE:
        return (
            "kubelet 1.37 does not resize the CPUs of Guaranteed pods under the static policy; "
            "[resize] exclusive_cpus = true follows kubernetes/kubernetes#140629 (open)"
        )
    if err.message == MEMORY_STATIC_MESSAGE:
        return "memory pinned by the Static policy is not resized; recreate the pod"
    if err.message == POD_LEVEL_GATE_MESSAGE:
        return "[resize] pod_level_resources = false; the kubelet's gate is on since 1.36"
    if err.message == POD_LEVEL_SLICE_MESSAGE:
        return "exclusive slices of a pod budget keep their CPUs; resize the pod budget instead"
    if err.message == init_container_message(request.container):
        return "a plain init container has completed; only app and sidecar containers resize"
    if err.message.startswith(NODE_CAPACITY_MESSAGE):
        return "the pod would request more than the node's allocatable (CPUs less reserved)"
    if err.reason == TOPOLOGY_AFFINITY_ERROR:
        return (
            "the new CPUs do not fit the NUMA nodes the topology policy allows, or would leave "
            "the NUMA nodes of the container's pinned memory"
        )
    if err.reason == PROHIBITED_CPU_ALLOCATION_ERROR:
        return "an exclusive container never shrinks below the CPUs it was created with"
    if err.reason == INCONSISTENT_CPU_ALLOCATION_ERROR:
        return "whole CPUs (exclusive) and fractional CPUs (shared) do not turn into each other"
    if err.reason == EMPTY_POD_SHARED_POOL_ERROR:
        return "the budget must hold the exclusive slices and a CPU for the shared containers"
    return ""


Apply = Callable[[str, api.LinuxResources], None]
"""Apply the kubelet's new values to a container of the runtime (by id)."""
ApplyUpdates = Callable[[Iterable[api.ContainerUpdate]], None]
"""Apply the plugin's updates to the runtime's containers."""


async def run_resize(
    plugin: Plugin,
    pod: PodSpec,
    container_ids: dict[str, str],
    container_messages: dict[str, api.Container],
    request: ResizeRequest,
    apply: Apply,
    apply_updates: ApplyUpdates,
) -> tuple[ResizeOutcome, PodSpec]:
    """Deliver one resize to the plugin as containerd would; the outcome and the pod's spec
    afterwards (the old one when refused)."""
    new = resized_pod(pod, request)
    sandbox = nri_pod_sandbox(pod)
    spec = new.container(request.container) if request.container else None
    if spec is not None and spec.kind is ContainerKind.INIT:
        err = AdmissionError(INFEASIBLE, init_container_message(spec.name))
        return ResizeOutcome(
            request.target, False, err.reason, err.message, explain(err, request)
        ), pod
    try:
        if spec is None:
            resources = nri_pod_sandbox(new).linux.pod_resources
            plugin.update_pod_sandbox(sandbox, None, resources)
        else:
            resources = nri_container(new, spec).linux.resources
            cid = container_ids[spec.name]
            updates = plugin.update_container(sandbox, container_messages[cid], resources)
            apply(cid, resources)
            apply_updates(updates)
    except NRIError as exc:
        cause = exc.__cause__
        if not isinstance(cause, AdmissionError):
            return ResizeOutcome(request.target, False, "NRIError", str(exc)), pod
        why = explain(cause, request)
        return ResizeOutcome(request.target, False, cause.reason, cause.message, why), pod
    await plugin.drain()
    return ResizeOutcome(request.target, True), new
