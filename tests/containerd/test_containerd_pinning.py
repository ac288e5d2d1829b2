"""Pinning on real containerd: what the kernel holds for each kind of container, and what
PodResources answers (both containerd builds of the kit, the real plugin process)."""

from __future__ import annotations

import pytest
from containerd_kit import (
    EXCLUSIVE_1CPU,
    MIB,
    KitError,
    PluginProcess,
    Pod,
    Testbed,
    plugin_on,
    wait_until,
)

pytestmark = pytest.mark.containerd


def test_exclusive_slice_and_no_quota(testbed: Testbed, plugin: PluginProcess) -> None:
    pod = Pod("exclusive", "guaranteed", budget=(1000, 64 * MIB))
    testbed.run_pod(pod)
    cid = testbed.run_container(pod, "work", EXCLUSIVE_1CPU)
    cgroup = testbed.cgroup(cid)
    assert cgroup.path == f"/kubepods/pod{pod.uid}/{cid}"
    assert (cgroup.cpus(), cgroup.mems(), cgroup.quota()) == ("1", "0", -1)
    reported = plugin.pods()["exclusive"]
    assert reported["containers"] == [
        {
            "name": "work",
            "devices": [],
            "cpu_ids": [1],
            "memory": [("memory", 64 * MIB, [0])],
            "dynamic_resources": [],
        }
    ]


def test_node_shared_pool_shrinks_and_grows(testbed: Testbed, plugin: PluginProcess) -> None:
    best_effort = Pod("best-effort", "besteffort")
    testbed.run_pod(best_effort)
    shared = testbed.run_container(best_effort, "work", best_effort.inherited())
    assert testbed.cgroup(shared).cpus() == "0-1"

    exclusive = Pod("exclusive", "guaranteed", budget=(1000, 64 * MIB))
    testbed.run_pod(exclusive)
    pinned = testbed.run_container(exclusive, "work", EXCLUSIVE_1CPU)
    assert testbed.cgroup(pinned).cpus() == "1"
    testbed.follows(shared, "0")

    testbed.remove_pod(exclusive)
    testbed.follows(shared, "0-1")
    assert plugin.pods()["best-effort"]["containers"][0]["cpu_ids"] == []  # type: ignore[index]


def test_pod_shared_pool(testbed: Testbed, plugin: PluginProcess) -> None:
    """Two containers without container-level resources in a pod with a 1-CPU budget run on
    its pod shared pool: the pod's CPU, isolated from the node's pool, quota kept."""
    best_effort = Pod("best-effort", "besteffort")
    testbed.run_pod(best_effort)
    other = testbed.run_container(best_effort, "work", best_effort.inherited())
    pod = Pod("pooled", "guaranteed", budget=(1000, 128 * MIB))
    testbed.run_pod(pod)
    sidecars = [testbed.run_container(pod, name, pod.inherited()) for name in ("a", "b")]
    for cid in sidecars:
        cgroup = testbed.cgroup(cid)
        assert (cgroup.cpus(), cgroup.mems(), cgroup.quota()) == ("1", "0", 100_000)
    testbed.follows(other, "0")
    reported = plugin.pods()["pooled"]
    assert reported["cpu_ids"] == [1]
    assert [c["cpu_ids"] for c in reported["containers"]] == [[], []]  # type: ignore[attr-defined]


def test_empty_pod_shared_pool_refused(testbed: Testbed, plugin: PluginProcess) -> None:
    """An exclusive container taking the whole budget while a container of the pod needs its
    shared pool fails creation with the kubelet's reason and message."""
    pod = Pod("empty-pool", "guaranteed", budget=(1000, 128 * MIB))
    testbed.run_pod(pod)
    sidecar = testbed.run_container(pod, "sidecar", pod.inherited())
    with pytest.raises(KitError) as refused:
        testbed.create(pod, "main", EXCLUSIVE_1CPU)
    message = str(refused.value)
    assert "EmptyPodSharedPoolError" in message
    assert (
        "pod rejected, sum of exclusive container cpu requests equals pod budget, "
        "leaving no cpus for shared containers" in message
    )
    assert "main" not in testbed.crictl("ps", "-a", "-q", "--name", "^main$")
    assert testbed.cgroup(sidecar).cpus() == "1"


def test_pod_exclusive_slice_reuses_init_container_cpus(
    testbed: Testbed, plugin: PluginProcess
) -> None:
    """An init container's exclusive CPU is reused by the app container once it exited
    (containerd's StopContainer for a container that exits by itself)."""
    pod = Pod("init-reuse", "guaranteed", budget=(1000, 128 * MIB))
    testbed.run_pod(pod)
    init = testbed.run_container(pod, "init", EXCLUSIVE_1CPU, command=["sleep", "1"])
    assert testbed.cgroup(init).cpus() == "1"
    wait_until(lambda: testbed.state(init) == "CONTAINER_EXITED", 15, lambda: "init did not exit")
    app = testbed.run_container(pod, "app", EXCLUSIVE_1CPU)
    cgroup = testbed.cgroup(app)
    assert (cgroup.cpus(), cgroup.mems(), cgroup.quota()) == ("1", "0", -1)
    reported = plugin.pods()["init-reuse"]
    assert reported["cpu_ids"] == [1]
    assert {c["name"]: c["cpu_ids"] for c in reported["containers"]}["app"] == [1]  # type: ignore[attr-defined]


def test_container_scope_mixed_pod(testbed: Testbed) -> None:
    """Scope container: the exclusive container's CPU comes from the node, its sibling runs in
    the node's shared pool with the pod's limit as its quota."""
    plugin = plugin_on(testbed, '[topology_manager]\nscope = "container"\n')
    plugin.start()
    try:
        pod = Pod("mixed", "guaranteed", budget=(2000, 256 * MIB))
        testbed.run_pod(pod)
        sidecar = testbed.run_container(pod, "infrastructure-sidecar", EXCLUSIVE_1CPU)
        worker = testbed.run_container(pod, "worker", pod.inherited())
        pinned, shared = testbed.cgroup(sidecar), testbed.cgroup(worker)
        assert (pinned.cpus(), pinned.mems(), pinned.quota()) == ("1", "0", -1)
        testbed.follows(worker, "0")
        assert shared.quota() == 200_000
        reported = plugin.pods()["mixed"]
        assert reported["cpu_ids"] == []
        assert {c["name"]: c["cpu_ids"] for c in reported["containers"]} == {  # type: ignore[attr-defined]
            "infrastructure-sidecar": [1],
            "worker": [],
        }
    finally:
        plugin.kill()


def test_burstable_pod_that_looks_guaranteed_stays_shared(
    testbed: Testbed, plugin: PluginProcess
) -> None:
    """CPU request == limit and a memory limit look Guaranteed over NRI (memory requests are not
    forwarded); the kubelet's cgroup parent says Burstable: the node's shared pool, quota kept."""
    pod = Pod("looks-guaranteed", "burstable", budget=(1000, 64 * MIB))
    testbed.run_pod(pod)
    cid = testbed.run_container(pod, "work", EXCLUSIVE_1CPU)
    cgroup = testbed.cgroup(cid)
    assert cgroup.path == f"/kubepods/burstable/pod{pod.uid}/{cid}"
    assert (cgroup.cpus(), cgroup.quota()) == ("0-1", 100_000)
    reported = plugin.pods()["looks-guaranteed"]
    assert reported["cpu_ids"] == []
    assert reported["containers"][0]["cpu_ids"] == []
