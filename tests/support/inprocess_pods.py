"""Pods started straight through a ``Plugin``'s handlers, in this process (no socket, no
runtime): for the tests and benchmarks of the plugin's own state."""

from __future__ import annotations

from nri_plrm.engine.spec import ContainerKind, ContainerSpec, PodSpec
from nri_plrm.plugin import Plugin
from nri_plrm.translate.pod_to_cri import creation_order, nri_container, nri_pod_sandbox

GI = 1 << 30


def pod_level(uid: str) -> PodSpec:
    """A pod-level pod: a budget of two CPUs and 2 GiB, one exclusive container of one CPU and
    a sidecar without resources."""
    one = {"cpu": 1000, "memory": GI}
    budget = {"cpu": 2000, "memory": 2 * GI}
    return PodSpec(
        uid=uid,
        name=uid,
        init_containers=(ContainerSpec("side", ContainerKind.SIDECAR),),
        containers=(ContainerSpec("main", requests=one, limits=one),),
        requests=budget,
        limits=budget,
    )


async def start(plugin: Plugin, spec: PodSpec) -> None:
    """RunPodSandbox, then CreateContainer for each container in the kubelet's order."""
    sandbox = nri_pod_sandbox(spec)
    await plugin.run_pod_sandbox(sandbox)
    for ctr in creation_order(spec):
        await plugin.create_container(sandbox, nri_container(spec, ctr))
