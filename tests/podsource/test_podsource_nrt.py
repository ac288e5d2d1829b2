"""The NodeResourceTopology export against the fake API server: the object after admissions,
releases and a restart (equal to the engine's free resources per NUMA node), the write rate
limit, recovery after 404/409/410 and after an outage, and every written object checked
against the chart's CRD schema."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from crd_schema import crd_schema, validate
from fakekube import FakeKube, free_port, kubeconfig_text, manifest_objects
from plrm_harness import serve

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.cli.simulate import simulate_pods
from nri_plrm.config.file import parse_config
from nri_plrm.engine.availability import NumaAvailability, free_per_numa
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podsource.client import load_kube_config, new_client, new_pod_api
from nri_plrm.podsource.fingerprint import fingerprint
from nri_plrm.podsource.kube import Backoff, KubePodCache
from nri_plrm.podsource.nrt import (
    NodeTopologyExporter,
    legacy_policy,
    nrt_object,
)
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.synthetic import synthetic_topology
from nri_plrm.translate.manifest_to_pod import derived_uid, load_manifests, parse_manifests

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CRD = REPO / "packaging" / "helm" / "nri-plrm" / "crds" / "noderesourcetopologies.yaml"
SCHEMA = crd_schema(CRD, "v1alpha2")
POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
NODE = "node-a"
LOGGER = "test.podsource.nrt"
SEEDS = ("pod-scope-mixed", "tightly-coupled-database", "classic-guaranteed")


def manifest(name: str) -> PodSpec:
    (pod,) = load_manifests([EXAMPLES / f"{name}.yaml"])
    return pod


def small_pod(name: str) -> PodSpec:
    res = '{cpu: "1", memory: "64Mi"}'
    text = (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n"
        f"spec:\n  containers:\n  - name: app\n    resources:\n"
        f"      requests: {res}\n      limits: {res}\n"
    )
    (pod,) = parse_manifests(text)
    return pod


def new_engine() -> Engine:
    return Engine(MACHINES["default"], parse_config(POD_SCOPE).engine_config())


def expected_object(
    free: tuple[NumaAvailability, ...], uid: str, pods: Iterable[str] = ()
) -> dict[str, Any]:
    """The object for ``free`` with the fingerprint of the named example pods."""
    names = [(manifest(n).namespace, manifest(n).name) for n in pods]
    return nrt_object(NODE, uid, free, MACHINES["default"], "single-numa-node", "pod", names)


def published(fk: FakeKube) -> dict[str, Any]:
    """The stored object without the server's metadata."""
    obj = dict(fk.nrts[NODE])
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "uid")}
    return {**obj, "metadata": meta}


def assert_every_write_valid(fk: FakeKube) -> None:
    assert fk.nrt_writes
    for write in fk.nrt_writes:
        assert validate(write.body, SCHEMA) == [], write.method


def writes(metrics: Metrics, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "nri_plrm_node_resource_topology_writes_total", {"result": result}
    )
    return value or 0.0


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def exporter_for(
    fk_url: str, tmp_path: Path, metrics: Metrics, interval: float
) -> NodeTopologyExporter:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(fk_url))
    return NodeTopologyExporter(
        new_client(load_kube_config(str(path))),
        NODE,
        MACHINES["default"],
        "single-numa-node",
        "pod",
        metrics=metrics,
        logger=logging.getLogger(LOGGER),
        interval=interval,
        backoff=Backoff(0.02, 0.1),
    )


# ----------------------------------------------------------------- the object


