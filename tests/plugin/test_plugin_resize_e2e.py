"""In-place resize end to end over the runtime simulator (issue 13 acceptance): grow, shrink and
refused resizes of an exclusive container, a pod-shared container and a pod budget, in both
scopes, in API (whole-pod) and NRI-only mode. After each, the container's cpuset and quota are
what the kubelet would hold, or the request failed with the kubelet's message and nothing
changed (the engine state, the applied cpusets and the durable state)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from plrm_harness import Session, serve
from plrm_runtime import FakeRuntime

from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config_file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.resize import (
    CPU_STATIC_MESSAGE,
    POD_LEVEL_GATE_MESSAGE,
    PROHIBITED_CPU_ALLOCATION_ERROR,
)
from nri_plrm.engine.spec import AssignmentType, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.metrics import Metrics
from nri_plrm.plugin import Plugin
from nri_plrm.podsource.base import StaticPodSpecSource
from nri_plrm.proto import nri_api_pb2 as api
from nri_plrm.topology.machines import MACHINES
from nri_plrm.translate.pod_to_cri import nri_container, nri_pod_sandbox
from nri_plrm.ttrpc.messages import TtrpcError

GI = 1 << 30
SCOPES = ("pod", "container")
MODES = ("api", "nri")


def config_text(scope: str, *, cpus: bool = False, pod_level: bool = False) -> str:
    return (
        f'[topology_manager]\npolicy = "single-numa-node"\nscope = "{scope}"\n'
        f"[resize]\nexclusive_cpus = {str(cpus).lower()}\n"
        f"pod_level_resources = {str(pod_level).lower()}\n"
    )


def guaranteed(name: str, millis: int, memory: int = GI) -> ContainerSpec:
    res = {"cpu": millis, "memory": memory}
    return ContainerSpec(name, requests=res, limits=res)


def classic_pod() -> PodSpec:
    """Exclusive ``app`` (2 CPUs) and a 500m ``helper``: 2.5 CPUs, classic in both modes."""
    return PodSpec(
        uid="uid-classic",
        name="classic",
        containers=(guaranteed("app", 2000), guaranteed("helper", 500, GI // 4)),
    )


def budget_pod(cpus: int = 4) -> PodSpec:
    """A pod budget with an exclusive ``main`` (2 CPUs) and a ``sidecar`` without resources."""
    res = {"cpu": cpus * 1000, "memory": 4 * GI}
    return PodSpec(
        uid="uid-budget",
        name="budget",
        requests=res,
        limits=res,
        containers=(guaranteed("main", 2000), ContainerSpec("sidecar")),
    )


Body = Callable[[FakeRuntime, Session, Plugin], Awaitable[None]]


class Events:
    """The Events the plugin posts (reason, message), as the API-mode recorder receives them."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []

    def record(self, pod_uid: str, namespace: str, name: str, reason: str, message: str) -> None:
        self.posted.append((reason, message))


def run(
    tmp_path: Path, text: str, mode: str, pod: PodSpec, body: Body, events: Events | None = None
) -> Plugin:
    metrics = Metrics()
    plugin = Plugin(
        NodeLedger(
            Engine(MACHINES["default"], parse_config(text).engine_config()),
            store=CheckpointStore(tmp_path / "state"),
            observer=metrics,
        ),
        pod_specs=StaticPodSpecSource((pod,)) if mode == "api" else None,
        metrics=metrics,
        events=events,
    )
    plugin.ledger.open()

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as session:
            await body(session.runtime, session, plugin)
        assert plugin.ledger.engine.verify() == []

    asyncio.run(main())
    return plugin


def resources_of(pod: PodSpec, name: str) -> api.LinuxResources:
    """The resources the kubelet sends in UpdateContainerResources for the resized spec."""
    spec = pod.container(name)
    assert spec is not None
    return nri_container(pod, spec).linux.resources


def snapshot(plugin: Plugin) -> str:
    return json.dumps(plugin.ledger.snapshot(0), sort_keys=True, default=str)


async def refused(
    rt: FakeRuntime, plugin: Plugin, call: Awaitable[object], message: str
) -> TtrpcError:
    """The request fails with ``message`` and nothing changes."""
    state = snapshot(plugin)
    applied = {cid: (rc.applied.cpus, rc.applied.quota) for cid, rc in rt.containers.items()}
    with pytest.raises(TtrpcError) as info:
        await call
    assert message in str(info.value)
    assert snapshot(plugin) == state
    await rt.settle()
    assert {cid: (rc.applied.cpus, rc.applied.quota) for cid, rc in rt.containers.items()} == (
        applied
    )
    return info.value


def errors(plugin: Plugin, resource: str = "cpu") -> float:
    assert plugin.metrics is not None
    total = 0.0
    for source in ("pod", "node"):
        value = plugin.metrics.registry.get_sample_value(
            "resource_manager_allocation_errors_total",
            {"resource_name": resource, "source": source},
        )
        total += value or 0.0
    return total


