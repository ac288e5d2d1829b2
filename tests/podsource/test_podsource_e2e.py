"""Whole-pod admission fed by the API pod cache, end to end: the seed manifests served by the
fake API server, NRI messages from the same manifests sent by the runtime simulator over a unix
socket to the plugin behind the wire stub (issue 8 acceptance)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakekube import FakeKube, free_port, kubeconfig_text, manifest_objects
from plrm_harness import Session, serve

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import TOPOLOGY_AFFINITY_ERROR, AdmissionError, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podsource.client import load_kube_config, new_client, new_pod_api
from nri_plrm.podsource.events import EventRecorder
from nri_plrm.podsource.kube import Backoff, KubePodCache
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.manifest_to_pod import derived_uid, load_manifests
from nri_plrm.ttrpc.messages import TtrpcError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
CONTAINER_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "container"\n'
POLICY_NONE = '[topology_manager]\npolicy = "none"\n'
NODE = "node-a"
LOGGER = "test.podsource.e2e"


def manifest(name: str) -> PodSpec:
    (pod,) = load_manifests([EXAMPLES / f"{name}.yaml"])
    return pod


def api_objects(name: str) -> list[dict[str, object]]:
    return manifest_objects((EXAMPLES / f"{name}.yaml").read_text(), NODE, derived_uid)


def new_engine(config_text: str) -> Engine:
    return Engine(MACHINES["default"], parse_config(config_text).engine_config())


def fallbacks(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "nri_plrm_pod_cache_fallbacks_total", {"reason": reason}
    )
    return value or 0.0


@dataclass
class World:
    session: Session
    plugin: Plugin
    kube: FakeKube
    cache: KubePodCache
    events: EventRecorder
    metrics: Metrics


def run(
    tmp_path: Path,
    config_text: str,
    seed: list[str],
    body: Callable[[World], Awaitable[None]],
    *,
    api_up: bool = True,
    metrics: Metrics | None = None,
) -> Plugin:
    metrics = metrics or Metrics()

    async def main() -> None:
        fk = FakeKube(free_port())
        for name in seed:
            for obj in api_objects(name):
                fk.add(obj)
        if api_up:
            await fk.start()
        path = tmp_path / "kubeconfig"
        path.write_text(kubeconfig_text(fk.url))
        client = new_client(load_kube_config(str(path)))
        log = logging.getLogger(LOGGER)
        cache = KubePodCache(
            new_pod_api(load_kube_config(str(path))),
            NODE,
            metrics=metrics,
            logger=log,
            server=fk.url,
            backoff=Backoff(0.01, 0.05),
        )
        events = EventRecorder(client, NODE, metrics=metrics, logger=log)
        plugin = Plugin(
            NodeLedger(
                new_engine(config_text), store=CheckpointStore(tmp_path / "state"), observer=metrics
            ),
            pod_specs=cache,
            events=events,
            metrics=metrics,
            lookup_timeout=1.0,
        )
        cache.start()
        events.start()
        if api_up:
            assert await cache.wait_synced(5)
        try:
            async with serve(plugin, str(tmp_path / "nri.sock")) as session:
                await body(World(session, plugin, fk, cache, events, metrics))
        finally:
            await events.stop()
            await cache.stop()
            await fk.stop()
        assert plugin.ledger.engine.verify() == []
        state["plugin"] = plugin

    state: dict[str, Plugin] = {}
    asyncio.run(main())
    return state["plugin"]


def kubelet_rejection(config_text: str, spec: PodSpec) -> AdmissionError:
    with pytest.raises(AdmissionError) as err:
        new_engine(config_text).admit_pod(spec)
    return err.value


def test_empty_shared_pool_is_refused_at_sandbox_creation_with_an_event(tmp_path: Path) -> None:
    spec = manifest("empty-shared-pool")
    want = kubelet_rejection(POD_SCOPE, spec)
    assert want.reason == TOPOLOGY_AFFINITY_ERROR

    async def body(w: World) -> None:
        rt = w.session.runtime
        free_before = w.plugin.ledger.engine.node_shared_pool()
        with pytest.raises(TtrpcError) as err:
            await rt.run_pod(spec)
        assert f"{want.reason}: {want.message}" in str(err.value)
        assert w.plugin.ledger.engine.node_shared_pool() == free_before
        assert w.plugin.ledger.engine.pod_cpus(spec.uid) is None
        assert w.plugin.ledger.pods() == ()
        await w.events.drain()
        (event,) = w.kube.events
        assert event["reason"] == want.reason
        assert event["message"] == (
            f"{want.message}; cause: exclusive containers request 4 CPUs = pod budget 4 CPUs, "
            "nothing left for the 1 shared container (logging-sidecar)"
        )
        assert event["type"] == "Warning"
        assert event["involvedObject"]["uid"] == spec.uid
        assert event["involvedObject"]["name"] == "empty-shared-pool"
        assert event["metadata"]["namespace"] == "plrm-tutorial"
        assert event["source"] == {"component": "nri-plrm", "host": NODE}
        assert fallbacks(w.metrics, "not_found") == fallbacks(w.metrics, "unavailable") == 0

    run(tmp_path, POD_SCOPE, ["empty-shared-pool"], body)


@pytest.mark.parametrize(
    ("name", "config_text"),
    [
        ("pod-scope-mixed", POD_SCOPE),
        ("tightly-coupled-database", POD_SCOPE),
        ("ml-workload", CONTAINER_SCOPE),
        ("container-scope-mixed", CONTAINER_SCOPE),
        ("pod-scope-mixed", POLICY_NONE),
        ("empty-shared-pool", POLICY_NONE),
        ("tightly-coupled-database", POLICY_NONE),
    ],
)
def test_seed_pods_get_the_kubelets_cpusets(tmp_path: Path, name: str, config_text: str) -> None:
    spec = manifest(name)
    want = new_engine(config_text)
    want.admit_pod(spec)

    async def body(w: World) -> None:
        rt = w.session.runtime
        pod = await rt.launch(spec)
        for c in spec.all_containers():
            expected = want.assignment(spec.uid, c.name)
            assert expected is not None
            assert rt.cpus_of(pod, c.name) == expected.cpus, c.name
            applied = rt.applied(pod, c.name)
            assert (applied.quota == -1) == expected.exclusive, c.name
        (view,) = w.plugin.ledger.pods()
        assert all(c.kind is not None for c in view.containers)  # decided from the full spec
        assert view.cpus == (want.pod_cpus(spec.uid) or CPUSet())
        assert w.kube.events == []

    run(tmp_path, config_text, [name], body)


def test_a_pod_reaching_the_cache_during_the_lookup_is_waited_for(tmp_path: Path) -> None:
    spec = manifest("pod-scope-mixed")
    want = new_engine(POD_SCOPE)
    want.admit_pod(spec)

    async def body(w: World) -> None:
        rt = w.session.runtime

        async def publish() -> None:
            await asyncio.sleep(0.05)
            for obj in api_objects("pod-scope-mixed"):
                w.kube.add(obj)

        publisher = asyncio.ensure_future(publish())
        pod = await rt.launch(spec)
        await publisher
        for c in spec.all_containers():
            expected = want.assignment(spec.uid, c.name)
            assert expected is not None and rt.cpus_of(pod, c.name) == expected.cpus
        (view,) = w.plugin.ledger.pods()
        assert all(c.kind is not None for c in view.containers)
        assert fallbacks(w.metrics, "not_found") == 0

    run(tmp_path, POD_SCOPE, [], body)


def test_api_unreachable_keeps_nri_only_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    metrics = Metrics()
    mixed = manifest("pod-scope-mixed")
    empty = manifest("empty-shared-pool")
    want = new_engine(POD_SCOPE)
    want.admit_pod(mixed)

    async def body(w: World) -> None:
        rt = w.session.runtime
        pod = await rt.launch(mixed)
        for c in mixed.all_containers():
            expected = want.assignment(mixed.uid, c.name)
            assert expected is not None and rt.cpus_of(pod, c.name) == expected.cpus
        (view,) = w.plugin.ledger.pods()
        assert all(c.kind is None for c in view.containers)  # inferred from NRI data
        # NRI-only: the empty pool is only seen when main-app is created.
        bad = await rt.run_pod(empty)
        for ctr in empty.init_containers:
            await rt.create(bad, empty, ctr)
        with pytest.raises(TtrpcError) as err:
            await rt.create(bad, empty, empty.containers[0])
        assert "EmptyPodSharedPoolError" in str(err.value)
        await rt.remove_pod(bad)
        await rt.settle()
        assert not w.cache.available
        assert metrics.registry.get_sample_value("nri_plrm_pod_cache_available") == 0
        assert fallbacks(metrics, "unavailable") == 2
        await w.events.drain()

    run(tmp_path, POD_SCOPE, ["pod-scope-mixed"], body, api_up=False, metrics=metrics)
    outage = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(outage) == 1 and outage[0].levelno == logging.WARNING
    failed = metrics.registry.get_sample_value(
        "nri_plrm_kubernetes_events_total", {"result": "failed"}
    )
    assert failed == 1  # the CreateContainer rejection's Event could not be posted