def test_object_layout_names_zones_costs_and_attributes() -> None:
    topology = synthetic_topology(
        "sockets=2,numa_per_socket=1,cores_per_numa=4,threads_per_core=2,"
        "memory_per_numa=16Gi,hugepages_2Mi_per_numa=512,hugepages_1Gi_per_numa=2"
    )
    e = Engine(topology, parse_config(POD_SCOPE).engine_config())
    obj = nrt_object(NODE, "uid-1", free_per_numa(e), topology, "single-numa-node", "pod")
    assert validate(obj, SCHEMA) == []
    assert obj["apiVersion"] == "topology.node.k8s.io/v1alpha2"
    assert obj["kind"] == "NodeResourceTopology"
    assert obj["metadata"]["name"] == NODE
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "uid-1"}
    ]
    assert obj["attributes"] == [
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "pod"},
        # XXH64 of no input: no pod on the node yet
        {"name": "nodeTopologyPodsFingerprint", "value": "pfp0v001ef46db3751d8e999"},
        {"name": "nodeTopologyPodsFingerprintMethod", "value": "all"},
    ]
    limited = nrt_object(
        NODE, "u", free_per_numa(e), topology, "single-numa-node", "pod", (), max_numa_nodes=16
    )
    assert validate(limited, SCHEMA) == []
    assert {"name": "topologyManagerMaxNUMANodes", "value": "16"} in limited["attributes"]
    assert obj["topologyPolicies"] == ["SingleNUMANodePodLevel"]
    zone0, zone1 = obj["zones"]
    assert (zone0["name"], zone0["type"], zone1["name"]) == ("node-0", "Node", "node-1")
    assert zone0["costs"] == [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 21}]
    assert [r["name"] for r in zone1["resources"]] == [
        "cpu",
        "memory",
        "hugepages-1Gi",
        "hugepages-2Mi",
    ]
    assert zone0["resources"][0] == {
        "name": "cpu",
        "capacity": "8",
        "allocatable": "7",
        "available": "7",
    }
    assert zone1["resources"][2] == {
        "name": "hugepages-1Gi",
        "capacity": str(2 << 30),
        "allocatable": str(2 << 30),
        "available": str(2 << 30),
    }


def test_costs_follow_the_distance_table() -> None:
    topology = MACHINES["default"]  # 2 sockets x 2 nodes: 10 local, 11 same socket, 21 remote
    obj = nrt_object(NODE, "u", free_per_numa(new_engine()), topology, "single-numa-node", "pod")
    for zone in obj["zones"]:
        a = int(zone["name"].split("-")[1])
        assert zone["costs"] == [
            {"name": f"node-{b}", "value": topology.distance(a, b)} for b in topology.numa_ids
        ]
    assert {c["value"] for c in obj["zones"][0]["costs"]} == {10, 11, 21}


@pytest.mark.parametrize(
    ("policy", "scope", "legacy"),
    [
        ("single-numa-node", "pod", "SingleNUMANodePodLevel"),
        ("single-numa-node", "container", "SingleNUMANodeContainerLevel"),
        ("restricted", "pod", "RestrictedPodLevel"),
        ("restricted", "container", "RestrictedContainerLevel"),
        ("best-effort", "pod", "BestEffortPodLevel"),
        ("best-effort", "container", "BestEffortContainerLevel"),
        ("none", "container", "None"),
    ],
)
def test_deprecated_topology_policies_value(policy: str, scope: str, legacy: str) -> None:
    assert legacy_policy(policy, scope) == legacy


def test_validator_catches_what_the_api_server_would_refuse() -> None:
    good = expected_object(free_per_numa(new_engine()), "u")
    assert validate(good, SCHEMA) == []
    bad_quantity = {**good, "zones": [dict(good["zones"][0])]}
    bad_quantity["zones"][0]["resources"] = [{**good["zones"][0]["resources"][0]}]
    bad_quantity["zones"][0]["resources"][0]["available"] = "7 cpus"
    assert any("does not match" in p for p in validate(bad_quantity, SCHEMA))
    no_zones = {k: v for k, v in good.items() if k != "zones"}
    assert validate(no_zones, SCHEMA) == ["<root>: required field 'zones' missing"]
    pruned = {**good, "spec": {}}
    assert validate(pruned, SCHEMA) == [".spec: not in the schema (pruned)"]


