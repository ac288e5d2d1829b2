"""``crictl update`` (the kubelet's UpdateContainerResources) on real containerd: a shared
container's resize is performed and keeps its pool, an exclusive one is refused as the kubelet
refuses it and keeps its CPU."""

from __future__ import annotations

import pytest
from containerd_kit import (
    EXCLUSIVE_1CPU,
    MIB,
    KitError,
    PluginProcess,
    Pod,
    Testbed,
    linux_resources,
)

pytestmark = pytest.mark.containerd


def test_shared_container_resize_performed(testbed: Testbed, plugin: PluginProcess) -> None:
    exclusive = Pod("exclusive", "guaranteed", budget=(1000, 64 * MIB))
    testbed.run_pod(exclusive)
    testbed.run_container(exclusive, "work", EXCLUSIVE_1CPU)
    pod = Pod("burstable", "burstable")
    testbed.run_pod(pod)
    cid = testbed.run_container(pod, "work", linux_resources(500, 1000, 64 * MIB))
    cgroup = testbed.cgroup(cid)
    assert (cgroup.cpus(), cgroup.quota()) == ("0", 100_000)
    testbed.crictl(
        "update", "--cpu-period", "100000", "--cpu-quota", "150000", "--cpu-share", "768", cid
    )
    assert (cgroup.cpus(), cgroup.quota()) == ("0", 150_000)
    plugin.wait_logged("container=work cpus=0 mems=- reason=resized, node_shared")


def test_exclusive_container_resize_refused(testbed: Testbed, plugin: PluginProcess) -> None:
    pod = Pod("exclusive", "guaranteed", budget=(1000, 64 * MIB))
    testbed.run_pod(pod)
    cid = testbed.run_container(pod, "work", EXCLUSIVE_1CPU)
    with pytest.raises(KitError) as refused:
        testbed.crictl(
            "update",
            "--cpu-period",
            "100000",
            "--cpu-quota",
            "200000",
            "--cpu-share",
            "2048",
            "--memory",
            str(64 * MIB),
            cid,
        )
    message = str(refused.value).replace("\\", "")  # crictl quotes the runtime's message
    assert (
        'Infeasible: Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'
        in message
    )
    cgroup = testbed.cgroup(cid)
    assert (cgroup.cpus(), cgroup.mems(), cgroup.quota()) == ("1", "0", -1)
