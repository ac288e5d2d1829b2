"""Pods started straight through a ``Plugin``'s handlers, in this process (no socket, no
runtime): for the tests and benchmarks of the plugin's own state."""

from __future__ import annotations

from nri_plrm.engine.spec import AdmissionError, ContainerKind, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.translate.nri_to_pod import pod_intent
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
    """RunPodSandbox, then CreateContainer and PostStartContainer for each container in the
    kubelet's order."""
    sandbox = nri_pod_sandbox(spec)
    await plugin.run_pod_sandbox(sandbox)
    for ctr in creation_order(spec):
        container = nri_container(spec, ctr)
        await plugin.create_container(sandbox, container)
        plugin.post_start_container(sandbox, container)


def admit_and_place(ledger: NodeLedger, spec: PodSpec, whole: bool) -> bool:
    """Admit the pod straight in the ledger (with its full spec when ``whole``, as in API
    mode) and place each container; False, with nothing left of it, when it is refused."""
    sandbox = nri_pod_sandbox(spec)
    try:
        ledger.admit(spec.uid, sandbox.id, pod_intent(sandbox), spec if whole else None)
        for c in spec.all_containers():
            ledger.place(spec.uid, c.name, f"{spec.uid}-{c.name}", c)
    except AdmissionError:  # refused (the node is full): the pod does not run
        ledger.remove_pod(spec.uid)
        return False
    return True