def reopen(tmp_path: Path, text: str) -> Plugin:
    again = Plugin(
        NodeLedger(
            Engine(MACHINES["default"], parse_config(text).engine_config()),
            store=CheckpointStore(tmp_path / "state"),
        )
    )
    again.ledger.open()
    return again


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scope", SCOPES)
def test_exclusive_container_resize_refused_by_default(
    tmp_path: Path, scope: str, mode: str
) -> None:
    pod = classic_pod()

    async def body(rt: FakeRuntime, s: Session, plugin: Plugin) -> None:
        sandbox = await rt.launch(pod)
        cid = rt.id_of(sandbox, "app")
        grown = replace(pod, containers=(guaranteed("app", 3000), pod.containers[1]))
        before = errors(plugin)
        call = s.sim.update_container(sandbox, rt.containers[cid].msg, resources_of(grown, "app"))
        await refused(rt, plugin, call, CPU_STATIC_MESSAGE)
        assert errors(plugin) == before + 1
        assert len(rt.cpus_of(sandbox, "app")) == 2

    run(tmp_path, config_text(scope), mode, pod, body)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scope", SCOPES)
def test_exclusive_container_grows_shrinks_and_refuses_below_baseline(
    tmp_path: Path, scope: str, mode: str
) -> None:
    pod = classic_pod()
    text = config_text(scope, cpus=True)

    async def body(rt: FakeRuntime, s: Session, plugin: Plugin) -> None:
        sandbox = await rt.launch(pod)
        cid = rt.id_of(sandbox, "app")
        base = rt.cpus_of(sandbox, "app")
        assert len(base) == 2 and rt.applied(sandbox, "app").quota == -1

        def resized(millis: int) -> PodSpec:
            return replace(pod, containers=(guaranteed("app", millis), pod.containers[1]))

        await rt.update(cid, resources_of(resized(4000), "app"))
        grown = rt.cpus_of(sandbox, "app")
        assert len(grown) == 4 and base <= grown
        assert rt.applied(sandbox, "app").quota == -1
        held = plugin.ledger.engine.assignment(pod.uid, "app")
        assert held is not None and held.cpus == grown
        assert held.assignment is AssignmentType.NODE_EXCLUSIVE
        helper = rt.cpus_of(sandbox, "helper")
        assert helper == plugin.ledger.engine.node_shared_pool() and not helper & grown

        await rt.update(cid, resources_of(resized(3000), "app"))
        shrunk = rt.cpus_of(sandbox, "app")
        assert len(shrunk) == 3 and base <= shrunk <= grown
        assert rt.cpus_of(sandbox, "helper") == plugin.ledger.engine.node_shared_pool()

        call = s.sim.update_container(
            sandbox, rt.containers[cid].msg, resources_of(resized(1000), "app")
        )
        err = await refused(rt, plugin, call, PROHIBITED_CPU_ALLOCATION_ERROR)
        assert "promised CPUs = 2, guaranteed CPUs = 1" in str(err)

    plugin = run(tmp_path, text, mode, pod, body)
    held = plugin.ledger.engine.assignment(pod.uid, "app")
    again = reopen(tmp_path, text)
    assert again.ledger.engine.assignment(pod.uid, "app") == held
    assert again.ledger.engine.node_shared_pool() == plugin.ledger.engine.node_shared_pool()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scope", SCOPES)
def test_pod_shared_container_resize_changes_quota_only(
    tmp_path: Path, scope: str, mode: str
) -> None:
    pod = budget_pod()

    async def body(rt: FakeRuntime, s: Session, plugin: Plugin) -> None:
        sandbox = await rt.launch(pod)
        cid = rt.id_of(sandbox, "sidecar")
        pool = rt.cpus_of(sandbox, "sidecar")
        main = rt.cpus_of(sandbox, "main")
        limited = ContainerSpec("sidecar", requests={"cpu": 1500}, limits={"cpu": 1500})
        resized = replace(pod, containers=(pod.containers[0], limited))
        await rt.update(cid, resources_of(resized, "sidecar"))
        assert rt.cpus_of(sandbox, "sidecar") == pool
        assert rt.applied(sandbox, "sidecar").quota == 150000
        assert rt.cpus_of(sandbox, "main") == main
        expected = AssignmentType.POD_SHARED if scope == "pod" else AssignmentType.NODE_SHARED
        held = plugin.ledger.engine.assignment(pod.uid, "sidecar")
        assert held is not None and held.assignment is expected

    run(tmp_path, config_text(scope, cpus=True), mode, pod, body)


@pytest.mark.parametrize("mode", MODES)
def test_pod_shared_container_resize_refused_by_default(tmp_path: Path, mode: str) -> None:
    pod = budget_pod()

    async def body(rt: FakeRuntime, s: Session, plugin: Plugin) -> None:
        sandbox = await rt.launch(pod)
        cid = rt.id_of(sandbox, "sidecar")
        limited = ContainerSpec("sidecar", requests={"cpu": 1500}, limits={"cpu": 1500})
        resized = replace(pod, containers=(pod.containers[0], limited))
        call = s.sim.update_container(
            sandbox, rt.containers[cid].msg, resources_of(resized, "sidecar")
        )
        await refused(rt, plugin, call, CPU_STATIC_MESSAGE)

    run(tmp_path, config_text("pod"), mode, pod, body)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scope", SCOPES)
