"""PodSpec builders shaped like the kubelet's CPU manager test helpers (``makePod`` & co)."""

from __future__ import annotations

from collections.abc import Sequence

from nri_plrm.base.quantity import cpu_millis, memory_bytes
from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec


def resources(cpu_request: str, cpu_limit: str, memory: str = "1G") -> tuple[dict[str, int], ...]:
    """(requests, limits) with the given cpu and an equal memory request/limit."""
    return (
        {"cpu": cpu_millis(cpu_request), "memory": memory_bytes(memory)},
        {"cpu": cpu_millis(cpu_limit), "memory": memory_bytes(memory)},
    )


def container(
    name: str,
    cpu_request: str | None = None,
    cpu_limit: str | None = None,
    kind: ContainerKind = ContainerKind.APP,
    memory: str = "1G",
) -> ContainerSpec:
    """A container; without cpu values it sets no resources at all (``resources: {}``)."""
    if cpu_request is None:
        return ContainerSpec(name, kind)
    requests, limits = resources(cpu_request, cpu_limit or cpu_request, memory)
    return ContainerSpec(name, kind, requests, limits)


def make_pod(uid: str, name: str, cpu_request: str, cpu_limit: str) -> PodSpec:
    """``makePod``: one app container with cpu request/limit and 1G memory request = limit."""
    return PodSpec(uid=uid, name=uid, containers=(container(name, cpu_request, cpu_limit),))


def make_multi_container_pod(
    init: Sequence[tuple[str, str]], apps: Sequence[tuple[str, str]], uid: str = "fakePod"
) -> PodSpec:
    """``makeMultiContainerPod``: init containers ``initContainer-i``, apps ``appContainer-i``."""
    return PodSpec(
        uid=uid,
        init_containers=tuple(
            container(f"initContainer-{i}", r, lim, ContainerKind.INIT)
            for i, (r, lim) in enumerate(init)
        ),
        containers=tuple(container(f"appContainer-{i}", r, lim) for i, (r, lim) in enumerate(apps)),
    )


def pod_level(
    uid: str,
    cpu: str,
    init: Sequence[ContainerSpec] = (),
    apps: Sequence[ContainerSpec] = (),
    cpu_limit: str | None = None,
    memory: str = "4G",
) -> PodSpec:
    """A pod with pod-level resources (cpu request ``cpu``, limit ``cpu_limit`` or equal)."""
    return PodSpec(
        uid=uid,
        name=uid,
        init_containers=tuple(init),
        containers=tuple(apps),
        requests={"cpu": cpu_millis(cpu), "memory": memory_bytes(memory)},
        limits={"cpu": cpu_millis(cpu_limit or cpu), "memory": memory_bytes(memory)},
    )