# ----------------------------------------------------------------- with the plugin


async def start_plugin(
    fk: FakeKube, tmp_path: Path, metrics: Metrics, interval: float
) -> tuple[Plugin, KubePodCache, NodeTopologyExporter]:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(fk.url))
    log = logging.getLogger(LOGGER)
    cache = KubePodCache(
        new_pod_api(load_kube_config(str(path))),
        NODE,
        metrics=metrics,
        logger=log,
        backoff=Backoff(0.01, 0.05),
    )
    exporter = exporter_for(fk.url, tmp_path, metrics, interval)
    plugin = Plugin(
        NodeLedger(
            new_engine(),
            store=CheckpointStore(tmp_path / "state"),
            observer=metrics,
            on_change=exporter.mark_dirty,
        ),
        pod_specs=cache,
        metrics=metrics,
        lookup_timeout=1.0,
    )
    plugin.ledger.open()
    exporter.attach(
        lambda: free_per_numa(plugin.ledger.engine),
        lambda: ((p.namespace, p.name) for p in plugin.ledger.pods()),
    )
    cache.start()
    exporter.start()
    assert await cache.wait_synced(5)
    return plugin, cache, exporter


def test_object_after_admissions_releases_and_a_restart(tmp_path: Path) -> None:
    metrics = Metrics()
    want = new_engine()
    simulated = simulate_pods(
        [manifest(n) for n in SEEDS], MACHINES["default"], parse_config(POD_SCOPE)
    )

    async def main() -> None:
        fk = FakeKube(free_port())
        node = fk.add_node(NODE)
        uid = node["metadata"]["uid"]
        for name in SEEDS:
            for obj in manifest_objects((EXAMPLES / f"{name}.yaml").read_text(), NODE, derived_uid):
                fk.add(obj)
        await fk.start()
        plugin, cache, exporter = await start_plugin(fk, tmp_path, metrics, 0.2)
        await exporter.settled()
        assert published(fk) == expected_object(free_per_numa(want), uid)  # empty node
        async with serve(plugin, str(tmp_path / "nri.sock")) as session:
            rt = session.runtime
            pods = {}
            for name in SEEDS:
                pods[name] = await rt.launch(manifest(name))
                want.admit_pod(manifest(name))
                await rt.settle()
                await exporter.settled()
                have = list(pods)
                assert published(fk) == expected_object(free_per_numa(want), uid, have), name
                assert free_per_numa(plugin.ledger.engine) == free_per_numa(want)
            # the numbers `simulate` prints for the same pods
            assert published(fk) == expected_object(simulated.free, uid, SEEDS)
            await rt.remove_pod(pods["tightly-coupled-database"])
            want.remove_pod(manifest("tightly-coupled-database").uid)
            await rt.settle()
            await exporter.settled()
            left = [n for n in SEEDS if n != "tightly-coupled-database"]
            assert published(fk) == expected_object(free_per_numa(want), uid, left)
            running = rt.sync_lists()
        await exporter.stop()
        await cache.stop()
        written_before_restart = len(fk.nrt_writes)

        # restart: a new plugin restored from the checkpoint, a new exporter
        plugin2, cache2, exporter2 = await start_plugin(fk, tmp_path, metrics, 0.2)
        async with serve(
            plugin2,
            str(tmp_path / "nri2.sock"),
            pods=running[0],
            containers=running[1],
            runtime=rt,
        ):
            await rt.settle()
            await exporter2.settled()
            assert published(fk) == expected_object(free_per_numa(want), uid, left)
            assert free_per_numa(plugin2.ledger.engine) == free_per_numa(want)
        # the restarted exporter read the object back and found it current: no write
        assert len(fk.nrt_writes) == written_before_restart
        await exporter2.stop()
        await cache2.stop()
        await fk.stop()
        assert_every_write_valid(fk)
        assert fk.nrt_writes[0].method == "POST"
        assert {w.method for w in fk.nrt_writes[1:]} == {"PUT"}

    asyncio.run(main())


