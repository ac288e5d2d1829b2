"""The QoS class the kubelet states in a pod's cgroup parent, for both cgroup drivers, and what
follows from it: a Burstable pod whose values look Guaranteed (NRI does not forward memory
requests) gets no exclusive CPU and no pod budget; the recorded golden traffic (such a pod, and
its CPU limit update) is answered without error, the update performed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from nrisim.capture import capture_dir, request
from plrm_harness import stored_plugin

from nri_plrm.engine.spec import AssignmentType
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.translate.nri_to_pod import PodMode, QOSClass, pod_intent, qos_from_cgroup_parent

UID = "6f1c2b3a-0000-4000-8000-000000000001"
SLICE_UID = UID.replace("-", "_")


@pytest.mark.parametrize(
    ("parent", "qos"),
    [
        (f"/kubepods/pod{UID}", QOSClass.GUARANTEED),
        (f"/kubepods/burstable/pod{UID}", QOSClass.BURSTABLE),
        (f"/kubepods/besteffort/pod{UID}", QOSClass.BEST_EFFORT),
        (f"/kubelet/kubepods/burstable/pod{UID}/", QOSClass.BURSTABLE),  # --cgroup-root
        (f"kubepods-pod{SLICE_UID}.slice", QOSClass.GUARANTEED),
        (f"kubepods-burstable-pod{SLICE_UID}.slice", QOSClass.BURSTABLE),
        (f"kubepods-besteffort-pod{SLICE_UID}.slice", QOSClass.BEST_EFFORT),
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SLICE_UID}.slice",
            QOSClass.BURSTABLE,
        ),
    ],
)
def test_the_kubelets_naming_states_the_qos(parent: str, qos: QOSClass) -> None:
    assert qos_from_cgroup_parent(parent) is qos


@pytest.mark.parametrize(
    "parent",
    ["", "/", "/system.slice/foo", f"/burstable/pod{UID}", "/kubepods/pod", "/kubepods/other"],
)
def test_other_parents_state_nothing(parent: str) -> None:
    assert qos_from_cgroup_parent(parent) is None


def sandbox(parent: str) -> api.PodSandbox:
    """A pod with a 1-CPU, 64 MiB budget (values that look Guaranteed) under ``parent``."""
    pod = api.PodSandbox(id="sb", uid=UID, name="p", namespace="default")
    pod.linux.cgroup_parent = parent
    res = pod.linux.pod_resources
    res.cpu.shares.value = 1024
    res.cpu.quota.value = 100_000
    res.cpu.period.value = 100_000
    res.memory.limit.value = 64 << 20
    return pod


@pytest.mark.parametrize(
    ("parent", "qos", "mode"),
    [
        (f"/kubepods/pod{UID}", QOSClass.GUARANTEED, PodMode.BUDGET),
        (f"/kubepods/burstable/pod{UID}", QOSClass.BURSTABLE, PodMode.CLASSIC),
        (f"kubepods-burstable-pod{SLICE_UID}.slice", QOSClass.BURSTABLE, PodMode.CLASSIC),
        ("/custom/parent", QOSClass.GUARANTEED, PodMode.BUDGET),  # values decide
    ],
)
def test_the_stated_class_wins_over_the_values(parent: str, qos: QOSClass, mode: PodMode) -> None:
    intent = pod_intent(sandbox(parent))
    assert (intent.qos, intent.mode) == (qos, mode)


def container(pod: api.PodSandbox, name: str = "work") -> api.Container:
    ctr = api.Container(id=f"{pod.id}-{name}", pod_sandbox_id=pod.id, name=name)
    ctr.linux.resources.CopyFrom(pod.linux.pod_resources)
    return ctr


@pytest.mark.parametrize(
    "parent", [f"/kubepods/burstable/pod{UID}", f"kubepods-burstable-pod{SLICE_UID}.slice"]
)
def test_a_burstable_pod_that_looks_guaranteed_stays_shared(tmp_path: Path, parent: str) -> None:
    plugin = stored_plugin(tmp_path / "state")
    pod = sandbox(parent)

    async def main() -> api.ContainerAdjustment | None:
        await plugin.run_pod_sandbox(pod)
        adjust, _ = await plugin.create_container(pod, container(pod))
        return adjust

    adjust = asyncio.run(main())
    assert adjust is not None
    assignment = plugin.ledger.engine.assignment(UID, "work")
    assert assignment is not None and assignment.assignment is AssignmentType.NODE_SHARED
    assert not adjust.linux.resources.cpu.HasField("quota")  # the kubelet's quota stays
    assert not plugin.ledger.engine.pod_cpus(UID)  # no pod budget reserved


def test_golden_capture_is_answered_and_its_update_performed(tmp_path: Path) -> None:
    capture_dir()  # skips with the one-line reason when the recordings are absent
    plugin = stored_plugin(tmp_path / "state")
    sync = request("golden", "Synchronize")
    run = request("golden", "RunPodSandbox")
    create = request("golden", "CreateContainer")
    update = request("golden", "UpdateContainer")
    update_pod = request("golden", "UpdatePodSandbox")
    stop = request("golden", "StopContainer")
    remove = request("golden", "RemoveContainer")
    remove_pod = request("golden", "RemovePodSandbox")
    assert run.pod.linux.cgroup_parent.startswith("/kubepods/burstable/")

    async def main() -> list[api.ContainerUpdate]:
        await plugin.synchronize(list(sync.pods), list(sync.containers))
        await plugin.run_pod_sandbox(run.pod)
        adjust, _ = await plugin.create_container(create.pod, create.container)
        assert adjust is not None and not adjust.linux.resources.cpu.HasField("quota")
        replies = plugin.update_container(update.pod, update.container, update.linux_resources)
        plugin.update_pod_sandbox(
            update_pod.pod, update_pod.overhead_linux_resources, update_pod.linux_resources
        )
        plugin.stop_container(stop.pod, stop.container)
        plugin.remove_container(remove.pod, remove.container)
        plugin.remove_pod_sandbox(remove_pod.pod)
        return replies

    replies = asyncio.run(main())
    (own,) = [u for u in replies if u.container_id == update.container.id]
    assert not own.linux.resources.cpu.HasField("quota")  # the kubelet's new quota is applied
    assert own.linux.resources.cpu.cpus  # on the node's shared pool
    assert plugin.ledger.pod(run.pod.uid) is None
