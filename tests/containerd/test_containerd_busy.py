"""A busy node on real containerd: 100 BestEffort pods run while an exclusive container starts.
The pod start carries no update of another pod's container; every shared container leaves the
exclusive CPU within the isolation bound, through the kubelet's CRI path, with no failure."""

from __future__ import annotations

import time

import pytest
from containerd_kit import (
    EXCLUSIVE_1CPU,
    MIB,
    PluginProcess,
    Pod,
    Testbed,
    all_follow,
    wait_until,
)

pytestmark = pytest.mark.containerd

RUNNING = 100
BOUND = 5.0
"""Seconds within which all 100 shared containers follow the pool (docs/design.md section 3:
``SHRINK_WAIT_MAX`` plus about 15 ms per container on this 2-CPU machine)."""


def test_exclusive_start_beside_100_best_effort_pods(
    testbed: Testbed, plugin: PluginProcess
) -> None:
    shared = [testbed.cgroup(cid) for cid in testbed.run_best_effort_pods(RUNNING)]
    pod = Pod("exclusive", "guaranteed", budget=(1000, 64 * MIB))
    testbed.run_pod(pod)
    start = time.monotonic()
    cid = testbed.run_container(pod, "work", EXCLUSIVE_1CPU)
    returned = time.monotonic()
    started = returned - start
    assert testbed.cgroup(cid).cpus() == "1"
    all_follow(shared, "0", BOUND)
    lag = time.monotonic() - returned
    print(f"containerd {testbed.version}: create+start {started * 1000:.0f} ms, lag {lag:.2f} s")
    plugin.wait_logged("updates of other pods' containers: CRI UpdateContainerResources")
    testbed.remove_pod(pod)
    all_follow(shared, "0-1", BOUND)
    log = plugin.tail(200_000)
    assert "failed" not in log, log

    def observed() -> float:
        return sum(plugin.metric("nri_plrm_pool_update_lag_seconds_count").values())

    # Each container once per change. A lag is observed when containerd's CRI reply reaches
    # the plugin, which can trail the cgroup write that all_follow saw by a few milliseconds.
    wait_until(lambda: observed() >= 2 * RUNNING, BOUND, lambda: f"{observed()} lags\n{log}")
    assert observed() == 2 * RUNNING, log