# ----------------------------------------------------------------- rate limit


async def exporter_on_fake_kube(
    tmp_path: Path, metrics: Metrics, interval: float, engine: Engine
) -> tuple[FakeKube, str, NodeTopologyExporter]:
    """A fake API server with the node, and an exporter of ``engine``'s free resources that
    has written its first object; the server, the Node's uid and the exporter."""
    fk = FakeKube(free_port())
    uid = str(fk.add_node(NODE)["metadata"]["uid"])
    await fk.start()
    exporter = exporter_for(fk.url, tmp_path, metrics, interval)
    exporter.attach(lambda: free_per_numa(engine))
    exporter.start()
    await exporter.settled()
    return fk, uid, exporter


def test_a_burst_of_50_changes_is_written_at_most_twice_per_second(tmp_path: Path) -> None:
    metrics = Metrics()
    figures: dict[str, float] = {}

    async def main() -> None:
        engine = new_engine()
        fk, uid, exporter = await exporter_on_fake_kube(tmp_path, metrics, 1.0, engine)
        await asyncio.sleep(1.1)  # a quiet second: the next change is written at once
        start = len(fk.nrt_writes)
        burst_start = time.monotonic()
        for i in range(50):
            engine.admit_pod(small_pod(f"p{i}"))
            exporter.mark_dirty()
            await asyncio.sleep(0.01)
        burst_end = time.monotonic()
        await exporter.settled()
        settled = time.monotonic()
        burst = fk.nrt_writes[start:]
        figures.update(
            burst_seconds=burst_end - burst_start,
            writes=len(burst),
            last_write_after_last_change=burst[-1].at - burst_end,
            settled_after_last_change=settled - burst_end,
        )
        assert published(fk) == expected_object(free_per_numa(engine), uid)
        await exporter.stop()
        await fk.stop()
        assert_every_write_valid(fk)
        gaps = [b.at - a.at for a, b in itertools.pairwise(burst)]
        figures["min_gap"] = min(gaps) if gaps else 0.0
        print("nrt burst figures:", {k: round(v, 3) for k, v in figures.items()})
        # one write at once, then at most one per interval while the burst lasts and one
        # after it (a burst slowed by a loaded machine spans more intervals)
        assert len(burst) <= 2 + int(figures["burst_seconds"] / 1.0)
        assert all(gap >= 0.95 for gap in gaps)
        # published within the interval (plus scheduling slack on a loaded machine)
        assert figures["last_write_after_last_change"] <= 1.0 + 0.3

    asyncio.run(main())


# ----------------------------------------------------------------- other writers


def test_another_writer_is_warned_once_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """NFD's topology-updater writing the same object shows in its managedFields; the plugin
    writes as field manager ``nri-plrm`` and publishes its pods' fingerprint."""
    metrics = Metrics()

    async def main() -> None:
        engine = new_engine()
        fk = FakeKube(free_port())
        fk.add_node(NODE)
        await fk.start()
        fk.rv += 1
        fk.nrts[NODE] = {
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {
                "name": NODE,
                "resourceVersion": str(fk.rv),
                "managedFields": [
                    {"manager": "nfd-topology-updater", "operation": "Update"},
                    {"manager": "nri-plrm", "operation": "Update"},
                ],
            },
            "zones": [],
        }
        exporter = exporter_for(fk.url, tmp_path, metrics, 0.05)
        exporter.attach(lambda: free_per_numa(engine), lambda: [("default", "a")])
        exporter.start()
        await exporter.settled()
        fk.nrts[NODE]["metadata"]["managedFields"] = [{"manager": "nfd-topology-updater"}]
        fk.nrt_fail_next = [409]  # a conflict makes it read the object again
        engine.admit_pod(small_pod("b"))
        exporter.mark_dirty()
        await exporter.settled()
        await exporter.stop()
        await fk.stop()
        assert writes(metrics, "foreign_writer") == 1
        attributes = {a["name"]: a["value"] for a in fk.nrts[NODE]["attributes"]}
        assert attributes["nodeTopologyPodsFingerprint"] == fingerprint([("default", "a")])
        managers = {w.query.get("fieldManager") for w in fk.nrt_requests() if w.method != "GET"}
        assert managers == {"nri-plrm"}

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        asyncio.run(main())
    warned = [r for r in caplog.records if "also written by 'nfd-topology-updater'" in r.message]
    assert len(warned) == 1


