"""Which NRI calls carry the pod and container lifecycle on each containerd build: the legacy
``StateChange`` on v2.1.9 (NRI v0.8.0), one RPC per event on 2.4-dev (NRI v0.12.2). Either way
a removal gives the CPUs back."""

from __future__ import annotations

import pytest
from containerd_kit import EXCLUSIVE_1CPU, MIB, PluginProcess, Pod, Testbed

pytestmark = pytest.mark.containerd

LEGACY = ("RunPodSandbox", "PostStartContainer", "RemoveContainer", "RemovePodSandbox")
"""The subscribed events that v2.1.9 sends only as StateChange (StopContainer has its RPC)."""


def handled(plugin: PluginProcess) -> dict[str, float]:
    """NRI requests the plugin answered, by event."""
    samples = plugin.metric("nri_plrm_nri_request_duration_seconds_count")
    return {dict(labels)["event"]: count for labels, count in samples.items()}


def test_lifecycle_events_on_each_build(testbed: Testbed, plugin: PluginProcess) -> None:
    best_effort = Pod("best-effort", "besteffort")
    testbed.run_pod(best_effort)
    shared = testbed.run_container(best_effort, "work", best_effort.inherited())
    exclusive = Pod("exclusive", "guaranteed", budget=(1000, 64 * MIB))
    testbed.run_pod(exclusive)
    testbed.run_container(exclusive, "work", EXCLUSIVE_1CPU)
    testbed.follows(shared, "0")
    testbed.remove_pod(exclusive)
    testbed.follows(shared, "0-1")
    events = handled(plugin)
    assert events.get("CreateContainer") == 2
    assert events.get("StopContainer") == 1
    if testbed.version == "2.1":
        assert events.get("StateChange") == 6  # 2 sandboxes, 2 starts, a container, a pod
        assert not set(LEGACY) & set(events), events
    else:
        assert "StateChange" not in events
        assert [events.get(name) for name in LEGACY] == [2, 2, 1, 1], events