def test_pod_budget_grows_shrinks_and_refuses(tmp_path: Path, scope: str, mode: str) -> None:
    pod = budget_pod()
    text = config_text(scope, pod_level=True)

    async def body(rt: FakeRuntime, s: Session, plugin: Plugin) -> None:
        sandbox = await rt.launch(pod)
        main = rt.cpus_of(sandbox, "main")
        scid = rt.id_of(sandbox, "sidecar")

        async def resize(cpus: int) -> None:
            resized = budget_pod(cpus)
            await s.sim.update_pod_sandbox(
                sandbox, None, nri_pod_sandbox(resized).linux.pod_resources
            )
            await rt.settle()
            # The kubelet then updates the containers whose limits follow the pod's.
            await rt.update(scid, resources_of(resized, "sidecar"))

        await resize(6)
        assert rt.cpus_of(sandbox, "main") == main
        bubble = plugin.ledger.engine.pod_cpus(pod.uid)
        if scope == "pod":
            assert bubble is not None and len(bubble) == 6 and main <= bubble
            assert rt.cpus_of(sandbox, "sidecar") == bubble - main
        else:
            assert bubble is None
            assert rt.cpus_of(sandbox, "sidecar") == plugin.ledger.engine.node_shared_pool()
        await resize(3)
        assert rt.cpus_of(sandbox, "main") == main
        if scope == "pod":
            shrunk = plugin.ledger.engine.pod_cpus(pod.uid)
            assert shrunk is not None and len(shrunk) == 3 and shrunk <= (bubble or shrunk)
            assert rt.cpus_of(sandbox, "sidecar") == shrunk - main
            assert not (bubble or shrunk) - shrunk & rt.cpus_of(sandbox, "sidecar")
            call = s.sim.update_pod_sandbox(
                sandbox, None, nri_pod_sandbox(budget_pod(2)).linux.pod_resources
            )
            await refused(rt, plugin, call, "leaving no cpus for shared containers")

    run(tmp_path, text, mode, pod, body)


@pytest.mark.parametrize("mode", MODES)
def test_pod_budget_resize_refused_without_the_gate(tmp_path: Path, mode: str) -> None:
    pod = budget_pod()

    async def body(rt: FakeRuntime, s: Session, plugin: Plugin) -> None:
        sandbox = await rt.launch(pod)
        call = s.sim.update_pod_sandbox(
            sandbox, None, nri_pod_sandbox(budget_pod(6)).linux.pod_resources
        )
        await refused(rt, plugin, call, POD_LEVEL_GATE_MESSAGE)

    run(tmp_path, config_text("pod"), mode, pod, body)


def test_api_mode_follows_the_resize_from_the_watch(tmp_path: Path) -> None:
    """The pod cache reports the new spec: the resize runs at once and the containers get their
    cpusets (an asynchronous update); the kubelet's UpdateContainer then finds it done. With the
    default gates the same report is refused: counted, nothing changes."""
    pod = classic_pod()
    grown = replace(pod, containers=(guaranteed("app", 4000), pod.containers[1]))

    async def body(rt: FakeRuntime, s: Session, plugin: Plugin) -> None:
        sandbox = await rt.launch(pod)
        base = rt.cpus_of(sandbox, "app")
        plugin.follow_pod(grown)
        await rt.settle()
        cpus = rt.cpus_of(sandbox, "app")
        assert len(cpus) == 4 and base <= cpus and rt.applied(sandbox, "app").quota == -1
        assert rt.cpus_of(sandbox, "helper") == plugin.ledger.engine.node_shared_pool()
        await rt.update(rt.id_of(sandbox, "app"), resources_of(grown, "app"))
        assert rt.cpus_of(sandbox, "app") == cpus

    run(tmp_path / "on", config_text("pod", cpus=True), "api", pod, body)

    async def refused_body(rt: FakeRuntime, s: Session, plugin: Plugin) -> None:
        sandbox = await rt.launch(pod)
        state, before = snapshot(plugin), errors(plugin)
        plugin.follow_pod(grown)
        await rt.settle()
        assert snapshot(plugin) == state and errors(plugin) == before + 1
        assert len(rt.cpus_of(sandbox, "app")) == 2
        assert events.posted == [("Infeasible", CPU_STATIC_MESSAGE)]
        cid = rt.id_of(sandbox, "app")
        call = s.sim.update_container(sandbox, rt.containers[cid].msg, resources_of(grown, "app"))
        await refused(rt, plugin, call, CPU_STATIC_MESSAGE)
        assert len(events.posted) == 2

    events = Events()
    run(tmp_path / "off", config_text("pod"), "api", pod, refused_body, events)
