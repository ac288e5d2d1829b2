"""The seed pods end to end: NRI messages from the manifests via the kubelet translation, sent
over a real unix socket by the runtime simulator to the plugin behind the wire stub; the
adjustments and updates on the wire are what is asserted (issue 4 acceptance)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from plrm_harness import Session, serve
from plrm_runtime import FakeRuntime

from nri_plrm.base.cpuset import CPUSet
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AssignmentType, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podsource.base import StaticPodSpecSource
from nri_plrm.topology.machines import MACHINES
from nri_plrm.topology.model import Topology
from nri_plrm.translate.manifest_to_pod import load_manifests
from nri_plrm.ttrpc.messages import TtrpcError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POD_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "pod"\n'
CONTAINER_SCOPE = '[topology_manager]\npolicy = "single-numa-node"\nscope = "container"\n'


def manifest(name: str) -> PodSpec:
    (pod,) = load_manifests([EXAMPLES / f"{name}.yaml"])
    return pod


def topology() -> Topology:
    return MACHINES["default"]


def new_engine(config_text: str) -> Engine:
    return Engine(topology(), parse_config(config_text).engine_config())


def run(
    tmp_path: Path,
    config_text: str,
    body: Callable[[Session, Plugin], Awaitable[None]],
    *,
    whole_pod: tuple[PodSpec, ...] = (),
) -> Plugin:
    plugin = Plugin(
        NodeLedger(new_engine(config_text), store=CheckpointStore(tmp_path / "state")),
        pod_specs=StaticPodSpecSource(whole_pod) if whole_pod else None,
    )

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as session:
            await body(session, plugin)

    asyncio.run(main())
    assert plugin.ledger.engine.verify() == []
    return plugin


def numa_of(cpus: CPUSet) -> set[int]:
    topo = topology()
    return {n for n, node in topo.numa_nodes.items() if cpus & node.cpus}


def reference(config_text: str, *pods: PodSpec) -> Engine:
    """The kubelet-exact result: the whole-pod admission of the same pods in the same order."""
    engine = new_engine(config_text)
    for pod in pods:
        engine.admit_pod(pod)
    return engine


@pytest.mark.parametrize("whole", [False, True], ids=["nri-only", "whole-pod"])
def test_pod_scope_mixed(tmp_path: Path, whole: bool) -> None:
    spec = manifest("pod-scope-mixed")

    async def body(s: Session, plugin: Plugin) -> None:
        rt = s.runtime
        pod = await rt.run_pod(spec)
        for ctr in spec.init_containers:
            await rt.create(pod, spec, ctr)
        resp = await rt.create(pod, spec, spec.containers[0])
        main = resp.adjust.linux.resources.cpu
        assert len(CPUSet.parse(main.cpus)) == 2
        assert main.quota.value == -1
        assert main.mems
        if not whole:
            # The pod shared pool shrank from 4 to 2 CPUs: both sidecars are updated in the reply.
            updated = {u.container_id: u.linux.resources.cpu for u in resp.update}
            sidecar_ids = {rt.id_of(pod, c.name) for c in spec.init_containers}
            assert set(updated) == sidecar_ids
            for cpu in updated.values():
                assert len(CPUSet.parse(cpu.cpus)) == 2
                assert not cpu.HasField("quota")
        main_cpus = rt.cpus_of(pod, "main-app")
        pool = rt.cpus_of(pod, "metrics-sidecar")
        assert rt.cpus_of(pod, "logging-sidecar") == pool
        assert len(pool) == 2 and not pool & main_cpus
        assert rt.applied(pod, "metrics-sidecar").quota == 400000  # kept: quota enforced
        assert len(numa_of(main_cpus | pool)) == 1
        want = reference(POD_SCOPE, spec)
        for c in spec.all_containers():
            assert rt.cpus_of(pod, c.name) == want.assignment(spec.uid, c.name).cpus  # type: ignore[union-attr]
        (view,) = plugin.ledger.pods()
        assert view.cpus == main_cpus | pool
        kinds = {c.name: c.assignment.assignment for c in view.containers if c.assignment}
        assert kinds["main-app"] is AssignmentType.POD_EXCLUSIVE
        assert kinds["metrics-sidecar"] is AssignmentType.POD_SHARED

    run(tmp_path, POD_SCOPE, body, whole_pod=(spec,) if whole else ())


@pytest.mark.parametrize("whole", [False, True], ids=["nri-only", "whole-pod"])
def test_empty_shared_pool_is_rejected_and_nothing_leaks(tmp_path: Path, whole: bool) -> None:
    spec = manifest("empty-shared-pool")

    async def body(s: Session, plugin: Plugin) -> None:
        rt = s.runtime
        free_before = plugin.ledger.engine.node_shared_pool()
        if whole:
            with pytest.raises(TtrpcError) as err:
                await rt.run_pod(spec)
            assert "TopologyAffinityError" in str(err.value)
            assert "pod-level resources failed admission" in str(err.value)
        else:
            pod = await rt.run_pod(spec)
            for ctr in spec.init_containers:
                await rt.create(pod, spec, ctr)
            with pytest.raises(TtrpcError) as err:
                await rt.create(pod, spec, spec.containers[0])
            assert "EmptyPodSharedPoolError" in str(err.value)
            assert "leaving no cpus for shared containers" in str(err.value)
            assert "main-app" in str(err.value)
            await rt.remove_pod(pod)
            await rt.settle()
        assert plugin.ledger.engine.node_shared_pool() == free_before
        assert plugin.ledger.pods() == ()

    run(tmp_path, POD_SCOPE, body, whole_pod=(spec,) if whole else ())


@pytest.mark.parametrize("whole", [False, True], ids=["nri-only", "whole-pod"])
def test_container_scope_mixed(tmp_path: Path, whole: bool) -> None:
    spec = manifest("container-scope-mixed")

    async def body(s: Session, plugin: Plugin) -> None:
        rt = s.runtime
        pod = await rt.launch(spec)
        infra = rt.applied(pod, "infrastructure-sidecar")
        assert len(CPUSet.parse(infra.cpus)) == 2 and infra.quota == -1
        node_pool = plugin.ledger.engine.node_shared_pool()
        for worker in ("worker-1", "worker-2"):
            assert rt.cpus_of(pod, worker) == node_pool
            assert rt.applied(pod, worker).quota == 400000
        assert not rt.cpus_of(pod, "infrastructure-sidecar") & node_pool
        want = reference(CONTAINER_SCOPE, spec)
        assert (
            rt.cpus_of(pod, "infrastructure-sidecar")
            == want.assignment(spec.uid, "infrastructure-sidecar").cpus
        )  # type: ignore[union-attr]
        (view,) = plugin.ledger.pods()
        assert view.cpus == CPUSet()

    run(tmp_path, CONTAINER_SCOPE, body, whole_pod=(spec,) if whole else ())


@pytest.mark.parametrize("whole", [False, True], ids=["nri-only", "whole-pod"])
def test_tightly_coupled_database(tmp_path: Path, whole: bool) -> None:
    spec = manifest("tightly-coupled-database")

    async def body(s: Session, plugin: Plugin) -> None:
        rt = s.runtime
        pod = await rt.launch(spec)
        db = rt.applied(pod, "database")
        assert len(CPUSet.parse(db.cpus)) == 6 and db.quota == -1
        pool = rt.cpus_of(pod, "metrics-exporter")
        assert rt.cpus_of(pod, "backup-agent") == pool and len(pool) == 2
        assert len(numa_of(pool | CPUSet.parse(db.cpus))) == 1
        want = reference(POD_SCOPE, spec)
        for c in spec.all_containers():
            assert rt.cpus_of(pod, c.name) == want.assignment(spec.uid, c.name).cpus  # type: ignore[union-attr]

    run(tmp_path, POD_SCOPE, body, whole_pod=(spec,) if whole else ())


@pytest.mark.parametrize("whole", [False, True], ids=["nri-only", "whole-pod"])
def test_ml_workload_container_scope(tmp_path: Path, whole: bool) -> None:
    spec = manifest("ml-workload")

    async def body(s: Session, plugin: Plugin) -> None:
        rt = s.runtime
        pod = await rt.launch(spec)
        ml = rt.applied(pod, "ml-training")
        assert len(CPUSet.parse(ml.cpus)) == 3 and ml.quota == -1
        assert len(numa_of(CPUSet.parse(ml.cpus))) == 1
        assert rt.cpus_of(pod, "service-mesh-sidecar") == plugin.ledger.engine.node_shared_pool()

    run(tmp_path, CONTAINER_SCOPE, body, whole_pod=(spec,) if whole else ())


def test_mixed_with_classic_and_best_effort_pods(tmp_path: Path) -> None:
    """Classic Guaranteed and BestEffort pods beside a pod-level pod; pool growth after removal
    reaches node-shared containers through an asynchronous UpdateContainers."""
    classic = manifest("classic-guaranteed")
    best = manifest("besteffort")
    mixed = manifest("pod-scope-mixed")

    async def body(s: Session, plugin: Plugin) -> None:
        rt: FakeRuntime = s.runtime
        be = await rt.launch(best)
        node_pool = plugin.ledger.engine.node_shared_pool()
        assert rt.cpus_of(be, "batch") == node_pool
        cg = await rt.launch(classic)
        await rt.settle()
        web, cache = rt.cpus_of(cg, "web"), rt.cpus_of(cg, "cache")
        assert len(web) == 2 and len(cache) == 1 and not web & cache
        assert rt.applied(cg, "web").quota == -1
        shrunk = plugin.ledger.engine.node_shared_pool()
        assert len(shrunk) == len(node_pool) - 3
        assert rt.cpus_of(be, "batch") == shrunk
        pm = await rt.launch(mixed)
        await rt.settle()
        assert rt.cpus_of(be, "batch") == plugin.ledger.engine.node_shared_pool()
        taken = rt.cpus_of(pm, "main-app") | rt.cpus_of(pm, "metrics-sidecar")
        assert not taken & (web | cache)
        before = len(s.sim.unsolicited)
        await rt.remove_pod(cg)
        await rt.settle()
        assert len(s.sim.unsolicited) > before
        assert rt.cpus_of(be, "batch") == plugin.ledger.engine.node_shared_pool()
        assert web | cache <= rt.cpus_of(be, "batch")

    run(tmp_path, POD_SCOPE, body)


def test_update_container_reasserts_pinning(tmp_path: Path) -> None:
    spec = manifest("pod-scope-mixed")

    async def body(s: Session, plugin: Plugin) -> None:
        rt = s.runtime
        pod = await rt.launch(spec)
        cid = rt.id_of(pod, "main-app")
        pinned = rt.applied(pod, "main-app").cpus
        from nri_plrm.proto import nri_api_pb2 as api

        kubelet = api.LinuxResources()
        kubelet.cpu.cpus = "0-63"
        kubelet.cpu.quota.value = 200000
        resp = await rt.update(cid, kubelet)
        (update,) = resp.update
        assert update.container_id == cid
        assert update.linux.resources.cpu.cpus == pinned
        assert update.linux.resources.cpu.quota.value == -1
        assert rt.applied(pod, "main-app").cpus == pinned

    run(tmp_path, POD_SCOPE, body)


def test_stop_container_twice_is_idempotent(tmp_path: Path) -> None:
    spec = manifest("classic-guaranteed")

    async def body(s: Session, plugin: Plugin) -> None:
        rt = s.runtime
        pod = await rt.launch(spec)
        cid = rt.id_of(pod, "migrate-schema")
        state = plugin.ledger.snapshot()
        await rt.stop(cid)
        assert plugin.ledger.snapshot()["engine"]["cpu"] == state["engine"]["cpu"]

    run(tmp_path, POD_SCOPE, body)


def test_containerd_2_1_state_change_events(tmp_path: Path) -> None:
    """NRI v0.8 (containerd 2.0/2.1): pod events arrive through StateChange, the event mask
    must stay within 0x7FF; the pod-scope-mixed result is the same."""
    spec = manifest("pod-scope-mixed")
    plugin = Plugin(NodeLedger(new_engine(POD_SCOPE), store=CheckpointStore(tmp_path / "state")))
    plugin.ledger.open()

    async def main() -> None:
        async with serve(
            plugin, str(tmp_path / "nri.sock"), nri_version="v0.8.0", runtime_version="v2.1.4"
        ) as s:
            assert s.sim.session is not None
            assert s.sim.session.events & ~0x7FF == 0
            pod = await s.runtime.launch(spec)
            assert len(s.runtime.cpus_of(pod, "main-app")) == 2
            assert s.runtime.applied(pod, "main-app").quota == -1
            assert any(r.method == "StateChange" for r in s.sim.records)
            await s.runtime.remove_pod(pod)
            await s.runtime.settle()
        assert plugin.ledger.pods() == ()

    asyncio.run(main())


def test_whole_pod_admission_shrink_reaches_node_shared_containers(tmp_path: Path) -> None:
    """Whole-pod mode reserves the budget at RunPodSandbox: the node-shared containers' smaller
    pool is sent once the pod's first container started, not in any reply of the pod start."""
    best = manifest("besteffort")
    mixed = manifest("pod-scope-mixed")

    async def body(s: Session, plugin: Plugin) -> None:
        rt = s.runtime
        be = await rt.launch(best)
        wide = rt.cpus_of(be, "batch")
        pod = await rt.run_pod(mixed)
        resp = await rt.create(pod, mixed, mixed.init_containers[0])
        assert not [u for u in resp.update if u.container_id == rt.id_of(be, "batch")]
        await rt.start(rt.id_of(pod, mixed.init_containers[0].name))
        await rt.settle()
        narrow = rt.cpus_of(be, "batch")
        assert (
            narrow
            == plugin.ledger.engine.node_shared_pool()
            == wide - plugin.ledger.engine.pod_cpus(mixed.uid)
        )  # type: ignore[operator]

    run(tmp_path, POD_SCOPE, body, whole_pod=(best, mixed))
