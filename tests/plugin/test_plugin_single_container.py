"""NRI-only single-container inference (issue 13): a pod whose one container asks for exactly the
pod's budget is the classic Guaranteed pod it most likely is: exclusive CPUs, CFS quota -1 and
node-level reporting (PodResources, the assignments gauge), in both scopes; a second container
of the same pod demotes it to the pod's shared pool with the budget's quota (an ``update`` in the
second container's CreateContainer reply). API mode stays exact."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from plrm_harness import serve

from nri_plrm.checkpoint.journal import DecisionJournal
from nri_plrm.checkpoint.store import CheckpointStore
from nri_plrm.config.file import parse_config
from nri_plrm.engine.facade import Engine
from nri_plrm.engine.spec import AssignmentType, ContainerSpec, PodSpec
from nri_plrm.ledger import NodeLedger
from nri_plrm.observability.metrics import Metrics
from nri_plrm.plugin.handlers import Plugin
from nri_plrm.podresources.report import pod_message
from nri_plrm.topology.machines import MACHINES
from nri_plrm.ttrpc.messages import TtrpcError

GI = 1 << 30
SCOPES = ("pod", "container")


def config(scope: str) -> str:
    return f'[topology_manager]\npolicy = "single-numa-node"\nscope = "{scope}"\n'


def classic_single() -> PodSpec:
    res = {"cpu": 4000, "memory": 2 * GI}
    return PodSpec(
        uid="uid-one", name="one", containers=(ContainerSpec("app", requests=res, limits=res),)
    )


def pod_level_two() -> PodSpec:
    """A pod budget whose containers set no resources: both share the pool."""
    res = {"cpu": 4000, "memory": 2 * GI}
    return PodSpec(
        uid="uid-one",
        name="one",
        requests=res,
        limits=res,
        containers=(ContainerSpec("app"), ContainerSpec("logger")),
    )


def new_plugin(tmp_path: Path, scope: str) -> Plugin:
    metrics = Metrics()
    plugin = Plugin(
        NodeLedger(
            Engine(MACHINES["default"], parse_config(config(scope)).engine_config()),
            store=CheckpointStore(tmp_path / "state"),
            observer=metrics,
        ),
        metrics=metrics,
    )
    plugin.ledger.open()
    metrics.attach_view(plugin.ledger, MACHINES["default"])
    return plugin


def gauge(plugin: Plugin, kind: AssignmentType) -> float:
    assert plugin.metrics is not None
    plugin.metrics.update_view_gauges()
    value = plugin.metrics.registry.get_sample_value(
        "resource_manager_container_assignments",
        {"resource_name": "cpu", "assignment_type": kind.value},
    )
    return value or 0.0


@pytest.mark.parametrize("scope", SCOPES)
def test_single_container_is_a_classic_guaranteed_container(tmp_path: Path, scope: str) -> None:
    spec = classic_single()
    plugin = new_plugin(tmp_path, scope)

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            pod = await s.runtime.launch(spec)
            applied = s.runtime.applied(pod, "app")
            assert applied.quota == -1
            cpus = s.runtime.cpus_of(pod, "app")
            assert len(cpus) == 4
            (view,) = plugin.ledger.pods()
            (app,) = view.containers
            assert app.assignment is not None
            assert app.assignment.assignment is AssignmentType.NODE_EXCLUSIVE
            msg = pod_message(view)
            assert list(msg.containers[0].cpu_ids) == cpus.sorted()
            assert list(msg.cpu_ids) == []
            assert gauge(plugin, AssignmentType.NODE_EXCLUSIVE) == 1
            assert gauge(plugin, AssignmentType.POD_SHARED) == 0
            # What the kubelet holds for the same classic pod.
            kubelet = Engine(MACHINES["default"], parse_config(config(scope)).engine_config())
            kubelet.admit_pod(spec)
            assert kubelet.assignment(spec.uid, "app") == plugin.ledger.engine.assignment(
                spec.uid, "app"
            )
        again = new_plugin(tmp_path, scope)
        held = again.ledger.engine.assignment(spec.uid, "app")
        assert held is not None and held.assignment is AssignmentType.NODE_EXCLUSIVE

    asyncio.run(main())


@pytest.mark.parametrize("scope", SCOPES)
def test_second_container_demotes_the_first(tmp_path: Path, scope: str) -> None:
    spec = pod_level_two()
    plugin = new_plugin(tmp_path, scope)

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt = s.runtime
            pod = await rt.run_pod(spec)
            await rt.create(pod, spec, spec.containers[0])
            first = rt.id_of(pod, "app")
            assert rt.applied(pod, "app").quota == -1
            resp = await rt.create(pod, spec, spec.containers[1])
            (update,) = [u for u in resp.update if u.container_id == first]
            assert update.linux.resources.cpu.quota.value == 400000
            assert rt.applied(pod, "app").quota == 400000
            held = plugin.ledger.engine.assignment(spec.uid, "app")
            logger = plugin.ledger.engine.assignment(spec.uid, "logger")
            assert held is not None and logger is not None
            assert not held.exclusive and held.cpus == logger.cpus
            assert rt.cpus_of(pod, "app") == rt.cpus_of(pod, "logger") == held.cpus
            expected = AssignmentType.POD_SHARED if scope == "pod" else AssignmentType.NODE_SHARED
            assert held.assignment is logger.assignment is expected
            assert gauge(plugin, AssignmentType.NODE_EXCLUSIVE) == 0
            # The same as a pod-level pod seen whole.
            whole = Engine(MACHINES["default"], parse_config(config(scope)).engine_config())
            whole.admit_pod(spec)
            same = whole.assignment(spec.uid, "app")
            assert same is not None and same.cpus == held.cpus
            assert first in rt.containers
        again = new_plugin(tmp_path, scope)
        assert again.ledger.engine.assignment(spec.uid, "app") == plugin.ledger.engine.assignment(
            spec.uid, "app"
        )
        assert again.ledger.engine.verify() == []

    asyncio.run(main())


def updates_to_others(sim: object, cids: set[str]) -> int:
    """Updates of these containers the runtime received in UpdateContainers requests."""
    return sum(
        1
        for request in sim.unsolicited  # type: ignore[attr-defined]
        for u in request.update
        if u.container_id in cids
    )


def test_promotion_and_demotion_send_no_update_to_other_pods(tmp_path: Path) -> None:
    """A promotion frees the pod's budget and its first placement takes it back; a demotion
    does the reverse: the node shared pool ends where it started, so the best-effort
    containers of other pods on it get no update (and their views stay right)."""
    spec = pod_level_two()
    besteffort = [
        PodSpec(uid=f"be-{i}", name=f"be-{i}", containers=(ContainerSpec("c"),)) for i in range(3)
    ]
    plugin = new_plugin(tmp_path, "pod")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt = s.runtime
            others = [await rt.launch(p) for p in besteffort]
            other_ids = {rt.id_of(p, "c") for p in others}
            pod = await rt.run_pod(spec)
            first = await rt.create(pod, spec, spec.containers[0])
            second = await rt.create(pod, spec, spec.containers[1])
            assert rt.applied(pod, "app").quota == 400000  # promoted, then demoted
            # No reply carries another pod's container: the admission's shrink is sent once,
            # after the start, and the demotion's update of the first container is in the reply.
            assert not first.update
            assert {u.container_id for u in second.update} == {rt.id_of(pod, "app")}
            for name in ("app", spec.containers[1].name):
                await rt.start(rt.id_of(pod, name))
            await rt.settle()
            assert updates_to_others(s.sim, other_ids) == len(other_ids)
            pool = plugin.ledger.engine.node_shared_pool()
            for p in others:
                assert rt.cpus_of(p, "c") == pool
            views = {v.uid: v for v in plugin.ledger.pods()}
            for p in besteffort:
                (c,) = views[p.uid].containers
                assert c.assignment is not None and c.assignment.cpus == pool

    asyncio.run(main())


def shared_with_quota_minus_one(plugin: Plugin, rt: object) -> list[str]:
    """Containers the plugin holds on a shared pool that the runtime runs unthrottled."""
    engine = plugin.ledger.engine
    found = []
    for pod in rt.pods.values():  # type: ignore[attr-defined]
        for rc in rt.containers.values():  # type: ignore[attr-defined]
            if rc.msg.pod_sandbox_id != pod.id:
                continue
            assignment = engine.assignment(pod.uid, rc.msg.name)
            if assignment is not None and not assignment.exclusive and rc.applied.quota == -1:
                found.append(f"{pod.name}/{rc.msg.name}")
    return found


def test_a_demotion_on_create_container_never_leaves_quota_minus_one(tmp_path: Path) -> None:
    """CreateContainer path (issue 28): the promoted first container gets the budget's quota in
    the reply that demotes the pod; when the second container is refused after the demotion,
    the pod is promoted again and the first container keeps its exclusive CPUs; a later
    container demotes it for good. At no step does a shared container run with quota -1.
    Scope pod: the pod budget refuses a slice that leaves its pool empty."""
    budget = {"cpu": 4000, "memory": 2 * GI}
    greedy = {"cpu": 4000, "memory": GI}
    spec = PodSpec(
        uid="uid-one",
        name="one",
        requests=budget,
        limits=budget,
        containers=(
            ContainerSpec("app"),
            ContainerSpec("greedy", requests=greedy, limits=greedy),  # would empty the pool
            ContainerSpec("logger"),
        ),
    )
    plugin = new_plugin(tmp_path, "pod")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt = s.runtime
            pod = await rt.run_pod(spec)
            await rt.create(pod, spec, spec.containers[0])
            assert rt.applied(pod, "app").quota == -1  # promoted
            assert shared_with_quota_minus_one(plugin, rt) == []
            with pytest.raises(TtrpcError):
                await rt.create(pod, spec, spec.containers[1])
            await rt.settle()
            assert shared_with_quota_minus_one(plugin, rt) == []
            app = plugin.ledger.engine.assignment(spec.uid, "app")
            assert app is not None and app.exclusive  # promoted again
            await rt.create(pod, spec, spec.containers[2])
            await rt.settle()
            assert rt.applied(pod, "app").quota == 400_000
            assert shared_with_quota_minus_one(plugin, rt) == []

    asyncio.run(main())


def test_a_step_and_its_container_are_one_journal_record_and_a_refusal_none(
    tmp_path: Path,
) -> None:
    """Issue 27: a promotion or demotion and the container it is for are one decision: one
    ``readmit`` journal record; when the container is refused after the step, nothing was
    decided: no record, the engine exactly as before, no update to send."""
    budget = {"cpu": 4000, "memory": 2 * GI}
    greedy = {"cpu": 4000, "memory": GI}
    spec = PodSpec(
        uid="uid-one",
        name="one",
        requests=budget,
        limits=budget,
        containers=(
            ContainerSpec("app"),
            ContainerSpec("greedy", requests=greedy, limits=greedy),  # would empty the pool
        ),
    )
    plugin = new_plugin(tmp_path, "pod")
    ledger = plugin.ledger

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock")) as s:
            rt = s.runtime
            pod = await rt.run_pod(spec)
            admitted = ledger.decisions
            await rt.create(pod, spec, spec.containers[0])
            assert ledger.decisions == admitted + 1
            last = ledger.persistence.records[-1]
            assert (last["op"], last["kind"], last["name"]) == ("readmit", "promote", "app")
            await rt.settle()
            before = ledger.engine.snapshot(), ledger.decisions
            sent = len(s.sim.unsolicited)
            with pytest.raises(TtrpcError):
                await rt.create(pod, spec, spec.containers[1])
            await rt.settle()
            assert (ledger.engine.snapshot(), ledger.decisions) == before
            assert len(s.sim.unsolicited) == sent
        again = new_plugin(tmp_path, "pod")
        assert again.ledger.engine.snapshot() == ledger.engine.snapshot()

    asyncio.run(main())


def test_readmit_records_replay_after_a_crash(tmp_path: Path) -> None:
    """The journal's ``readmit`` records (a promotion with its container, then a demotion with
    the next one) bring a restarted plugin to the state decided, before any checkpoint."""
    spec = pod_level_two()
    plugin = new_plugin(tmp_path, "pod")

    async def main() -> None:
        async with serve(plugin, str(tmp_path / "nri.sock"), clean_stop=False) as s:
            pod = await s.runtime.run_pod(spec)
            for container in spec.containers:
                await s.runtime.create(pod, spec, container)

    asyncio.run(main())
    _, records, damaged = DecisionJournal(tmp_path / "state").read(quarantine=False)
    ops = [(r["op"], r.get("kind")) for r in records]
    assert damaged is None and ops[-2:] == [("readmit", "promote"), ("readmit", "demote")]
    again = new_plugin(tmp_path, "pod")
    assert again.ledger.engine.snapshot() == plugin.ledger.engine.snapshot()
    assert again.ledger.tables == plugin.ledger.tables
    assert again.ledger.engine.verify() == []