# ----------------------------------------------------------------- recovery


def test_recovery_after_410_409_and_404(tmp_path: Path) -> None:
    metrics = Metrics()

    async def main() -> None:
        engine = new_engine()
        fk, uid, exporter = await exporter_on_fake_kube(tmp_path, metrics, 0.05, engine)

        def current() -> bool:
            return NODE in fk.nrts and published(fk) == expected_object(
                free_per_numa(engine), fk.nodes[NODE]["metadata"]["uid"]
            )

        # 410 Gone on the update: re-read and written again
        fk.nrt_fail_next = [410]
        engine.admit_pod(small_pod("a"))
        exporter.mark_dirty()
        await exporter.settled()
        assert current() and writes(metrics, "conflict") == 1

        # someone else wrote the object: 409 Conflict, re-read, written again
        fk.rv += 1
        fk.nrts[NODE]["metadata"]["resourceVersion"] = str(fk.rv)
        fk.nrts[NODE]["zones"] = []
        engine.admit_pod(small_pod("b"))
        exporter.mark_dirty()
        await exporter.settled()
        assert current() and writes(metrics, "conflict") == 2

        # the object was deleted: 404 on the update, created again
        del fk.nrts[NODE]
        engine.admit_pod(small_pod("c"))
        exporter.mark_dirty()
        await exporter.settled()
        assert current() and fk.nrt_writes[-1].method == "POST"

        # the Node was recreated (new uid; the old object was garbage-collected with it)
        new_uid = fk.add_node(NODE)["metadata"]["uid"]
        assert new_uid != uid
        del fk.nrts[NODE]
        engine.remove_pod(small_pod("a").uid)
        exporter.mark_dirty()
        await exporter.settled()
        assert current()
        assert fk.nrts[NODE]["metadata"]["ownerReferences"][0]["uid"] == new_uid
        await exporter.stop()
        await fk.stop()
        assert_every_write_valid(fk)
        assert writes(metrics, "failed") == 0

    asyncio.run(main())


