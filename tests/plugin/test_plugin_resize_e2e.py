"""In-place resize end to end over the runtime simulator (issue 13 acceptance): grow, shrink and
refused resizes of an exclusive container, a pod-shared container and a pod budget, in both
scopes, in API (whole-pod) and NRI-only mode. After each, the container's cpuset and quota are
what the kubelet would hold, or the request failed with the kubelet's message and nothing
changed (the engine state, the applied cpusets and the durable state)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from plrm_harness import Session
from plrm_runtime import FakeRuntime
from resize_session import (
    MODES,
    SCOPES,
    Events,
    budget_pod,
    classic_pod,
    config_text,
    errors,
    guaranteed,
    refused,
    reopen,
    resources_of,
    run,
    snapshot,
)

from nri_plrm.engine.resize import (
    CPU_STATIC_MESSAGE,
    POD_LEVEL_GATE_MESSAGE,
    PROHIBITED_CPU_ALLOCATION_ERROR,
)
from nri_plrm.engine.spec import AssignmentType, ContainerSpec, PodSpec
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.translate.pod_to_cri import nri_pod_sandbox


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
    text = config_text(scope, budget_cpus=True)

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

    run(tmp_path, config_text("pod", pod_level=False), mode, pod, body)


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
