"""The plugin's death and containerd's restart on real containerd: running containers keep
their cpusets, what started meanwhile is placed at Synchronize, events flow again after a
reconnect."""

from __future__ import annotations

import time

import pytest
from containerd_kit import EXCLUSIVE_1CPU, MIB, PluginProcess, Pod, Testbed, linux_resources

pytestmark = pytest.mark.containerd


def placed(bed: Testbed, cids: dict[str, str]) -> dict[str, tuple[str, str, int]]:
    """cpus, mems and quota of each named container, from its cgroup."""
    out = {}
    for name, cid in cids.items():
        cgroup = bed.cgroup(cid)
        out[name] = (cgroup.cpus(), cgroup.mems(), cgroup.quota())
    return out


def node_with_two_kinds(bed: Testbed) -> dict[str, str]:
    """A best-effort pod and a 1-CPU exclusive pod, running; their container ids by name."""
    best_effort = Pod("best-effort", "besteffort")
    bed.run_pod(best_effort)
    exclusive = Pod("exclusive", "guaranteed", budget=(1000, 64 * MIB))
    bed.run_pod(exclusive)
    return {
        "shared": bed.run_container(best_effort, "work", best_effort.inherited()),
        "pinned": bed.run_container(exclusive, "work", EXCLUSIVE_1CPU),
    }


EXPECTED = {"shared": ("0", "0", -1), "pinned": ("1", "0", -1)}
"""What the kernel holds for ``node_with_two_kinds`` with the plugin (BestEffort: no quota)."""


def test_sigkill_and_restart_keep_every_cpuset(testbed: Testbed, plugin: PluginProcess) -> None:
    cids = node_with_two_kinds(testbed)
    testbed.follows(cids["shared"], "0")
    assert placed(testbed, cids) == EXPECTED
    before = plugin.pods()
    plugin.kill()
    assert placed(testbed, cids) == EXPECTED
    plugin.start()
    assert placed(testbed, cids) == EXPECTED
    assert plugin.pods() == before
    time.sleep(1.5)  # longer than any delayed pool update: nothing moves afterwards either
    assert placed(testbed, cids) == EXPECTED
    plugin.wait_logged("synchronized 2 pods and 2 containers")
    summary = next(line for line in plugin.tail().splitlines() if "synchronized 2 pods" in line)
    assert summary.endswith("0 placed, 0 in the node shared pool, 0 updates")


def test_pods_started_while_the_plugin_was_down(testbed: Testbed, plugin: PluginProcess) -> None:
    """containerd creates them unadjusted (every CPU, the kubelet's quota); Synchronize places
    them: the exclusive container on its own CPU without quota, the best-effort one off it."""
    plugin.kill()
    cids = node_with_two_kinds(testbed)
    assert placed(testbed, cids) == {"shared": ("0-1", "0", -1), "pinned": ("0-1", "0", 100_000)}
    plugin.start()
    testbed.follows(cids["shared"], "0")
    assert placed(testbed, cids) == EXPECTED
    reported = plugin.pods()
    assert reported["exclusive"]["containers"][0]["cpu_ids"] == [1]  # type: ignore[index]


def test_containerd_restart_under_the_plugin(testbed: Testbed, plugin: PluginProcess) -> None:
    """The plugin reconnects when containerd comes back, keeps every cpuset, and handles the
    events that follow."""
    cids = node_with_two_kinds(testbed)
    testbed.follows(cids["shared"], "0")
    registered = plugin.registrations()
    testbed.restart()
    plugin.wait_registered(registered)
    assert placed(testbed, cids) == EXPECTED
    late = Pod("late", "burstable")
    testbed.run_pod(late)
    burstable = testbed.run_container(late, "work", linux_resources(250, 500, 32 * MIB))
    assert testbed.cgroup(burstable).cpus() == "0"
    exclusive = next(pod for pod in testbed.pods if pod.name == "exclusive")
    testbed.remove_pod(exclusive)
    testbed.follows(cids["shared"], "0-1")
    testbed.follows(burstable, "0-1")