@pytest.mark.parametrize("outage", ["503", "connection refused"])
def test_writes_resume_after_an_outage(
    tmp_path: Path, outage: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    metrics = Metrics()

    async def main() -> None:
        engine = new_engine()
        fk, uid, exporter = await exporter_on_fake_kube(tmp_path, metrics, 0.05, engine)
        before = len(fk.nrt_writes)
        if outage == "503":
            fk.nrt_status = 503
        else:
            await fk.stop()
        for name in ("a", "b", "c"):
            engine.admit_pod(small_pod(name))
            failed = writes(metrics, "failed")
            exporter.mark_dirty()
            assert writes(metrics, "failed") == failed  # never tries the API on the caller's path
            await asyncio.sleep(0.2)
        await until(lambda: writes(metrics, "failed") >= 3)
        assert len(fk.nrt_writes) == before
        if outage == "503":
            fk.nrt_status = 0
        else:
            await fk.start()
        await until(
            lambda: NODE in fk.nrts and published(fk) == expected_object(free_per_numa(engine), uid)
        )
        await exporter.settled()
        assert len(fk.nrt_writes) == before + 1  # the pending changes, in one write
        await exporter.stop()
        await fk.stop()
        assert_every_write_valid(fk)

    asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([m for m in warnings if "not written" in m]) == 1, warnings
    assert len([m for m in warnings if "written again" in m]) == 1, warnings


def test_missing_crd_is_named_once_and_the_object_follows_once_installed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    metrics = Metrics()

    async def main() -> None:
        fk = FakeKube(free_port())
        uid = fk.add_node(NODE)["metadata"]["uid"]
        fk.nrt_crd = False
        await fk.start()
        engine = new_engine()
        exporter = exporter_for(fk.url, tmp_path, metrics, 0.05)
        exporter.attach(lambda: free_per_numa(engine))
        exporter.start()
        await until(lambda: writes(metrics, "failed") >= 3)
        posts = [r for r in fk.nrt_requests() if r.method == "POST"]
        assert len(posts) == writes(metrics, "failed")  # one create per attempt, no retry storm
        engine.admit_pod(small_pod("a"))
        exporter.mark_dirty()
        fk.nrt_crd = True
        await until(
            lambda: NODE in fk.nrts and published(fk) == expected_object(free_per_numa(engine), uid)
        )
        await exporter.stop()
        await fk.stop()
        assert_every_write_valid(fk)

    asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    (first, *_rest) = [m for m in warnings if "not written" in m]
    assert "noderesourcetopologies.topology.node.k8s.io is not installed" in first


def test_no_state_attached_writes_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        fk = FakeKube(free_port())
        fk.add_node(NODE)
        await fk.start()
        exporter = exporter_for(fk.url, tmp_path, Metrics(), 0.05)
        exporter.start()
        exporter.mark_dirty()
        await exporter.settled()
        assert fk.nrt_requests() == []
        await exporter.stop()
        await fk.stop()

    asyncio.run(main())


def test_device_resources_are_zone_resources() -> None:
    """Devices of the node's inventory are listed in their NUMA node's zone, as NFD's
    topology-updater lists them, and the object stays valid against the CRD."""
    engine = new_engine()
    engine.device_manager.set_node_devices({"nvidia.com/gpu": [(0,), (0,), (3,)]})
    obj = nrt_object(
        NODE, "u", free_per_numa(engine), MACHINES["default"], "single-numa-node", "pod"
    )
    assert validate(obj, SCHEMA) == []
    gpus = {
        zone["name"]: r
        for zone in obj["zones"]
        for r in zone["resources"]
        if r["name"] == "nvidia.com/gpu"
    }
    assert gpus == {
        "node-0": {"name": "nvidia.com/gpu", "capacity": "2", "allocatable": "2", "available": "2"},
        "node-3": {"name": "nvidia.com/gpu", "capacity": "1", "allocatable": "1", "available": "1"},
    }


def test_the_exporter_writes_the_exact_state(tmp_path: Path) -> None:
    """With ``exact`` attached every write carries the engine's exact state, validates against
    the CRD and reads back to the engine's free CPUs, before and after an admission."""
    from nri_plrm.podsource.nrt_exact_state import exact_attributes, read_published

    async def main() -> None:
        fk = FakeKube(free_port())
        fk.add_node(NODE)
        await fk.start()
        engine = new_engine()
        exporter = exporter_for(fk.url, tmp_path, Metrics(), 0.05)
        exporter.attach(lambda: free_per_numa(engine), tuple, lambda: exact_attributes(engine))
        exporter.start()
        await exporter.settled()
        assert read_published(fk.nrts[NODE]).free_cpus == engine.cpu_manager.available_cpus()
        engine.admit_pod(small_pod("a"))
        exporter.mark_dirty()
        await exporter.settled()
        state = read_published(fk.nrts[NODE])
        assert state.free_cpus == engine.cpu_manager.available_cpus()
        assert len(state.free_cpus) == len(engine.cpu_manager.allocatable_cpus()) - 1
        assert_every_write_valid(fk)
        await exporter.stop()
        await fk.stop()

    asyncio.run(main())
