"""``[kubernetes] enabled`` in the real daemon: the pod cache and Events wired, or NRI-only."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import urllib.request
from pathlib import Path

import pytest
from fakekube import FakeKube, free_port, kubeconfig_text, manifest_objects
from plrm_daemon import running_daemon

from nri_plrm.config.settings import KubernetesSettings
from nri_plrm.engine.availability import free_per_numa
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AdmissionError
from nri_plrm.observability.metrics import Metrics
from nri_plrm.podsource.access import open_kubernetes
from nri_plrm.podsource.nrt import nrt_object
from nri_plrm.podsource.nrt_exact_state import exact_attributes, read_published
from nri_plrm.scheduler.decide import NodeModel
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.sysfs import discover
from nri_plrm.translate.manifest_to_pod import derived_uid, load_manifests
from nri_plrm.ttrpc.messages import TtrpcError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NODE = "node-a"


def kubernetes_table(kubeconfig: Path) -> str:
    return (
        f'[kubernetes]\nenabled = true\nkubeconfig = "{kubeconfig}"\nnode_name = "{NODE}"\n'
        "lookup_timeout = 1.0\n"
    )


async def scrape(url: str) -> str:
    def get() -> str:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    return await asyncio.to_thread(get)


async def wait_for_metric(url: str, line: str) -> str:
    for _ in range(200):
        text = await scrape(url)
        if line in text.splitlines():
            return text
        await asyncio.sleep(0.05)
    raise AssertionError(f"{line!r} never appeared in /metrics")


def test_daemon_rejects_at_sandbox_creation_and_posts_the_event(tmp_path: Path) -> None:
    path = EXAMPLES / "empty-shared-pool.yaml"
    (spec,) = load_manifests([path])

    async def main() -> None:
        fk = await FakeKube().start()
        for obj in manifest_objects(path.read_text(), NODE, derived_uid):
            fk.add(obj)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(kubeconfig_text(fk.url))
        try:
            async with running_daemon(tmp_path, kubernetes_table(kubeconfig)) as d:
                await wait_for_metric(d.metrics_url, "nri_plrm_pod_cache_available 1.0")
                with pytest.raises(TtrpcError) as err:
                    await d.runtime.run_pod(spec)
                assert "TopologyAffinityError" in str(err.value)
                for _ in range(200):
                    if fk.events:
                        break
                    await asyncio.sleep(0.02)
                (event,) = fk.events
                assert event["reason"] == "TopologyAffinityError"
                assert event["involvedObject"]["uid"] == spec.uid
                text = await scrape(d.metrics_url)
                assert 'nri_plrm_kubernetes_events_total{result="posted"} 1.0' in text
        finally:
            await fk.stop()

    asyncio.run(main())


def test_daemon_without_the_api_runs_nri_only(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = EXAMPLES / "pod-scope-mixed.yaml"
    (spec,) = load_manifests([path])

    async def main() -> None:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(kubeconfig_text(f"http://127.0.0.1:{free_port()}"))
        async with running_daemon(tmp_path, kubernetes_table(kubeconfig)) as d:
            pod = await d.runtime.launch(spec)
            assert len(d.runtime.cpus_of(pod, "main-app")) == 2
            text = await scrape(d.metrics_url)
            assert "nri_plrm_pod_cache_available 0.0" in text.splitlines()
            assert 'nri_plrm_pod_cache_fallbacks_total{reason="unavailable"} 1.0' in text

    asyncio.run(main())
    logged = capfd.readouterr().err  # the daemon logs to stderr
    assert logged.count("Kubernetes API unreachable") == 1, logged


def test_open_kubernetes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert open_kubernetes(KubernetesSettings()) is None
    metrics = Metrics()
    missing = KubernetesSettings(enabled=True, kubeconfig=str(tmp_path / "nope"), node_name="n")
    with caplog.at_level(logging.ERROR):
        assert open_kubernetes(missing, metrics) is None
    assert any("deciding from NRI data only" in r.getMessage() for r in caplog.records)
    assert metrics.registry.get_sample_value("nri_plrm_pod_cache_available") == 0
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text("http://127.0.0.1:1"))
    access = open_kubernetes(KubernetesSettings(enabled=True, kubeconfig=str(kubeconfig)))
    assert access is not None
    assert access.cache.server == "http://127.0.0.1:1"
    assert access.client is access.events.client
    assert str(access.cache.api.http.base_url).startswith("http://127.0.0.1:1")
    assert access.topology is None  # node_resource_topology off
    asyncio.run(access.stop())
    settings = KubernetesSettings(
        enabled=True, kubeconfig=str(kubeconfig), node_name="n", node_resource_topology=True
    )
    access = open_kubernetes(settings, topology=MACHINES["default"])
    assert access is not None and access.topology is not None
    assert access.topology.client is access.client
    assert (access.topology.policy, access.topology.scope) == ("single-numa-node", "pod")
    asyncio.run(access.stop())


def test_daemon_publishes_the_node_resource_topology(tmp_path: Path) -> None:
    """The real daemon on a fake sysfs: the object appears at start, follows an admission
    with the numbers of an engine that admitted the same pod, and its zone costs are the
    sysfs distance table."""
    path = EXAMPLES / "pod-scope-mixed.yaml"
    (spec,) = load_manifests([path])

    async def main() -> None:
        fk = await FakeKube().start()
        uid = fk.add_node(NODE)["metadata"]["uid"]
        for obj in manifest_objects(path.read_text(), NODE, derived_uid):
            fk.add(obj)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(kubeconfig_text(fk.url))
        table = kubernetes_table(kubeconfig) + "node_resource_topology = true\n"
        try:
            async with running_daemon(tmp_path, table) as d:
                topology = discover(d.config.topology.sysfs_root)
                want = Engine(topology, d.config.engine_config())
                admitted: list[tuple[str, str]] = []

                def expected() -> dict[str, object]:
                    tm = d.config.topology_manager
                    free = free_per_numa(want)
                    return nrt_object(
                        NODE,
                        uid,
                        free,
                        topology,
                        tm.policy,
                        tm.scope,
                        admitted,
                        None,
                        exact_attributes(want),
                    )

                def published() -> dict[str, object] | None:
                    obj = fk.nrts.get(NODE)
                    if obj is None:
                        return None
                    meta = {
                        k: v
                        for k, v in obj["metadata"].items()
                        if k not in ("resourceVersion", "uid")
                    }
                    return {**obj, "metadata": meta}

                async def until_published() -> None:
                    for _ in range(300):
                        if published() == expected():
                            return
                        await asyncio.sleep(0.02)
                    raise AssertionError(f"published {published()}, expected {expected()}")

                await until_published()
                await wait_for_metric(d.metrics_url, "nri_plrm_pod_cache_available 1.0")
                await d.runtime.launch(spec)
                want.admit_pod(spec)
                admitted.append((spec.namespace, spec.name))
                await until_published()
                sysfs = Path(d.config.topology.sysfs_root) / "devices/system/node"
                for zone in fk.nrts[NODE]["zones"]:
                    row = (sysfs / zone["name"].replace("-", "") / "distance").read_text()
                    assert [c["value"] for c in zone["costs"]] == [int(x) for x in row.split()]
                # the exact state reads back to the daemon's engine: the extender decides the
                # next pod as the daemon's engine does
                model = NodeModel(read_published(fk.nrts[NODE]))
                again = dataclasses.replace(spec, uid="second", name="second")
                verdict = model.decide(again)
                try:
                    want.admit_pod(again)
                    assert verdict.admit
                except AdmissionError as err:
                    assert (verdict.reason, verdict.message) == (err.reason, err.message)
                text = await scrape(d.metrics_url)
                assert 'nri_plrm_node_resource_topology_writes_total{result="failed"} 0.0' in text
        finally:
            await fk.stop()

    asyncio.run(main())
