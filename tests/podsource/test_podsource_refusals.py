"""Refused pods move on (API mode): a pod the plugin refuses at admission is marked Failed with
the kubelet's reason and ``Pod was rejected: <message>``, once, so its controller replaces it;
pods that are gone, replaced, terminal or on another node are left alone, and the key
``[kubernetes] fail_refused_pods = false`` turns it off."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from fakekube import FakeKube, kubeconfig_text, manifest_objects
from plrm_daemon import running_daemon

from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.client import load_kube_config, new_client
from nri_plrm.podsource.refusals import REJECTED_PREFIX, RefusedPods
from nri_plrm.translate.manifest_to_pod import derived_uid, load_manifests
from nri_plrm.ttrpc.messages import TtrpcError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NODE = "node-a"
REFUSED = EXAMPLES / "empty-shared-pool.yaml"


def table(kubeconfig: Path, enabled: bool = True) -> str:
    return (
        f'[kubernetes]\nenabled = true\nkubeconfig = "{kubeconfig}"\nnode_name = "{NODE}"\n'
        f"lookup_timeout = 1.0\nfail_refused_pods = {str(enabled).lower()}\n"
    )


def count(metrics: Metrics, result: str) -> float:
    value = metrics.registry.get_sample_value("nri_plrm_refused_pods_total", {"result": result})
    return value or 0.0


async def until(check: Any, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


@pytest.mark.parametrize("enabled", [True, False])
def test_the_daemon_marks_a_refused_pod_failed_once(tmp_path: Path, enabled: bool) -> None:
    (spec,) = load_manifests([REFUSED])

    async def main() -> None:
        fk = await FakeKube().start()
        for obj in manifest_objects(REFUSED.read_text(), NODE, derived_uid):
            fk.add(obj)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(kubeconfig_text(fk.url))
        key = (spec.namespace, spec.name)
        try:
            async with running_daemon(tmp_path, table(kubeconfig, enabled)) as d:
                for _ in range(200):
                    if fk.pods and d.metrics_url:
                        break
                    await asyncio.sleep(0.01)
                for _ in range(2):  # the kubelet retries RunPodSandbox
                    with pytest.raises(TtrpcError):
                        await d.runtime.run_pod(spec)
                await until(lambda: len(fk.events) >= 1)
                if enabled:
                    await until(lambda: fk.pods[key].get("status", {}).get("phase") == "Failed")
                else:
                    await asyncio.sleep(0.3)
        finally:
            await fk.stop()
        patches = [r for r in fk.requests if r.method == "PATCH"]
        status = fk.pods[key].get("status", {})
        if not enabled:
            assert patches == [] and status.get("phase") != "Failed"
            return
        assert len(patches) == 1
        assert status["reason"] == "TopologyAffinityError"
        assert status["message"].startswith(REJECTED_PREFIX)
        assert status["message"] == REJECTED_PREFIX + fk.events[0]["message"]
        assert patches[0].body["metadata"]["uid"] == spec.uid

    asyncio.run(main())


def pod_object(**changes: Any) -> dict[str, Any]:
    (obj,) = manifest_objects(REFUSED.read_text(), NODE, derived_uid)
    obj = copy.deepcopy(obj)
    for path, value in changes.items():
        target = obj
        *parents, last = path.split("__")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return obj


@pytest.mark.parametrize(
    ("changes", "result"),
    [
        ({}, "failed"),
        ({"status__phase": "Succeeded"}, "terminal"),
        ({"spec__nodeName": "node-b"}, "other_node"),
        ({"metadata__uid": "a-replacement"}, "gone"),
        (None, "gone"),
    ],
)
def test_only_this_nodes_live_pod_of_that_uid_is_patched(
    tmp_path: Path, changes: dict[str, Any] | None, result: str
) -> None:
    (spec,) = load_manifests([REFUSED])
    metrics = Metrics()

    async def main() -> None:
        fk = await FakeKube().start()
        if changes is not None:
            fk.add(pod_object(**changes))
        path = tmp_path / "kubeconfig"
        path.write_text(kubeconfig_text(fk.url))
        refused = RefusedPods(new_client(load_kube_config(str(path))), NODE, metrics=metrics)
        refused.start()
        refused.record(spec.uid, spec.namespace, spec.name, "TopologyAffinityError", "m")
        refused.record(spec.uid, spec.namespace, spec.name, "TopologyAffinityError", "m")
        await refused.drain()
        await refused.stop()
        await fk.stop()
        patched = [r for r in fk.requests if r.method == "PATCH"]
        assert len(patched) == (1 if result == "failed" else 0)

    asyncio.run(main())
    assert count(metrics, result) == 1
    assert sum(count(metrics, r) for r in ("failed", "gone", "terminal", "other_node")) == 1
